"""``list``: every study in a storage, sweeper's sweeps and plain Optuna studies, from a few
grouped queries (never every trial), as a :class:`SweepList`; beside it its renderings,
:func:`list_record` (``--format json``) and :func:`list_table`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sweeper.app.options import StorageOptions
from sweeper.app.sweeps import open_existing
from sweeper.report import format_table
from sweeper.study.urls import redact, resolve_storage_url
from sweeper.study.values import SweepSummary

#: The trial states ``list`` shows a column for, in this order.
STATES = ("COMPLETE", "PRUNED", "RUNNING", "WAITING", "FAIL")


@dataclass(frozen=True)
class SweepList:
    """The studies of the storage at ``where`` (its URL, password hidden)."""

    where: str
    sweeps: tuple[SweepSummary, ...]

    @property
    def has_plain_studies(self) -> bool:
        return any(not s.is_sweep for s in self.sweeps)


def list_sweeps(storage: StorageOptions = StorageOptions()) -> SweepList:
    """Every study in the storage (which must exist: nothing is created)."""
    url = resolve_storage_url(storage.url)
    return SweepList(redact(url), tuple(open_existing(url, storage.wait_s).list_sweeps()))


def list_record(view: SweepList) -> list[dict[str, Any]]:
    """``list --format json``: one object per study (fields may be added, never renamed)."""
    return [_record(s) for s in view.sweeps]


def list_table(view: SweepList) -> str:
    """The table for people: one row per study, its trials by state, best value and last
    activity."""
    return format_table(
        ["name", "method", "finished", *(s.lower() for s in STATES), "best",
         "last activity (UTC)"],
        [[s.name, s.method if s.is_sweep else "(optuna)",
          f"{s.finished_indexes}/{s.indexes}" if s.is_sweep else None,
          *(s.trials_by_state.get(state, 0) for state in STATES), _best_cell(s),
          s.last_activity.isoformat(sep=" ", timespec="seconds") if s.last_activity else None]
         for s in view.sweeps])


def _best_cell(s: SweepSummary) -> str | None:
    if s.best is None:
        return "pareto: sweeper best" if len(s.directions) > 1 and \
            s.trials_by_state.get("COMPLETE") else None
    value = f"{s.best:.6g}"
    return f"{s.metrics[0]}={value}" if s.metrics else value


def _record(s: SweepSummary) -> dict[str, Any]:
    metrics: list[str | None] = list(s.metrics) or [None] * len(s.directions)
    return {"name": s.name, "sweeper": s.is_sweep, "method": s.method, "indexes": s.indexes,
            "finished_indexes": s.finished_indexes,
            "objectives": [{"metric": m, "direction": d}
                           for m, d in zip(metrics, s.directions, strict=False)],
            "trials_by_state": s.trials_by_state,
            "best_value": s.best if s.best is None or math.isfinite(s.best) else str(s.best),
            "last_activity": s.last_activity.isoformat() if s.last_activity else None}
