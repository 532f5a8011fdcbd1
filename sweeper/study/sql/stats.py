"""What the Prometheus metrics read from a study: trials by state, the duration histogram of
finished trials and the best value per objective, counted in the database at scrape time (so
they are right after a restart, and the same on every proxy replica). Four queries."""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper.protocol import METRIC_NAMES_ATTR
from sweeper.study.retry import with_retry
from sweeper.study.values import StudyStats


def _where(study_id: int | None) -> str:
    return "" if study_id is None else " AND t.study_id = :s"


def _as_datetime(value: datetime | str) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _state_name(state: Any) -> str:
    return state if isinstance(state, str) else TrialState(state).name


def study_stats(storage: RDBStorage, study_id: int | None,
                buckets: Sequence[float]) -> list[StudyStats]:
    """Stats of one study (``study_id``) or of every study in the storage."""
    bounds = sorted(buckets)
    params = {} if study_id is None else {"s": study_id}
    where = _where(study_id)

    def query() -> list[StudyStats]:
        with storage.engine.connect() as conn:
            counts = conn.execute(sa.text(
                "SELECT s.study_name, t.state, COUNT(*) FROM trials t JOIN studies s "
                f"ON s.study_id = t.study_id WHERE 1 = 1{where} "
                "GROUP BY s.study_name, t.state"), params).all()
            times = conn.execute(sa.text(
                "SELECT s.study_name, t.datetime_start, t.datetime_complete FROM trials t "
                "JOIN studies s ON s.study_id = t.study_id WHERE t.state IN "
                "('COMPLETE', 'PRUNED', 'FAIL') AND t.datetime_start IS NOT NULL "
                f"AND t.datetime_complete IS NOT NULL{where}"), params).all()
            values = conn.execute(sa.text(
                "SELECT s.study_name, v.objective, MIN(v.value), MAX(v.value) "
                "FROM trial_values v JOIN trials t ON t.trial_id = v.trial_id "
                "JOIN studies s ON s.study_id = t.study_id WHERE t.state = 'COMPLETE' "
                f"AND v.value_type = 'FINITE'{where} GROUP BY s.study_name, v.objective"),
                params).all()
            objectives = conn.execute(sa.text(
                "SELECT s.study_name, d.objective, d.direction, a.value_json "
                "FROM study_directions d JOIN studies s ON s.study_id = d.study_id "
                "LEFT JOIN study_system_attributes a ON a.study_id = s.study_id "
                f"AND a.key = '{METRIC_NAMES_ATTR}' WHERE 1 = 1"
                + ("" if study_id is None else " AND s.study_id = :s")), params).all()
        return _assemble(counts, times, values, objectives, bounds)

    return with_retry(query, what="study stats")


def _assemble(counts: Sequence[Any], times: Sequence[Any], values: Sequence[Any],
              objectives: Sequence[Any], bounds: list[float]) -> list[StudyStats]:
    states: dict[str, dict[str, int]] = {}
    for name, state, n in counts:
        states.setdefault(name, {})[_state_name(state)] = int(n)
    hist: dict[str, list[int]] = {}
    sums: dict[str, float] = {}
    for name, start, complete in times:
        seconds = max(0.0, (_as_datetime(complete) - _as_datetime(start)).total_seconds())
        counts_of = hist.setdefault(name, [0] * (len(bounds) + 1))
        counts_of[bisect.bisect_left(bounds, seconds)] += 1
        sums[name] = sums.get(name, 0.0) + seconds
    names: dict[tuple[str, int], tuple[str, str]] = {}
    for name, objective, direction, metric_json in objectives:
        metrics = json.loads(metric_json) if metric_json else None
        label = metrics[objective] if isinstance(metrics, list) and \
            objective < len(metrics) else f"objective_{objective}"
        names[(name, objective)] = (label, direction if isinstance(direction, str)
                                    else direction.name)
    best: dict[str, dict[str, float]] = {}
    for name, objective, low, high in values:
        label, direction = names.get((name, objective), (f"objective_{objective}", "MINIMIZE"))
        best.setdefault(name, {})[label] = float(high if direction == "MAXIMIZE" else low)
    out = []
    for name in sorted(states):
        per_bucket = hist.get(name, [0] * (len(bounds) + 1))
        cumulative = [sum(per_bucket[:k + 1]) for k in range(len(per_bucket))]
        out.append(StudyStats(name, states[name], cumulative, sums.get(name, 0.0),
                              best.get(name, {})))
    return out
