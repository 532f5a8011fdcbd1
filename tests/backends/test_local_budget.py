"""The ledger and the budget on the local backend, with real worker processes on both
storages: a worker stopped by a SIGTERM from outside is recorded as preempted and its index
retried without using a retry; a worker killed outright is closed once by whoever found it;
the budget is overshot by at most what the trials already running needed to finish."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.accounting import Ending, Usage
from sweeper.backends.local import LocalBackend
from sweeper.study import Sweep, create_or_resume, open_storage
from sweeper.study.ledger import sweep_ledger
from tests.support.helpers import make_spec

OBJECTIVES = '''
import os
import signal
import time


def evicted(ctx):
    for step in range(1, 4):
        ctx.report(step, loss=1.0 / step)
    if ctx.index == 1 and ctx.attempt == 0:
        os.kill(os.getpid(), signal.SIGTERM)  # stopped from outside, as a pod is evicted
        time.sleep(30)
    if ctx.index == 2 and ctx.attempt == 0:
        ctx.should_prune()  # the reports so far are written
        os.kill(os.getpid(), signal.SIGKILL)  # killed outright: its closer closes it
    return ctx.params["x"]


def long_steps(ctx):
    start = 0
    resumed = ctx.load_checkpoint()
    if resumed is not None:
        start = resumed[1]
    for step in range(start + 1, 401):
        ctx.report(step, loss=1.0 / step)
        ctx.save_checkpoint({"step": step}, step=step)
        time.sleep(0.05)
    return ctx.params["x"]


def steps(ctx):
    for step in range(1, 11):
        ctx.report(step, loss=1.0 / step)
        time.sleep(0.02)
    return ctx.params["x"]
'''

#: Steps each trial of ``steps`` trains.
STEPS = 10


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "objectives.py").write_text(OBJECTIVES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPER_HEARTBEAT_INTERVAL", "0.2")
    monkeypatch.setenv("SWEEPER_GRACE_PERIOD", "3")
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SWEEPER_CODE_VERSION", "test")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def _sweep(url: str, entrypoint: str, n: int, **kw: object) -> Sweep:
    spec = make_spec(name="local", parallelism=2,
                     trial={"entrypoint": entrypoint, "fixed": {}, "retries": 0},
                     parameters={"x": {"type": "float",
                                       "values": [float(i) for i in range(n)]}}, **kw)
    return create_or_resume(open_storage(url), spec)[0]


def _usages(sweep: Sweep, index: int) -> list[list[Usage]]:
    """Per attempt of ``index``: its closed segments."""
    out = []
    for a in sweep.storage.attempts(sweep.study_id, index):
        attrs = sweep.storage.get_trial(a.trial_id).user_attrs
        out.append([u for k, v in attrs.items() if k.startswith(protocol.USAGE_ATTR_PREFIX)
                    and (u := Usage.parse(v)) is not None])
    return out


def test_preemption_is_retried_without_a_retry_and_a_kill_is_closed_once(
        workdir: Path, storage_url: str) -> None:
    sweep = _sweep(storage_url, "objectives:evicted", n=4)
    result = LocalBackend(workdir / "logs").run(sweep, range(4), storage_url=storage_url,
                                                tick=lambda: None)
    # retries: 0, yet the preempted index ran again and finished; the killed one did not
    assert result.finished == (0, 1, 3) or sorted(result.finished) == [0, 1, 3]
    assert result.failed == (2,)
    preempted, retry = _usages(sweep, 1)
    assert [(u.ending, u.steps, u.by) for u in preempted] == [(Ending.PREEMPTED, 3, "runner")]
    assert [u.ending for u in retry] == [Ending.COMPLETE]
    first = sweep.storage.get_trial(sweep.storage.attempts(sweep.study_id, 1)[0].trial_id)
    assert "(preempted)" in first.user_attrs[protocol.FAIL_REASON_ATTR]
    (killed,) = _usages(sweep, 2)
    assert [(u.ending, u.steps, u.by) for u in killed] == [(Ending.FAILED, 3, "stale")]
    book = sweep_ledger(sweep)
    assert book.totals.preempted.segments == 1 and book.totals.failed.segments == 1
    assert book.totals.finished.segments == 3 and book.totals.spent.steps == 5 * 3
    assert not book.running


@pytest.mark.parametrize("budget", [25, 41])
def test_the_budget_is_overshot_by_at_most_the_running_trials(
        workdir: Path, storage_url: str, budget: int) -> None:
    parallelism = 2
    sweep = _sweep(storage_url, "objectives:steps", n=20, budget={"steps": budget})
    result = LocalBackend(workdir / "logs").run(sweep, range(20), storage_url=storage_url,
                                                tick=lambda: None)
    book = sweep_ledger(sweep)
    spent = book.totals.spent.steps
    assert budget <= spent <= budget + parallelism * STEPS, spent
    assert len(result.finished) == spent // STEPS < 20
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.rule == "budget"
    # every started index finished once: nothing counted twice, nothing lost
    started = Counter(t.user_attrs[protocol.INDEX_ATTR] for t in sweep.study().trials
                      if t.state != TrialState.WAITING)
    assert set(started.values()) == {1}
    assert book.totals.finished.segments == len(started)


def test_two_launches_at_once_count_each_segment_once(workdir: Path, storage_url: str) -> None:
    """The same spec run twice at the same time (two `sweeper run`s): every index finishes
    once and the ledger holds one closed segment per attempt, the budget counted once."""
    import os
    import subprocess
    import sys

    import yaml

    from tests.support.helpers import spec_dict

    spec = spec_dict(name="twice", method="grid", parallelism=2,
                     trial={"entrypoint": "objectives:steps", "fixed": {}, "retries": 0},
                     parameters={"x": {"type": "float",
                                       "values": [float(i) for i in range(8)]}},
                     budget={"steps": 1000})
    path = workdir / "twice.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(workdir), *sys.path])}
    procs = [subprocess.Popen([sys.executable, "-m", "sweeper.cli", "run", str(path),
                               "--storage", storage_url, "--no-proxy"], env=env,
                              cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    sweep = create_or_resume(open_storage(storage_url), make_spec(**spec))[0]
    trials = sweep.study().trials
    done = Counter(t.user_attrs[protocol.INDEX_ATTR] for t in trials
                   if t.state == TrialState.COMPLETE)
    assert done == dict.fromkeys(range(8), 1)
    book = sweep_ledger(sweep)
    attempts = [t for t in trials if t.state != TrialState.WAITING]
    assert book.totals.closed.segments == len(attempts) and not book.running
    assert book.totals.finished.steps == 8 * STEPS


def test_on_exhausted_stop_stops_the_running_trials_resumably(workdir: Path,
                                                               sqlite_url: str) -> None:
    """Two trials of 400 steps (20 s) and a budget of 30 steps: the budget's watch (every
    10 s) stops both at their next report, resumable with their checkpoints; nothing else
    starts; a larger budget, run again, resumes them from their checkpoints."""
    sweep = _sweep(sqlite_url, "objectives:long_steps", n=4,
                   budget={"steps": 30, "on_exhausted": "stop"})
    result = LocalBackend(workdir / "logs").run(sweep, range(4), storage_url=sqlite_url,
                                                tick=lambda: None)
    assert result.finished == ()
    stopped = [t for t in sweep.study().trials if t.state == TrialState.FAIL]
    assert len(stopped) == 2
    for t in stopped:
        assert t.user_attrs[protocol.FAIL_REASON_ATTR].startswith("interrupted by the budget")
        (seg,) = [u for k, u in t.user_attrs.items() if k.startswith(protocol.USAGE_ATTR_PREFIX)]
        assert seg["ending"] == "paused" and 30 <= seg["steps"] < 400
    assert sweep_ledger(sweep).totals.spent.steps < 2 * 400
    assert [t.state for t in sweep.study().trials].count(TrialState.WAITING) == 2
    # a larger budget: the two go on from their checkpoints (each trains what was left: the
    # step it reported when it stopped, saved after the report, is trained again)
    indexes = sorted(t.user_attrs[protocol.INDEX_ATTR] for t in stopped)
    larger = _sweep(sqlite_url, "objectives:long_steps", n=4,
                    budget={"steps": 1000, "on_exhausted": "stop"})
    again = LocalBackend(workdir / "logs").run(larger, indexes, storage_url=sqlite_url,
                                               tick=lambda: None)
    assert sorted(again.finished) == indexes
    assert 2 * 400 <= sweep_ledger(larger).totals.finished.steps <= 2 * 401


def test_an_open_ended_sweep_runs_until_its_budget_is_spent(workdir: Path,
                                                            storage_url: str) -> None:
    """tpe, a steps budget and no ``trials``: the workers take index after index until the
    gate says no; every started index finished once, and the table lists just those."""
    from sweeper.study.record import indexes_to_run

    budget, parallelism = 45, 2
    spec = make_spec(name="open", method="tpe", trials=None, parallelism=parallelism,
                     trial={"entrypoint": "objectives:steps", "fixed": {}, "retries": 0},
                     parameters={"x": {"type": "float", "low": 0.0, "high": 1.0}},
                     budget={"steps": budget})
    sweep, created = create_or_resume(open_storage(storage_url), spec)
    todo = indexes_to_run(sweep, created=created)
    assert len(todo) == spec.trials  # the ceiling: the budget ends the sweep long before
    result = LocalBackend(workdir / "logs").run(sweep, todo, storage_url=storage_url,
                                                tick=lambda: None)
    spent = sweep_ledger(sweep).totals.spent.steps
    assert budget <= spent <= budget + parallelism * STEPS, spent
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.rule == "budget"
    started = Counter(t.user_attrs[protocol.INDEX_ATTR] for t in sweep.study().trials)
    assert set(started.values()) == {1} and len(started) == spent // STEPS
    assert sorted(result.finished) == sorted(started)
    table = sweep.storage.index_table(sweep.study_id, spec.index_count)
    assert {s.index for s in table if s.state == "COMPLETE"} == set(started)
    assert len(table) <= len(started) + parallelism  # a prefetched index may leave a hole
