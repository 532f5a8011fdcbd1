"""The scheduler's operations of the index store (``rung_trials``, ``pause``,
``requeue_stale``, ``finish_paused``) through ``grpc://``: the same answers as the database's,
and a promotion-ASHA sweep run through the proxy ends as it does directly."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.proxy.server import ProxyServer
from sweeper.spec import SweepSpec
from sweeper.study import create_or_resume, open_storage
from tests.support.asha_objectives import curve
from tests.support.helpers import make_spec
from trial_runner.promotion import run_scheduled
from trial_runner.runner import RunnerSettings

SCHEDULER = {"type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9,
             "reduction_factor": 3}


@pytest.fixture
def proxy_url(storage_url: str) -> Iterator[str]:
    server = ProxyServer(storage_url, port=0).start()
    yield server.url
    server.stop(0)


def _spec(trials: int = 9) -> SweepSpec:
    return make_spec(name="asha-proxy", trials=trials, scheduler=SCHEDULER,
                     trial={"entrypoint": "tests.support.asha_objectives:curve",
                            "fixed": {"steps": 9}},
                     parameters={"a": {"type": "int", "low": 0, "high": trials - 1}})


def test_a_sweep_through_the_proxy_pauses_promotes_and_ends(proxy_url: str, storage_url: str,
                                                            tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(proxy_url), _spec())
    settings = RunnerSettings(heartbeat_interval_s=0.2, checkpoint_root=tmp_path / "ckpt")
    outs = [run_scheduled(sweep, i, curve, settings) for i in range(9)]
    assert [o.state for o in outs] == [protocol.PAUSED] * 9
    trials = {int(t.params["a"]): t for t in sweep.study().trials}
    assert trials[0].state == TrialState.COMPLETE
    assert sorted(trials[0].intermediate_values) == list(range(10))
    assert {t.state for a, t in trials.items() if a} == {TrialState.PRUNED}
    # the direct path reads what the proxy wrote, the same way
    direct = open_storage(storage_url)
    steps = [1, 3]
    assert direct.rung_trials(sweep.study_id, steps) == \
        sweep.storage.rung_trials(sweep.study_id, steps)


def test_pause_claim_requeue_and_finish_through_the_proxy(proxy_url: str,
                                                          tmp_path: Path) -> None:
    storage = open_storage(proxy_url)
    sweep, _ = create_or_resume(storage, _spec(trials=3))
    tid = storage.attempts(sweep.study_id, 0)[0].trial_id
    assert storage.claim(tid)
    storage.set_trial_intermediate_value(tid, 1, 0.5)
    assert storage.pause(tid, 0)
    assert not storage.pause(tid, 0)  # not RUNNING any more
    (t,) = storage.rung_trials(sweep.study_id, [1])
    assert (t.state, t.rung, t.paused, t.values) == (TrialState.WAITING, 0, True, ((1, 0.5),))
    storage.record_heartbeat(tid)  # a frozen promoter's late beat after the put-back
    assert storage.claim(tid)  # the promotion's claim, all the same
    assert not storage.claim(tid)
    assert storage.requeue_stale(sweep.study_id, 60.0) == []  # fresh: the promoter lives
    back: list[int] = []
    while not back:  # a wait, not a timed assertion: the heartbeat of a dead claim only ages
        time.sleep(0.3)  # (SQLite's CURRENT_TIMESTAMP counts whole seconds)
        back = storage.requeue_stale(sweep.study_id, 0.5)
    assert back == [tid]
    (t,) = storage.rung_trials(sweep.study_id, [1])
    assert (t.state, t.paused) == (TrialState.WAITING, True)
    assert storage.finish_paused(sweep.study_id) == [tid]
    assert storage.finish_paused(sweep.study_id) == []
    assert not storage.claim(tid)  # the end's PRUNED and a claim never both win
    frozen = storage.get_trial(tid)
    assert frozen.state == TrialState.PRUNED and frozen.user_attrs[protocol.RUNG_ATTR] == 0
