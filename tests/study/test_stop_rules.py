"""The stop rules' decisions (sweeper/study/stop.py), without a database: which rule fires
for given counts, at which threshold, and what a start or a finished trial asks the store.
Each test kills mutants that survived ``make mutate`` (docs/development.md)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sweeper.spec import SweepSpec
from sweeper.study import stop
from tests.support.helpers import make_spec

NOW = datetime(2030, 1, 1, 12, 0, 0)


class FrozenDatetime(datetime):
    """``datetime`` whose now() is NOW in UTC, and refuses any other zone: the duration is
    counted in UTC whatever the machine's local time."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        assert tz is timezone.utc, tz
        return NOW.replace(tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def frozen_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stop, "datetime", FrozenDatetime)


def started(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).isoformat()


def spec_of(direction: str = "minimize", **rules: Any) -> SweepSpec:
    return make_spec(method="random", objective={"metric": "loss", "direction": direction},
                     stop=rules)


# --------------------------------------------------------------------------- max_duration


def test_max_duration_fires_once_the_budget_is_spent_not_before() -> None:
    spec = spec_of(max_duration=60)
    assert stop.check_duration(spec, started(59)) is None
    assert stop.check_duration(spec, started(60)) == \
        "60s since the sweep started (max_duration 60s)"
    assert stop.check_duration(spec, None) is None  # never launched: nothing to count
    assert stop.check_duration(spec_of(), started(10**6)) is None  # no budget


def test_an_aware_start_time_counts_as_utc() -> None:
    aware = (NOW - timedelta(seconds=90)).replace(tzinfo=timezone.utc).isoformat()
    assert stop.check_duration(spec_of(max_duration=60), aware) == \
        "90s since the sweep started (max_duration 60s)"


# --------------------------------------------------------------------------- fired


@pytest.mark.parametrize(("direction", "value", "fires"), [
    ("minimize", 0.5, True), ("minimize", 0.49, False), ("minimize", 0.6, True),
    ("maximize", 0.5, True), ("maximize", 0.51, False), ("maximize", 0.4, True),
])
def test_value_fires_when_the_best_reaches_it_in_the_objectives_direction(
        direction: str, value: float, fires: bool) -> None:
    spec = spec_of(direction, value=value)
    got = stop.fired(spec, (4, 0.5), 0, 0, None)
    if fires:
        assert got == ("value", f"trial #4 reached loss=0.5 (stop.value {value:g})", 4)
    else:
        assert got is None


def test_value_needs_a_best_trial() -> None:
    assert stop.fired(spec_of(value=10.0), None, 0, 0, None) is None


def test_patience_fires_at_that_many_trials_since_the_best() -> None:
    spec = spec_of(patience=3)
    assert stop.fired(spec, (2, 0.25), 2, 0, None) is None
    assert stop.fired(spec, (2, 0.25), 3, 0, None) == (
        "patience", "3 trials finished since the best, trial #2 (loss=0.25), without beating "
        "it (patience 3)", 2)
    assert stop.fired(spec, None, 9, 0, None) is None  # no best yet: nothing to be patient on


def test_max_failed_trials_fires_at_that_many_indexes() -> None:
    spec = spec_of(max_failed_trials=2)
    assert stop.fired(spec, None, 0, 1, None) is None
    assert stop.fired(spec, None, 0, 2, None) == \
        ("max_failed_trials", "2 indexes failed for good (max_failed_trials 2)", None)
    assert stop.fired(spec_of(max_failed_trials=0), None, 0, 5, None) is None  # 0: off


def test_the_first_rule_in_order_wins_and_duration_comes_last() -> None:
    def rule(spec: SweepSpec, best: tuple[int, float] | None) -> str | None:
        got = stop.fired(spec, best, 1, 1, started(61))
        return got[0] if got else None

    assert rule(spec_of(value=1.0, patience=1, max_failed_trials=1, max_duration=60),
                (1, 0.5)) == "value"
    assert rule(spec_of(patience=1, max_failed_trials=1, max_duration=60), (1, 0.5)) == \
        "patience"
    spec = spec_of(max_failed_trials=1, max_duration=60)
    assert rule(spec, None) == "max_failed_trials"
    assert stop.fired(spec, None, 0, 0, started(61)) == \
        ("max_duration", "61s since the sweep started (max_duration 60s)", None)
    assert stop.fired(spec, None, 0, 0, started(59)) is None


# --------------------------------------------------------------------------- the brake


def test_the_brake_limit_is_5_unless_max_failed_trials_says_otherwise() -> None:
    assert stop.brake_limit(spec_of()) == stop.DEFAULT_BRAKE == 5
    assert stop.brake_limit(spec_of(max_failed_trials=2)) == 2
    assert stop.brake_limit(spec_of(max_failed_trials=0)) == 0


def test_the_brake_fires_at_the_limit_with_none_finished() -> None:
    assert stop.brake_reason(0, 4, "boom", 5) is None
    assert stop.brake_reason(1, 9, "boom", 5) is None  # a trial finished: not a failing start
    assert stop.brake_reason(0, 5, "ValueError: boom", 5) == (
        "the first 5 attempts all failed and none completed; most often: ValueError: boom "
        "(stop.max_failed_trials sets how many; 0 never stops)")
    assert stop.brake_reason(0, 6, None, 5) == (
        "the first 6 attempts all failed and none completed "
        "(stop.max_failed_trials sets how many; 0 never stops)")


class Store:
    """Records what the rules asked of the index store."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def stop_check(self, study_id: int, spec: SweepSpec, *, after_trial: bool) -> str:
        assert isinstance(spec, SweepSpec)  # the store evaluates the sweep's own rules
        self.calls.append(("stop_check", study_id, after_trial))
        return "checked"

    def brake(self, study_id: int, limit: int) -> str:
        self.calls.append(("brake", study_id, limit))
        return "braked"


@pytest.mark.parametrize(("rules", "start", "after", "brake"), [
    ({}, True, False, ("brake", 5)),                       # the brake alone: read at a start
    ({"max_failed_trials": 0}, False, False, None),       # nothing: no query at all
    ({"max_failed_trials": 3}, True, True, ("brake", 3)),
    ({"max_failed_trials": 1}, True, True, ("brake", 1)),  # 1 is a brake, 0 is none
    ({"value": 0.1, "max_failed_trials": 0}, True, True, None),
])
def test_what_a_start_a_finished_trial_and_a_failure_ask_the_store(
        rules: dict[str, Any], start: bool, after: bool, brake: tuple[str, int] | None) -> None:
    spec = spec_of(**rules)
    store: Any = Store()
    assert stop.before_start(store, 7, spec) == ("checked" if start else None)
    assert stop.after_trial(store, 7, spec) == ("checked" if after else None)
    assert stop.brake(store, 7, spec) == ("braked" if brake else None)
    expected: list[tuple[Any, ...]] = []
    if start:
        expected.append(("stop_check", 7, False))
    if after:
        expected.append(("stop_check", 7, True))
    if brake:
        expected.append(("brake", 7, brake[1]))
    assert store.calls == expected


def test_a_stop_is_stamped_in_utc_without_a_zone() -> None:
    assert stop.now_iso() == "2030-01-01T12:00:00"
