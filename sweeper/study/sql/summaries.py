"""Read-side summaries for ``sweeper status``, ``sweeper list``, progress lines and resumes:
counted and grouped in the database, cheap enough to poll every second."""

from __future__ import annotations

import json
from datetime import datetime

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper._optuna_compat import rdb_tables, trial_value
from sweeper.protocol import CODE_ATTR, FAIL_REASON_ATTR, INDEX_ATTR, SPEC_ATTR
from sweeper.study.retry import with_retry
from sweeper.study.values import IndexStatus, SweepSummary


def state_counts(storage: RDBStorage, study_id: int) -> dict[str, int]:
    """Trials by state, counted in the database (cheap enough to poll every second)."""
    def query() -> dict[str, int]:
        with storage.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT state, COUNT(*) FROM trials WHERE study_id = :s "
                                        "GROUP BY state"), {"s": study_id})
            return {(s if isinstance(s, str) else TrialState(s).name): n for s, n in rows}

    return with_retry(query, what="count trials")


#: The best COMPLETE trial of objective 0, ordered as Optuna's ``get_best_trial`` orders it
#: (-inf, finite values, +inf; then the value). ``{order}``: ASC to minimize, DESC to maximize.
_BEST_SQL = """
SELECT t.number, v.value, v.value_type FROM trials t
JOIN trial_values v ON v.trial_id = t.trial_id AND v.objective = 0
WHERE t.study_id = :s AND t.state = 'COMPLETE'
ORDER BY CASE v.value_type WHEN 'INF_NEG' THEN -1 WHEN 'FINITE' THEN 0 ELSE 1 END {order},
  v.value {order} LIMIT 1"""
_BEST = {d: sa.text(_BEST_SQL.format(order=o)) for d, o in (("minimize", "ASC"),
                                                              ("maximize", "DESC"))}


def best_so_far(storage: RDBStorage, study_id: int,
                direction: str) -> tuple[int, float] | None:
    """(number, value) of the best COMPLETE trial of a single-objective study, or None: one
    query, where ``get_best_trial`` takes seven to read the whole trial (the progress line
    asks every second)."""
    def query() -> tuple[int, float] | None:
        with storage.engine.connect() as conn:
            row = conn.execute(_BEST[direction], {"s": study_id}).one_or_none()
        if row is None:
            return None
        number, value, kind = row
        return int(number), trial_value(value, kind if isinstance(kind, str) else kind.name)

    return with_retry(query, what="best trial")


_INDEXED_TRIALS_SQL = f"""
SELECT ua.value_json, t.trial_id, t.number, t.state
FROM trial_user_attributes ua JOIN trials t ON t.trial_id = ua.trial_id
WHERE ua.key = '{INDEX_ATTR}' AND t.study_id = :s ORDER BY t.number"""

_VALUES_SQL = """
SELECT v.trial_id, v.objective, v.value, v.value_type FROM trial_values v
JOIN trials t ON t.trial_id = v.trial_id WHERE t.study_id = :s"""

_FAIL_REASONS_SQL = f"""
SELECT ua.trial_id, ua.value_json FROM trial_user_attributes ua
JOIN trials t ON t.trial_id = ua.trial_id
WHERE ua.key = '{FAIL_REASON_ATTR}' AND t.study_id = :s"""

_CODES_SQL = f"""
SELECT ua.trial_id, ua.value_json FROM trial_user_attributes ua
JOIN trials t ON t.trial_id = ua.trial_id
WHERE ua.key = '{CODE_ATTR}' AND t.study_id = :s"""


def index_table(storage: RDBStorage, study_id: int, trials: int | None) -> list[IndexStatus]:
    """Per index: latest attempt's state, number of attempts, its values and (FAIL) its
    reason, and the code snapshot it ran with. Four queries. ``trials``: the sweep's number
    of indexes; None (an open-ended sweep) lists the indexes up to the highest started one."""
    def query() -> list[IndexStatus]:
        with storage.engine.connect() as conn:
            rows = conn.execute(sa.text(_INDEXED_TRIALS_SQL), {"s": study_id}).all()
            values: dict[int, dict[int, float]] = {}
            for tid, objective, value, kind in conn.execute(sa.text(_VALUES_SQL),
                                                            {"s": study_id}):
                values.setdefault(tid, {})[objective] = trial_value(value, kind)
            reasons = {tid: _reason(raw) for tid, raw in
                       conn.execute(sa.text(_FAIL_REASONS_SQL), {"s": study_id})}
            codes = {tid: _reason(raw) for tid, raw in
                     conn.execute(sa.text(_CODES_SQL), {"s": study_id})}
        latest: dict[int, tuple[int, int, str]] = {}
        counts: dict[int, int] = {}
        for idx_json, tid, number, state in rows:
            idx = int(json.loads(idx_json))
            counts[idx] = counts.get(idx, 0) + 1
            latest[idx] = (tid, number, state if isinstance(state, str)
                           else TrialState(state).name)
        out = []
        for i in range(trials if trials is not None else max(latest, default=-1) + 1):
            if i not in latest:
                out.append(IndexStatus(i, "PENDING", 0, None, None))
                continue
            tid, number, state = latest[i]
            vals = values.get(tid)
            out.append(IndexStatus(i, state, counts[i], number,
                                   tuple(vals[k] for k in sorted(vals)) if vals else None,
                                   reasons.get(tid) if state == "FAIL" else None,
                                   codes.get(tid)))
        return out

    return with_retry(query, what="index table")


