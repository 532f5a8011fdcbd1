"""Read-side summaries for ``sweeper status``, progress lines and resumes: counted and grouped
in the database, cheap enough to poll every second."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper.protocol import INDEX_ATTR
from sweeper.proxy import client as proxy
from sweeper.spec import SweepSpec
from sweeper.study._optuna_compat import trial_value
from sweeper.study.retry import with_retry


def state_counts(storage: RDBStorage | proxy.ProxyStorage, study_id: int) -> dict[str, int]:
    """Trials by state, counted in the database (cheap enough to poll every second)."""
    if isinstance(storage, proxy.ProxyStorage):
        return storage.state_counts(study_id)
    def query() -> dict[str, int]:
        with storage.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT state, COUNT(*) FROM trials WHERE study_id = :s "
                                        "GROUP BY state"), {"s": study_id})
            return {(s if isinstance(s, str) else TrialState(s).name): n for s, n in rows}

    return with_retry(query, what="count trials")


@dataclass(frozen=True)
class IndexStatus:
    index: int
    state: str  # state of the latest attempt, or "PENDING" when nothing exists yet (adaptive)
    attempts: int
    trial_number: int | None
    values: tuple[float, ...] | None


_INDEXED_TRIALS_SQL = f"""
SELECT ua.value_json, t.trial_id, t.number, t.state
FROM trial_user_attributes ua JOIN trials t ON t.trial_id = ua.trial_id
WHERE ua.key = '{INDEX_ATTR}' AND t.study_id = :s ORDER BY t.number"""

_VALUES_SQL = """
SELECT v.trial_id, v.objective, v.value, v.value_type FROM trial_values v
JOIN trials t ON t.trial_id = v.trial_id WHERE t.study_id = :s"""


def index_table(storage: RDBStorage | proxy.ProxyStorage, sweep_spec: SweepSpec,
                study_id: int) -> list[IndexStatus]:
    """Per index: latest attempt's state, number of attempts, its values. Two queries."""
    if isinstance(storage, proxy.ProxyStorage):
        return storage.index_table(study_id, sweep_spec.trials)
    def query() -> list[IndexStatus]:
        with storage.engine.connect() as conn:
            rows = conn.execute(sa.text(_INDEXED_TRIALS_SQL), {"s": study_id}).all()
            values: dict[int, dict[int, float]] = {}
            for tid, objective, value, kind in conn.execute(sa.text(_VALUES_SQL),
                                                            {"s": study_id}):
                values.setdefault(tid, {})[objective] = trial_value(value, kind)
        latest: dict[int, tuple[int, int, str]] = {}
        counts: dict[int, int] = {}
        for idx_json, tid, number, state in rows:
            idx = int(json.loads(idx_json))
            counts[idx] = counts.get(idx, 0) + 1
            latest[idx] = (tid, number, state if isinstance(state, str)
                           else TrialState(state).name)
        out = []
        for i in range(sweep_spec.trials):
            if i not in latest:
                out.append(IndexStatus(i, "PENDING", 0, None, None))
                continue
            tid, number, state = latest[i]
            vals = values.get(tid)
            out.append(IndexStatus(i, state, counts[i], number,
                                   tuple(vals[k] for k in sorted(vals)) if vals else None))
        return out

    return with_retry(query, what="index table")


def unfinished_indexes(table: Iterable[IndexStatus]) -> list[int]:
    return [s.index for s in table if s.state not in ("COMPLETE", "PRUNED")]
