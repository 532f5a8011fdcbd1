"""The ``stop:`` section: sweep-level stop rules (Katib's ``goal`` and ``maxFailedTrialCount``,
W&B's target, "stop after 2 hours", "no improvement in 30 trials")."""

from __future__ import annotations

from typing import Any

from sweeper.spec.checks import Checks
from sweeper.spec.model import Objective, StopSpec
from sweeper.spec.yamldoc import Path_

STOP_KEYS = ("value", "patience", "max_failed_trials", "max_duration")


def stop_spec(v: Checks, value: Any, path: Path_, objectives: tuple[Objective, ...]) -> StopSpec:
    if value is None:
        return StopSpec()
    m = v.mapping(value, path, STOP_KEYS)
    for key in ("value", "patience"):
        if key in m and len(objectives) > 1:
            raise v.err((*path, key), f"stop.{key} needs a single objective (a multi-objective "
                                      "sweep has no one best value); use max_duration or "
                                      "max_failed_trials")
    target = float(v.number(m["value"], (*path, "value"))) if "value" in m else None
    patience = v.integer(m["patience"], (*path, "patience"), 1) if "patience" in m else None
    failed = v.integer(m["max_failed_trials"], (*path, "max_failed_trials"), 0) \
        if "max_failed_trials" in m else None
    duration = v.duration(m["max_duration"], (*path, "max_duration")) \
        if "max_duration" in m else None
    return StopSpec(value=target, patience=patience, max_failed_trials=failed,
                    max_duration=duration)