def _reason(raw: str | None) -> str | None:
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        return raw
    return None if value is None else str(value)


# --------------------------------------------------------------------------- every sweep


_STUDIES_SQL = "SELECT study_id, study_name FROM studies"
_DIRECTIONS_SQL = "SELECT study_id, objective, direction FROM study_directions"
_RECORDS_SQL = "SELECT study_id, value_json FROM study_user_attributes WHERE key = :k"
_FINISHED_SQL = f"""
SELECT t.study_id, COUNT(DISTINCT ua.value_json) FROM trials t
JOIN trial_user_attributes ua ON ua.trial_id = t.trial_id
WHERE ua.key = '{INDEX_ATTR}' AND t.state IN ('COMPLETE', 'PRUNED') GROUP BY t.study_id"""
_BEST_SQL = """
SELECT t.study_id, v.value_type, MIN(v.value), MAX(v.value) FROM trial_values v
JOIN trials t ON t.trial_id = v.trial_id
WHERE t.state = 'COMPLETE' AND v.objective = 0 GROUP BY t.study_id, v.value_type"""


def list_sweeps(storage: RDBStorage) -> list[SweepSummary]:
    """Every study of the storage, by name, in six grouped queries (none per study, no trial
    loaded), so listing a storage of many big sweeps stays cheap."""
    def query() -> list[SweepSummary]:
        trials = rdb_tables().trials
        per_state = sa.select(trials.c.study_id, trials.c.state, sa.func.count(),
                              sa.func.max(trials.c.datetime_start),
                              sa.func.max(trials.c.datetime_complete)
                              ).group_by(trials.c.study_id, trials.c.state)
        with storage.engine.connect() as conn:
            studies = conn.execute(sa.text(_STUDIES_SQL)).all()
            directions = conn.execute(sa.text(_DIRECTIONS_SQL)).all()
            records = conn.execute(sa.text(_RECORDS_SQL), {"k": SPEC_ATTR}).all()
            states = conn.execute(per_state).all()
            finished: dict[int, int] = {sid: n for sid, n in conn.execute(
                sa.text(_FINISHED_SQL))}
            best_rows = conn.execute(sa.text(_BEST_SQL)).all()
        dirs: dict[int, dict[int, str]] = {}
        for sid, objective, direction in directions:
            name = direction if isinstance(direction, str) else direction.name
            dirs.setdefault(sid, {})[objective] = name.lower()
        counts: dict[int, dict[str, int]] = {}
        last: dict[int, datetime] = {}
        for sid, state, n, started, completed in states:
            counts.setdefault(sid, {})[state if isinstance(state, str) else state.name] = n
            for when in (started, completed):
                if when is not None and (sid not in last or when > last[sid]):
                    last[sid] = when
        bests: dict[int, list[float]] = {}
        for sid, kind, low, high in best_rows:
            kind = kind if isinstance(kind, str) else kind.name
            bests.setdefault(sid, []).extend(
                trial_value(v, kind) for v in (low, high) if v is not None or kind != "FINITE")
        by_id = {sid: json.loads(blob) for sid, blob in records}
        out = []
        for sid, name in studies:
            directions_of = tuple(d for _, d in sorted(dirs.get(sid, {}).items()))
            values = bests.get(sid)
            best = None
            if values and len(directions_of) == 1:
                best = min(values) if directions_of[0] == "minimize" else max(values)
            out.append(_summary(name, by_id.get(sid), directions_of, counts.get(sid, {}),
                                finished.get(sid, 0), best, last.get(sid)))
        return sorted(out, key=lambda s: s.name)

    return with_retry(query, what="list sweeps")


def _summary(name: str, record: object, directions: tuple[str, ...], counts: dict[str, int],
             finished: int, best: float | None, last: datetime | None) -> SweepSummary:
    if not isinstance(record, dict):
        return SweepSummary(name, False, None, None, None, (), directions, counts, best, last)
    objective = record.get("objective")
    objectives = objective if isinstance(objective, list) else [objective]
    metrics = tuple(str(o.get("metric")) for o in objectives if isinstance(o, dict))
    trials = record.get("trials")
    return SweepSummary(name, True, str(record.get("method")),
                        trials if isinstance(trials, int) else None, finished, metrics,
                        directions, counts, best, last)


_SWEEP_NAMES_SQL = """
SELECT s.study_name FROM studies s JOIN study_user_attributes a ON a.study_id = s.study_id
WHERE a.key = :k ORDER BY s.study_name"""


def study_names(storage: RDBStorage) -> tuple[list[str], list[str]]:
    """(names of the sweeps, names of the other Optuna studies) in the storage, sorted: what a
    "no sweep named X" message lists. Two small queries."""
    def query() -> tuple[list[str], list[str]]:
        with storage.engine.connect() as conn:
            every = [n for _, n in conn.execute(sa.text(_STUDIES_SQL))]
            sweeps = [n for (n,) in conn.execute(sa.text(_SWEEP_NAMES_SQL), {"k": SPEC_ATTR})]
        return sweeps, sorted(set(every) - set(sweeps))

    return with_retry(query, what="list study names")


def study_of_trial(storage: RDBStorage, trial_id: int) -> int | None:
    """The study a trial belongs to (None: no such trial): one lookup by primary key."""
    def query() -> int | None:
        with storage.engine.connect() as conn:
            found = conn.execute(sa.text("SELECT study_id FROM trials WHERE trial_id = :t"),
                                 {"t": trial_id}).scalar()
        return int(found) if found is not None else None

    return with_retry(query, what="find a trial's study")
