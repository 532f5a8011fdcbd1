"""The ledger on real storages: segments closed by their runner and by whoever finds them
stale count once each, a retried close counts once, the budget gate records the sweep's stop
the first time it says no, and a larger budget launched again lifts it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper.accounting import BUDGET_RULE, Ending, OpenSegment
from sweeper.protocol import SEGMENT_ATTR, usage_key
from sweeper.study import create_or_resume, open_storage
from sweeper.study.ledger import may_start, sweep_ledger
from sweeper.study.record import Sweep
from tests.support.helpers import make_spec


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def budgeted(url: str, steps: int = 100, **kw: Any) -> Sweep:
    spec = make_spec(method="random", trials=6, budget={"steps": steps}, **kw)
    return create_or_resume(open_storage(url), spec)[0]


def claim(sweep: Sweep, index: int, claim_id: str, *, ago_s: float = 60.0,
          from_step: int = 0) -> int:
    """Claim ``index``'s WAITING trial and open its segment as a runner does."""
    taken = sweep.storage.take(sweep.study_id, index)
    tid = taken.claimed.trial_id if taken.claimed else None
    if tid is None:
        (waiting,) = [a for a in taken.attempts if a.state == TrialState.WAITING]
        assert sweep.storage.claim(waiting.trial_id)
        tid = waiting.trial_id
    segment = OpenSegment(claim_id, 1.0, 2.0, from_step, _utcnow() - timedelta(seconds=ago_s))
    sweep.storage.set_trial_user_attrs(tid, {SEGMENT_ATTR: segment.encode()})
    return tid


def report(sweep: Sweep, tid: int, steps: range) -> None:
    sweep.storage.write_trial(tid, user_attrs={}, params={},
                              reports=[(s, float(s)) for s in steps])


def test_a_stale_attempt_is_closed_once_by_whoever_fails_it(storage_url: str) -> None:
    sweep = budgeted(storage_url)
    tid = claim(sweep, 0, "k0", ago_s=120.0)
    report(sweep, tid, range(1, 41))
    assert sweep.storage.mark_failed(tid, "heartbeat 99s old: the runner died or froze")
    # a second closer (the watcher, a retry of the call) finds it closed and writes nothing
    assert not sweep.storage.mark_failed(tid, "heartbeat older than 30s: runner presumed dead")
    book = sweep_ledger(sweep)
    (usage,) = book.closed
    assert (usage.ending, usage.by, usage.steps, usage.gpus) == (Ending.FAILED, "stale", 40, 1.0)
    assert 110.0 < usage.wall_s < 180.0  # from its start to its last heartbeat (the claim's)
    assert book.totals.failed.steps == 40 and book.totals.finished.steps == 0
    assert book.by_index[0].failed.segments == 1 and not book.running


def test_the_runners_own_close_wins_and_a_retried_write_counts_once(storage_url: str) -> None:
    sweep = budgeted(storage_url)
    tid = claim(sweep, 1, "k1")
    report(sweep, tid, range(1, 11))
    mine = {usage_key("k1"): {"wall_s": 12.5, "gpus": 1.0, "cpus": 2.0, "steps": 10,
                              "ending": "preempted", "by": "runner"}}
    for _ in range(2):  # the write retried after a lost acknowledgement
        sweep.storage.set_trial_user_attrs(tid, mine)
    assert sweep.storage.mark_failed(tid, "interrupted by SIGTERM; resumable")
    book = sweep_ledger(sweep)
    (usage,) = book.closed
    assert (usage.ending, usage.by, usage.wall_s) == (Ending.PREEMPTED, "runner", 12.5)
    assert book.totals.preempted.steps == 10


def test_running_segments_count_as_spent_until_closed(storage_url: str) -> None:
    sweep = budgeted(storage_url)
    tid = claim(sweep, 2, "k2", from_step=5)
    report(sweep, tid, range(6, 26))
    book = sweep_ledger(sweep)
    assert not book.closed
    (running,) = book.running
    assert running.steps == 20 and running.wall_s >= 60.0
    assert book.totals.spent.steps == 20 and book.by_trial


def test_the_gate_records_the_budget_stop_and_a_larger_budget_lifts_it(
        storage_url: str) -> None:
    sweep = budgeted(storage_url, steps=30)
    tid = claim(sweep, 0, "a")
    report(sweep, tid, range(1, 21))
    assert may_start(sweep).may_start  # 20 of 30 steps, nothing finished to expect from
    sweep.storage.set_trial_user_attrs(tid, {usage_key("a"): {
        "wall_s": 5.0, "gpus": 1.0, "cpus": 1.0, "steps": 20, "ending": "complete"}})
    tid = claim(sweep, 1, "b")
    report(sweep, tid, range(1, 6))
    decision = may_start(sweep)  # 25 spent + 15 committed (a mean segment of 20, less 5)
    assert not decision.may_start
    assert decision.reason.startswith("budget spent: 25 steps spent + 15 steps committed of "
                                      "30 steps"), decision.reason
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.stopped and state.rule == BUDGET_RULE
    assert not may_start(sweep).may_start  # it stands: one read
    # launched again with the same budget: still stopped; with a larger one: lifted
    again = create_or_resume(sweep.storage, make_spec(method="random", trials=6,
                                                      budget={"steps": 30}))[0]
    assert again.storage.stop_state(again.study_id) is not None
    larger = create_or_resume(sweep.storage, make_spec(method="random", trials=6,
                                                       budget={"steps": 100}))[0]
    assert larger.storage.stop_state(larger.study_id) is None
    assert may_start(larger).may_start


def test_a_sweep_without_a_budget_always_may_start(storage_url: str) -> None:
    sweep = create_or_resume(open_storage(storage_url), make_spec())[0]
    decision = may_start(sweep)
    assert decision.may_start and decision.left is None


@pytest.mark.parametrize("unit", ["steps"])
def test_a_steps_budget_of_trials_that_report_no_steps_stops_with_one_line(
        storage_url: str, unit: str) -> None:
    sweep = budgeted(storage_url)
    tid = claim(sweep, 0, "n")
    sweep.storage.set_trial_user_attrs(tid, {usage_key("n"): {
        "wall_s": 5.0, "gpus": 1.0, "cpus": 1.0, "steps": 0, "ending": "complete"}})
    sweep.storage.set_trial_state_values(tid, TrialState.COMPLETE, [1.0])
    decision = may_start(sweep)
    assert not decision.may_start and decision.reason.startswith("budget.steps: ")


def test_a_running_retry_counts_the_steps_after_its_checkpoint(storage_url: str) -> None:
    from sweeper.protocol import RESUMED_ATTR

    sweep = budgeted(storage_url)
    tid = claim(sweep, 3, "r")
    sweep.storage.set_trial_user_attrs(tid, {RESUMED_ATTR: 160})
    report(sweep, tid, range(161, 201))
    (running,) = sweep_ledger(sweep).running
    assert running.steps == 40
