"""The runner's side of issue 38 on both storages: every segment of every attempt is
recorded (wall time, GPUs, the steps it trained itself, how it ended), the budget gate stops
new work (a new index, a promotion) once spent + committed reaches the budget, and
``on_exhausted: stop`` stops a running trial at its next report, resumable."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.accounting import BUDGET_RULE, Ending, Usage
from sweeper.study import create_or_resume, open_storage
from sweeper.study.ledger import may_start, sweep_ledger
from sweeper.study.record import Sweep
from tests.support.asha_objectives import curve
from tests.support.helpers import make_spec
from trial_runner import usage
from trial_runner.context import TrialContext
from trial_runner.promotion import run_scheduled
from trial_runner.runner import RunnerSettings, run_index

ASHA = {"type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9,
        "reduction_factor": 3}


def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=30.0,
                          checkpoint_root=tmp_path / "ckpt")


def steps_of(n: int) -> Any:
    def objective(ctx: TrialContext) -> float:
        for step in range(1, n + 1):
            ctx.report(step, loss=1.0 / step)
        return 1.0 / n

    return objective


def usages(sweep: Sweep) -> dict[int, list[Usage]]:
    """Trial number -> its closed segments, read from the trials' own attributes."""
    out: dict[int, list[Usage]] = {}
    for t in sweep.study().trials:
        got = [Usage.parse(v) for k, v in t.user_attrs.items()
               if k.startswith(protocol.USAGE_ATTR_PREFIX)]
        out[t.number] = [u for u in got if u is not None]
    return out


def test_every_attempt_records_what_it_consumed(storage_url: str, tmp_path: Path) -> None:
    spec = make_spec(method="random", trials=3, trial={"resources": {"gpu": 2}})
    sweep, _ = create_or_resume(open_storage(storage_url), spec)
    assert run_index(sweep, 0, steps_of(7), settings(tmp_path)).state == "COMPLETE"

    def boom(ctx: TrialContext) -> float:
        ctx.report(1, loss=1.0)
        time.sleep(0.2)
        raise ValueError("nope")

    assert run_index(sweep, 1, boom, settings(tmp_path)).state == "FAIL"
    by_trial = usages(sweep)
    (done,) = by_trial[0]
    assert (done.ending, done.steps, done.gpus, done.by) == (Ending.COMPLETE, 7, 2.0, "runner")
    (failed,) = by_trial[1]
    assert failed.ending == Ending.FAILED and failed.steps == 1 and failed.wall_s >= 0.2
    book = sweep_ledger(sweep)
    assert book.totals.finished.steps == 7 and book.totals.failed.steps == 1
    assert book.totals.failed.gpu_hours == pytest.approx(failed.wall_s * 2 / 3600)
    assert set(book.by_index) == {0, 1} and not book.running


def test_a_spent_budget_starts_no_new_index_and_says_so(storage_url: str,
                                                        tmp_path: Path) -> None:
    spec = make_spec(method="random", trials=6, budget={"steps": 10})
    sweep, _ = create_or_resume(open_storage(storage_url), spec)
    outs = [run_index(sweep, i, steps_of(5), settings(tmp_path)) for i in range(4)]
    assert [o.state for o in outs] == ["COMPLETE", "COMPLETE", "STOPPED", "STOPPED"]
    assert outs[2].message.startswith("index 2 not started: budget spent: 10 steps spent of "
                                      "10 steps"), outs[2].message
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.stopped and state.rule == BUDGET_RULE
    # nothing was created for the indexes not started
    assert [t.state for t in sweep.study().trials].count(TrialState.WAITING) == 4
    # a larger budget, launched again, raises it: the next index runs
    sweep, _ = create_or_resume(open_storage(storage_url),
                                make_spec(method="random", trials=6, budget={"steps": 20}))
    assert sweep.storage.stop_state(sweep.study_id) is None
    assert run_index(sweep, 2, steps_of(5), settings(tmp_path)).state == "COMPLETE"
    assert sweep_ledger(sweep).totals.spent.steps == 15


