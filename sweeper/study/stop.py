"""Sweep-level stop rules (``stop:``): when one fires, the sweep starts no new index.

The state lives on the study (user attr ``STOP_ATTR``), so every runner, the CLI and the
dashboard see the same thing whether ``sweeper run`` watches or not. Runners read it before
claiming an index (one indexed query on two study attrs, nothing when the spec has no rules)
and evaluate the rules after each trial they finish; the first rule to fire is recorded once.

This module decides (pure functions, and what to ask the store); the index store reads and
records (``IndexStore.stop_check``, ``brake``; its SQL in :mod:`sweeper.study.sql.stop`).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from sweeper.spec import SweepSpec
from sweeper.study.values import IGNORED, STOPPED, StopState, parse_state

if TYPE_CHECKING:
    from sweeper.study.store import IndexStore

__all__ = ["BRAKE_RULE", "DEFAULT_BRAKE", "IGNORED", "STOPPED", "StopState", "after_trial",
           "before_start", "brake", "brake_limit", "brake_reason", "check_duration", "fired",
           "now_iso", "parse_state"]

#: A sweep whose first attempts all failed stops after this many (``stop.max_failed_trials``
#: sets another number, 0 turns the brake off): a deterministic bug should not spend every
#: index's retries.
DEFAULT_BRAKE = 5
BRAKE_RULE = "failing_start"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=None)


def check_duration(spec: SweepSpec, started: str | None) -> str | None:
    """The reason ``max_duration`` fires now, or None."""
    budget = spec.stop.max_duration
    if budget is None or started is None:
        return None
    elapsed = datetime.now(timezone.utc).replace(tzinfo=None) - _parse_time(started)
    if elapsed < timedelta(seconds=budget):
        return None
    return f"{elapsed.total_seconds():.0f}s since the sweep started (max_duration {budget:g}s)"


def fired(spec: SweepSpec, best: tuple[int, float] | None, after: int, failed: int,
          started: str | None) -> tuple[str, str, int | None] | None:
    """The first rule of ``spec.stop`` that fires, as (rule, reason, trial number), given the
    best trial (number, value) of objective 0, the trials finished since it, the indexes
    failed for good and the sweep's first launch time; None: none fires."""
    rules = spec.stop
    maximize = spec.objectives[0].direction == "maximize"
    metric = spec.objectives[0].metric
    if rules.value is not None and best is not None and \
            (best[1] >= rules.value if maximize else best[1] <= rules.value):
        return "value", (f"trial #{best[0]} reached {metric}={best[1]:.6g} (stop.value "
                         f"{rules.value:g})"), best[0]
    if rules.patience is not None and best is not None and after >= rules.patience:
        return "patience", (f"{after} trials finished since the best, trial #{best[0]} "
                            f"({metric}={best[1]:.6g}), without beating it (patience "
                            f"{rules.patience})"), best[0]
    if rules.max_failed_trials and failed >= rules.max_failed_trials:
        return "max_failed_trials", (f"{failed} indexes failed for good (max_failed_trials "
                                     f"{rules.max_failed_trials})"), None
    why = check_duration(spec, started)
    return ("max_duration", why, None) if why else None


def brake_limit(spec: SweepSpec) -> int:
    n = spec.stop.max_failed_trials
    return DEFAULT_BRAKE if n is None else n


def brake_reason(done: int, failed: int, common: str | None, limit: int) -> str | None:
    """Why the brake stops the sweep, given the trials completed or pruned, the attempts
    that failed of their own doing and their most common reason; None: it does not (some
    trial finished, or fewer than ``limit`` failed)."""
    if done or failed < limit:
        return None
    why = f"; most often: {common}" if isinstance(common, str) else ""
    return (f"the first {failed} attempts all failed and none completed{why} "
            "(stop.max_failed_trials sets how many; 0 never stops)")


def before_start(store: IndexStore, study_id: int, spec: SweepSpec) -> StopState | None:
    """What a runner (or the local backend) checks before starting an index: the recorded
    stop (a rule's, or the brake's), or ``max_duration`` running out now. None: go ahead.
    Free when no rule is set and the brake is off."""
    if not spec.stop.any and brake_limit(spec) <= 0:
        return None
    return store.stop_check(study_id, spec, after_trial=False)


def after_trial(store: IndexStore, study_id: int, spec: SweepSpec) -> StopState | None:
    """Evaluate the rules once a trial finished (any state); record the first that fires."""
    if not spec.stop.any:
        return None
    return store.stop_check(study_id, spec, after_trial=True)


def brake(store: IndexStore, study_id: int, spec: SweepSpec) -> StopState | None:
    """What the launcher (and a runner, after its attempt failed) checks: when the sweep's
    first attempts have all failed of their own doing (``brake_limit`` of them, none completed
    or pruned; a killed or interrupted runner does not count), record the stop with the most
    common reason."""
    limit = brake_limit(spec)
    return store.brake(study_id, limit) if limit > 0 else None
