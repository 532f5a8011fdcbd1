"""The runner's state table (trial_runner/runner.py, top of the module), one row at a time.

No database: the sweep holds a fake index store, so each row's decision (which
attempt, which number, fail or wait, when the index is finished) is pinned by a fast test.
Each test kills mutants that survived ``make mutate`` (docs/development.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.accounting import OpenSegment
from sweeper.study import Attempt, Taken, stop
from trial_runner import runner
from trial_runner.runner import (  # the table's rows, one function each
    Claimed,
    Outcome,
    RunnerSettings,
    _already_done,
    _exit_code_of,
    _final,
    _first_attempt,
    _next_attempt,
    _recorded_stop,
    _running,
    acquire,
    provenance,
)

RUNNING, WAITING, FAIL = TrialState.RUNNING, TrialState.WAITING, TrialState.FAIL


def attempt(trial_id: int, state: TrialState, n: int = 0, age: float | None = None) -> Attempt:
    return Attempt(trial_id=trial_id, number=trial_id + 100, state=state, attempt=n,
                   heartbeat_age_s=age)


@dataclass
class Store:
    """What the state table asked of the index store, and what it answers."""

    new_ids: list[int | None] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    frozen: Any = None

    def mark_failed(self, trial_id: int, reason: str) -> bool:
        self.calls.append(("mark_failed", trial_id, reason))
        return True

    def new_attempt(self, study_id: int, index: int, *, after: Attempt | None,
                    params: dict[str, Any] | None) -> int | None:
        self.calls.append(("new_attempt", index, after, params))
        return self.new_ids.pop(0)

    taken: Any = None
    claims: list[bool] = field(default_factory=list)
    looks: list[list[Attempt]] = field(default_factory=list)

    def claim(self, trial_id: int) -> bool:
        self.calls.append(("claim", trial_id))
        return self.claims.pop(0)

    def attempts(self, study_id: int, index: int) -> list[Attempt]:
        self.calls.append(("attempts", study_id, index))
        return self.looks.pop(0)

    def take(self, study_id: int, index: int, *, user_attrs: dict[str, Any]) -> Any:
        self.calls.append(("take", study_id, index, user_attrs))
        return self.taken

    def stop_state(self, study_id: int) -> Any:
        self.calls.append(("stop_state", study_id))
        return stop.parse_state(STOPPED)

    def get_trial(self, trial_id: int) -> Any:
        self.calls.append(("get_trial", trial_id))
        return self.frozen

    requeued: list[int] = field(default_factory=list)

    def requeue_stale(self, study_id: int, grace_s: float) -> list[int]:
        self.calls.append(("requeue_stale", study_id, grace_s))
        return self.requeued


@pytest.fixture
def store() -> Store:
    return Store()


def sweep(store: Store, *, adaptive: bool = False, trials: int = 4) -> Any:
    spec = SimpleNamespace(is_adaptive=adaptive, trials=trials, scheduler=None)
    return SimpleNamespace(spec=spec, name="grid-sweep", storage=store, study_id=1)


# --------------------------------------------------------------------------- stopped

STOPPED = {"state": "stopped", "rule": "value", "reason": "reached", "at": "2030-01-01T00:00:00"}


def stopped_sweep(store: Store, *, rules: bool = False, brake: int | None = None) -> Any:
    spec = SimpleNamespace(stop=SimpleNamespace(any=rules, max_failed_trials=brake),
                           scheduler=None)
    return SimpleNamespace(spec=spec, storage=store, study_id=1)


@pytest.mark.parametrize(("value", "stops"), [(STOPPED, True),
                                              (dict(STOPPED, state="ignored"), False),
                                              (None, False)])
def test_a_stop_the_first_look_read_is_used_as_read(store: Store, value: Any,
                                                    stops: bool) -> None:
    taken = Taken(attempts=[], stop_read=True, stop=value)
    got = _recorded_stop(stopped_sweep(store), taken)
    assert (got == stop.parse_state(STOPPED)) if stops else got is None
    assert store.calls == []


@pytest.mark.parametrize(("rules", "brake", "reads"), [
    (True, None, False),   # the spec's rules: before_start read it just before
    (False, 0, False),     # no rule and the brake off: nothing to read
    (False, 1, True),      # the brake alone: read it now
    (False, None, True),
])
def test_a_stop_not_read_with_the_first_look_is_read_only_for_the_brake(
        store: Store, rules: bool, brake: int | None, reads: bool) -> None:
    got = _recorded_stop(stopped_sweep(store, rules=rules, brake=brake), Taken(attempts=[]))
    assert got == (stop.parse_state(STOPPED) if reads else None)
    assert store.calls == ([("stop_state", 1)] if reads else [])


# --------------------------------------------------------------------------- RUNNING


def run_row(store: Store, age: float | None, *, grace: float = 30.0,
            heartbeat: float = 5.0) -> list[float]:
    slept: list[float] = []
    settings = RunnerSettings(heartbeat_interval_s=heartbeat, grace_period_s=grace)
    _running(store, 4, attempt(7, RUNNING, age=age), settings, slept.append)
    return slept


def test_a_heartbeat_older_than_the_grace_period_fails_that_attempt(store: Store) -> None:
    assert run_row(store, 30.5) == []
    assert store.calls == [("mark_failed", 7, "heartbeat 30s old: the runner died or froze")]


def test_under_a_scheduler_a_stale_promotion_goes_back_not_to_fail(store: Store) -> None:
    """A promoted trial whose promoter died is put back (WAITING, paused) by the store; the
    runner must not FAIL it too. The store is asked with the study and the grace period."""
    store.requeued = [7]
    slept: list[float] = []
    settings = RunnerSettings(heartbeat_interval_s=5.0, grace_period_s=30.0)
    _running(store, 4, attempt(7, RUNNING, age=30.5), settings, slept.append, requeue=1)
    assert store.calls == [("requeue_stale", 1, 30.0)] and slept == []


def test_under_a_scheduler_a_stale_trial_not_put_back_fails(store: Store) -> None:
    """A stale trial that is no promotion (the store put back others, or none) fails."""
    store.requeued = [8]
    settings = RunnerSettings(heartbeat_interval_s=5.0, grace_period_s=30.0)
    _running(store, 4, attempt(7, RUNNING, age=30.5), settings, lambda s: None, requeue=1)
    assert store.calls == [("requeue_stale", 1, 30.0),
                           ("mark_failed", 7, "heartbeat 30s old: the runner died or froze")]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_first_look_puts_back_a_stale_promotion_only_under_a_scheduler(
        store: Store, enabled: bool) -> None:
    done = attempt(4, TrialState.COMPLETE)
    store.looks, store.requeued = [[done]], [4]
    got = first_look(store, Taken(attempts=[attempt(4, RUNNING, age=31.0)]),
                     scheduler=SimpleNamespace(enabled=enabled))
    assert got == _already_done(3, done)
    asked = [c for c in store.calls if c[0] in ("requeue_stale", "mark_failed")]
    assert asked == ([("requeue_stale", 1, 30.0)] if enabled else
                     [("mark_failed", 4, "heartbeat 31s old: the runner died or froze")])


@pytest.mark.parametrize("age", [30.0, 29.9, 0.0, None], ids=["at-grace", "fresh", "zero",
                                                               "no-heartbeat-yet"])
def test_a_heartbeat_within_the_grace_period_or_none_yet_waits(store: Store,
                                                               age: float | None) -> None:
    """Exactly the grace period old is not stale yet; a trial just claimed has none yet."""
    assert run_row(store, age) == [2.0]
    assert store.calls == []


def test_the_wait_is_the_heartbeat_interval_at_most_two_seconds(store: Store) -> None:
    assert run_row(store, 1.0, heartbeat=0.5) == [0.5]
    assert run_row(store, 1.0, heartbeat=60.0) == [2.0]


def test_waiting_says_which_trial_runs_elsewhere(store: Store,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=runner.__name__):
        run_row(store, 1.0)
    assert [r.getMessage() for r in caplog.records] == \
        ["index 4: trial #107 is running elsewhere; waiting"]


# --------------------------------------------------------------------------- COMPLETE/PRUNED


def test_a_finished_index_is_already_done_with_its_trial() -> None:
    out = _already_done(3, attempt(9, TrialState.COMPLETE))
    assert out == Outcome(3, protocol.EXIT_OK, "ALREADY_DONE", 109,
                          "index 3 already finished (trial #109)")


# --------------------------------------------------------------------------- nothing


def test_nothing_in_an_adaptive_sweep_creates_attempt_0(store: Store) -> None:
    store.new_ids = [17, None]
    assert _first_attempt(sweep(store, adaptive=True), 2) == Claimed(17, 0)
    assert store.calls == [("new_attempt", 2, None, None)]
    # another runner created it first: look again
    assert _first_attempt(sweep(store, adaptive=True), 2) is None


def test_nothing_in_a_planned_sweep_is_an_index_outside_it(store: Store) -> None:
    out = _first_attempt(sweep(store, trials=4), 9)
    assert out == Outcome(9, protocol.EXIT_CONFIG, "FAIL", None,
                          "index 9 is not part of sweep 'grid-sweep' (indexes 0..3)")
    assert store.calls == []


# --------------------------------------------------------------------------- FAIL


@pytest.mark.parametrize(("system_attrs", "params", "expected"), [
    ({protocol.FIXED_PARAMS_ATTR: {"lr": 0.1}}, {"lr": 0.2}, {"lr": 0.1}),
    ({}, {"lr": 0.2}, {"lr": 0.2}),
    ({}, {}, None),
], ids=["planned", "adaptive", "no-params"])
def test_after_a_fail_the_next_attempt_keeps_the_params(store: Store, system_attrs: Any,
                                                        params: Any, expected: Any) -> None:
    store.frozen = SimpleNamespace(system_attrs=system_attrs, params=params)
    store.new_ids = [23]
    failed = attempt(8, FAIL, n=2)
    assert _next_attempt(sweep(store), 5, failed) == Claimed(23, 3)
    assert store.calls == [("get_trial", 8), ("new_attempt", 5, failed, expected)]


def test_after_a_fail_another_runner_may_create_the_next_attempt_first(store: Store) -> None:
    store.frozen = SimpleNamespace(system_attrs={}, params={})
    store.new_ids = [None]
    assert _next_attempt(sweep(store), 5, attempt(8, FAIL)) is None


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize(("code", "attempt_no", "retries", "final"), [
    (protocol.EXIT_RETRY, 0, 1, False),   # a retry is left
    (protocol.EXIT_RETRY, 1, 1, True),    # the last allowed attempt failed
    (protocol.EXIT_RETRY, 2, 1, True),
    (protocol.EXIT_RETRY, 0, 0, True),    # retries: 0
    (protocol.EXIT_NO_RETRY, 0, 3, True),  # no retry fixes it
    (protocol.EXIT_CONFIG, 5, 1, False),   # the sweep stops; the index did not fail for good
])
def test_an_index_fails_for_good_when_its_retries_are_spent_or_none_can_help(
        code: int, attempt_no: int, retries: int, final: bool) -> None:
    assert _final(code, attempt_no, retries) is final


def test_which_failures_a_retry_can_fix() -> None:
    from trial_runner.context import InvalidResult, ProgramFailed, TrialTimeout
    from trial_runner.data import DataError

    assert _exit_code_of(TrialTimeout("1s")) == protocol.EXIT_NO_RETRY
    assert _exit_code_of(InvalidResult("nan")) == protocol.EXIT_NO_RETRY
    assert _exit_code_of(ProgramFailed("exit 2")) == protocol.EXIT_RETRY
    assert _exit_code_of(DataError("s3 down", retryable=True)) == protocol.EXIT_RETRY
    assert _exit_code_of(DataError("no bucket", retryable=False)) == protocol.EXIT_CONFIG
    assert _exit_code_of(ValueError("other")) == protocol.EXIT_CONFIG


# --------------------------------------------------------------------------- the first look


def first_look(store: Store, taken: Taken, scheduler: Any = None) -> Any:
    spec = SimpleNamespace(stop=SimpleNamespace(any=False, max_failed_trials=0), spec_hash="h",
                           scheduler=scheduler, trial=SimpleNamespace(
                               resources=SimpleNamespace(gpu=1, cpu="2"), nodes=1))
    store.taken = taken
    sweep = SimpleNamespace(spec=spec, storage=store, study_id=1)
    got = acquire(sweep, 3, RunnerSettings(grace_period_s=30.0), sleep=lambda s: None)
    name, study_id, index, attrs = store.calls[0]
    # the claim is stamped with the runner's provenance and opens the attempt's segment
    segment = OpenSegment.parse(attrs.pop(protocol.SEGMENT_ATTR))
    assert (name, study_id, index, attrs) == ("take", 1, 3, provenance(spec))
    assert segment is not None and (segment.gpus, segment.cpus, segment.from_step) == (1, 2, 0)
    if isinstance(got, Claimed) and got.segment is not None:
        assert got.segment == segment
        return replace(got, segment=None)
    return got


def test_what_the_first_look_claimed_is_owned_with_what_it_read(store: Store) -> None:
    taken = Taken(attempts=[], claimed=attempt(5, RUNNING, n=2))
    assert first_look(store, taken) == Claimed(5, 2, taken)


def test_a_stop_the_first_look_read_starts_nothing(store: Store) -> None:
    got = first_look(store, Taken(attempts=[], stop_read=True, stop=STOPPED))
    assert isinstance(got, Outcome)
    assert (got.index, got.exit_code, got.state, got.trial_number) == \
        (3, protocol.EXIT_OK, protocol.STOPPED, None)
    assert got.message.startswith("index 3 not started: the sweep is stopped (stop rule value")


def test_a_finished_attempt_among_failed_ones_finishes_the_index(store: Store) -> None:
    taken = Taken(attempts=[attempt(1, FAIL), attempt(2, TrialState.PRUNED, n=1)])
    assert first_look(store, taken) == _already_done(3, attempt(2, TrialState.PRUNED))


def test_a_waiting_attempt_is_owned_only_when_the_claim_is_won(store: Store) -> None:
    store.claims = [True]
    assert first_look(store, Taken(attempts=[attempt(4, WAITING, n=1)])) == Claimed(4, 1)
    assert store.calls[1:] == [("claim", 4)]


def test_a_lost_claim_looks_again(store: Store) -> None:
    """Another runner won the WAITING trial: this one must not run it too."""
    done = attempt(4, TrialState.COMPLETE, n=1)
    store.claims, store.looks = [False], [[done]]
    assert first_look(store, Taken(attempts=[attempt(4, WAITING, n=1)])) == \
        _already_done(3, done)
    assert store.calls[1:] == [("claim", 4), ("attempts", 1, 3)]


def test_a_running_attempt_elsewhere_is_waited_on_then_looked_at_again(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    done = attempt(4, TrialState.COMPLETE)
    store.looks = [[done]]
    with caplog.at_level(logging.INFO, logger=runner.__name__):
        got = first_look(store, Taken(attempts=[attempt(4, RUNNING, age=1.0)]))
    assert got == _already_done(3, done)
    assert "index 3: trial #104 is running elsewhere; waiting" in caplog.messages