def test_promoted_segments_count_only_the_steps_they_trained(sqlite_url: str,
                                                             tmp_path: Path) -> None:
    spec = make_spec(name="asha", scheduler=ASHA, trials=9,
                     trial={"entrypoint": "tests.support.asha_objectives:curve",
                            "fixed": {"steps": 9}},
                     parameters={"a": {"type": "int", "low": 0, "high": 8}})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    for i in range(9):
        assert run_scheduled(sweep, i, curve, settings(tmp_path)).exit_code == 0
    trials = {int(t.params["a"]): t.number for t in sweep.study().trials}
    by_trial = usages(sweep)
    # a=0: to rung 0 (step 1), promoted to rung 1 (step 3), promoted to the end (step 9)
    assert sorted((u.steps, u.ending) for u in by_trial[trials[0]]) == \
        [(1, Ending.PAUSED), (2, Ending.PAUSED), (6, Ending.COMPLETE)]
    assert sorted(u.steps for u in by_trial[trials[1]]) == [1, 2]
    assert [u.steps for u in by_trial[trials[5]]] == [1]
    assert sweep_ledger(sweep).totals.spent.steps == 9 + 3 * 2 + 6 * 1


def test_a_spent_budget_promotes_nothing(sqlite_url: str, tmp_path: Path) -> None:
    spec = make_spec(name="asha", scheduler=ASHA, trials=9, budget={"steps": 3},
                     parallelism=1,
                     trial={"entrypoint": "tests.support.asha_objectives:curve",
                            "fixed": {"steps": 9}},
                     parameters={"a": {"type": "int", "low": 0, "high": 8}})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    outs = [run_scheduled(sweep, i, curve, settings(tmp_path)) for i in range(9)]
    # each index's first run trains 1 step to rung 0; after 3 the budget is spent: the one
    # promotion rung 0 then allows does not run, nor does any other index
    assert [o.state for o in outs] == ["PAUSED"] * 3 + ["STOPPED"] * 6
    assert outs[3].message.endswith("before any trial finished"), outs[3].message
    assert sweep_ledger(sweep).totals.spent.steps == 3
    states = [t.state for t in sweep.study().trials]
    # the sweep is over: its paused trials end PRUNED, the indexes not started stay so
    assert sorted(s.name for s in states) == ["PRUNED"] * 3 + ["WAITING"] * 6


def test_on_exhausted_stop_stops_a_running_trial_at_its_next_report(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usage, "WATCH_INTERVAL_S", 0.1)
    spec = make_spec(method="random", trials=4, budget={"steps": 30, "on_exhausted": "stop"})
    sweep, _ = create_or_resume(open_storage(storage_url), spec)
    go_on = threading.Event()

    def long(ctx: TrialContext) -> float:
        for step in range(1, 1000):
            ctx.report(step, loss=1.0 / step)
            ctx.save_checkpoint({"step": step}, step=step)
            if step == 5:
                go_on.set()
            time.sleep(0.02)
        return 0.0

    got: list[Any] = []
    runner = threading.Thread(target=lambda: got.append(
        run_index(sweep, 0, long, settings(tmp_path))))
    runner.start()
    assert go_on.wait(30)
    # another index spends the rest of the budget meanwhile
    other = open_storage(storage_url)
    assert run_index(create_or_resume(other, spec)[0], 1, steps_of(30),
                     settings(tmp_path)).state == "COMPLETE"
    runner.join(60)
    (out,) = got
    assert out.state == "STOPPED" and out.exit_code == protocol.EXIT_OK, out
    assert out.message.endswith("; resumable")
    trial = next(t for t in sweep.study().trials if t.number == out.trial_number)
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs[protocol.FAIL_REASON_ATTR].startswith("interrupted by the budget")
    (seg,) = usages(sweep)[trial.number]
    assert seg.ending == Ending.PAUSED and 5 <= seg.steps < 999
    assert (tmp_path / "ckpt").exists()  # its checkpoint stays for a resume
    assert not may_start(sweep).may_start


def test_a_sigterm_from_outside_is_recorded_as_preemption(storage_url: str,
                                                          tmp_path: Path) -> None:
    import os
    import signal

    from trial_runner.outcome import Interrupted

    spec = make_spec(method="random", trials=2)
    sweep, _ = create_or_resume(open_storage(storage_url), spec)

    def evicted(ctx: TrialContext) -> float:
        ctx.report(1, loss=1.0)
        ctx.report(2, loss=0.5)
        raise Interrupted(signal.SIGTERM)  # what the SIGTERM handler raises

    with pytest.raises(Interrupted):
        run_index(sweep, 0, evicted, settings(tmp_path))
    (trial,) = [t for t in sweep.study().trials if t.state == TrialState.FAIL]
    assert "(preempted)" in trial.user_attrs[protocol.FAIL_REASON_ATTR]
    (seg,) = usages(sweep)[trial.number]
    assert (seg.ending, seg.steps) == (Ending.PREEMPTED, 2)
    assert sweep_ledger(sweep).totals.preempted.segments == 1
    assert json.dumps(sweep_ledger(sweep).totals.to_json())  # plain JSON for status
    assert os.getpid()  # the runner process itself is not touched


@pytest.mark.parametrize("mark", ["current", "earlier"])
def test_a_sigterm_of_a_launch_sweeper_cancel_marked_is_recorded_as_stopped(
        storage_url: str, tmp_path: Path, mark: str) -> None:
    """Deleting a cancelled launch's pods sends them SIGTERM too: with the launch marked by
    ``sweeper cancel`` the attempt was stopped by sweeper (paused, as a local SIGINT), not
    preempted; a mark of an earlier launch does not apply to this one."""
    import signal

    from sweeper.backends.kubernetes.ops import mark_cancelled
    from trial_runner.outcome import Interrupted

    spec = make_spec(method="random", trials=2)
    sweep, _ = create_or_resume(open_storage(storage_url), spec)
    sweep.storage.set_study_user_attr(sweep.study_id, protocol.LAUNCHES_ATTR, 1)
    mark_cancelled(sweep)
    if mark == "earlier":  # a resume launched again after that cancel
        sweep.storage.set_study_user_attr(sweep.study_id, protocol.LAUNCHES_ATTR, 2)

    def deleted(ctx: TrialContext) -> float:
        ctx.report(1, loss=1.0)
        raise Interrupted(signal.SIGTERM)

    with pytest.raises(Interrupted):
        run_index(sweep, 0, deleted, settings(tmp_path))
    (trial,) = [t for t in sweep.study().trials if t.state == TrialState.FAIL]
    (seg,) = usages(sweep)[trial.number]
    totals = sweep_ledger(sweep).totals
    if mark == "current":
        assert "(stopped)" in trial.user_attrs[protocol.FAIL_REASON_ATTR]
        assert seg.ending == Ending.PAUSED
        assert (totals.preempted.segments, totals.finished.segments) == (0, 1)
    else:
        assert "(preempted)" in trial.user_attrs[protocol.FAIL_REASON_ATTR]
        assert seg.ending == Ending.PREEMPTED
        assert totals.preempted.segments == 1


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_preempted_or_stopped_attempt_uses_no_retry(storage_url: str, tmp_path: Path,
                                                      signum: str) -> None:
    """retries: 1 after a preemption (SIGTERM from outside) or sweeper's own stop (SIGINT)
    still leaves one retry: the failure after it is not the index's last (what
    stop.max_failed_trials counts)."""
    import signal

    from trial_runner.outcome import Interrupted

    spec = make_spec(method="random", trials=2, trial={"retries": 1},
                     stop={"max_failed_trials": 5})
    sweep, _ = create_or_resume(open_storage(storage_url), spec)

    def attempt(ctx: TrialContext) -> float:
        ctx.report(1, loss=1.0)
        if ctx.attempt == 0:
            raise Interrupted(getattr(signal, signum))
        raise ValueError("nope")

    with pytest.raises(Interrupted):
        run_index(sweep, 0, attempt, settings(tmp_path))
    assert run_index(sweep, 0, attempt, settings(tmp_path)).state == "FAIL"
    assert run_index(sweep, 0, attempt, settings(tmp_path)).state == "FAIL"
    trials = sorted(sweep.study().trials, key=lambda t: t.number)
    assert [t.user_attrs.get(protocol.FAILED_FOR_GOOD_ATTR) for t in trials
            if t.user_attrs.get(protocol.INDEX_ATTR) == 0] == [None, None, True]
