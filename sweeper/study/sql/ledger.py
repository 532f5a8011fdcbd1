"""The ledger's reads and the stale closer (:mod:`sweeper.accounting` decides what the rows
mean): every closed segment of a sweep and the open segments of its RUNNING trials in one
query, and the closing of an attempt's open segment by whoever ends the attempt for a runner
that could not (a stale heartbeat, a dead worker, a cancel), in the transaction that ends it."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper.accounting import Ending, OpenSegment
from sweeper.protocol import INDEX_ATTR, RESUMED_ATTR, SEGMENT_ATTR, USAGE_ATTR_PREFIX
from sweeper.study.retry import with_retry
from sweeper.study.values import ClosedSum, LedgerRow, LedgerSums

logger = logging.getLogger(__name__)

#: The ledger's rows (``{running}``: only those of RUNNING trials, for the gate's sums).
_ROWS = f"""
SELECT t.number, ix.value_json, t.state, a.key, a.value_json,
       CASE WHEN a.key = '{SEGMENT_ATTR}' THEN
         (SELECT MAX(v.step) FROM trial_intermediate_values v WHERE v.trial_id = t.trial_id)
       END,
       CASE WHEN a.key = '{SEGMENT_ATTR}' THEN
         (SELECT r.value_json FROM trial_user_attributes r WHERE r.trial_id = t.trial_id
          AND r.key = '{RESUMED_ATTR}')
       END
FROM trial_user_attributes a
JOIN trials t ON t.trial_id = a.trial_id
LEFT JOIN trial_user_attributes ix ON ix.trial_id = t.trial_id AND ix.key = '{INDEX_ATTR}'
WHERE t.study_id = :s {{running}} AND (a.key LIKE '{USAGE_ATTR_PREFIX}%'
                           OR (a.key = '{SEGMENT_ATTR}' AND t.state = 'RUNNING'))
"""
_LEDGER = sa.text(_ROWS.format(running="") + "ORDER BY t.number")


def _state(value: Any) -> TrialState:
    return value if isinstance(value, TrialState) else TrialState[str(value)]


def ledger(storage: RDBStorage, study_id: int) -> list[LedgerRow]:
    """Every closed segment of the study's trials, and the open segment of each RUNNING one
    (with the highest step it reported): one query."""
    def query() -> list[LedgerRow]:
        with storage.engine.connect() as conn:
            return _rows(conn.execute(_LEDGER, {"s": study_id}).all())

    return with_retry(query, what="read the ledger", url=getattr(storage, "url", None))


def _rows(rows: Sequence[Sequence[Any]]) -> list[LedgerRow]:
    return [LedgerRow(int(number), _index(ix), _state(state), str(key), str(value),
                      None if step is None else int(step), _index(resumed))
            for number, ix, state, key, value, step, resumed in rows]


def _index(raw: Any) -> int | None:
    """An integer attribute's stored JSON (an index, a step), or None."""
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_OPEN = sa.text(f"""
SELECT a.value_json,
       (SELECT u.value_json FROM trial_user_attributes u WHERE u.trial_id = :t AND u.key = '{RESUMED_ATTR}'),
       (SELECT MAX(v.step) FROM trial_intermediate_values v WHERE v.trial_id = :t),
       (SELECT hb.heartbeat FROM trial_heartbeats hb WHERE hb.trial_id = :t),
       CURRENT_TIMESTAMP
FROM trial_user_attributes a WHERE a.trial_id = :t AND a.key = '{SEGMENT_ATTR}'
""")  # noqa: E501


def _naive(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=None)


def close_open(conn: sa.Connection, trial_id: int, ending: Ending) -> None:
    """Close the trial's open segment as ``ending`` unless it is closed already (its runner
    closed it, or another closer did): its wall time runs from its start to its last
    heartbeat (that heartbeat's age, on the database's clock, taken from now on this
    process's). Call it in the transaction that ends the attempt, before the heartbeat goes."""
    row = conn.execute(_OPEN, {"t": trial_id}).first()
    if row is None:
        return
    raw, resumed, last_step, heartbeat, db_now = row
    segment = OpenSegment.parse(json.loads(raw))
    if segment is None:
        return
    key = segment.key
    if conn.execute(sa.text("SELECT 1 FROM trial_user_attributes WHERE trial_id = :t "
                            "AND key = :k"), {"t": trial_id, "k": key}).first() is not None:
        return
    end = datetime.now(timezone.utc).replace(tzinfo=None)
    if heartbeat is not None:
        end -= timedelta(seconds=max(0.0, (_naive(db_now) - _naive(heartbeat)).total_seconds()))
    from_resumed = json.loads(resumed) if resumed is not None else None
    if isinstance(from_resumed, int) and from_resumed > segment.from_step:
        segment = replace(segment, from_step=from_resumed)
    usage = segment.close(ending, end=end, last_step=None if last_step is None
                          else int(last_step), by="stale")
    conn.execute(sa.text("INSERT INTO trial_user_attributes (trial_id, key, value_json) "
                         "VALUES (:t, :k, :v)"),
                 {"t": trial_id, "k": key, "v": json.dumps(usage.encode())})
    logger.debug("trial %d: segment %s closed as %s (%.0fs)", trial_id, segment.claim,
                 ending.value, usage.wall_s)


#: The endings a closed segment may have (``accounting.Ending``): a segment with another is
#: not counted, here as in ``Usage.parse``.
_ENDINGS = ", ".join(f"'{e.value}'" for e in Ending)
#: Beyond these a stored figure is not one sweeper wrote (31 years of wall time, 10^12
#: steps): the ledger is then read row by row, as ``IndexStore.ledger`` reads it, so an odd
#: value counts as it always did and no integer sum can overflow.
_MAX_WALL_S, _MAX_STEPS = 1e9, 1e12

#: Per dialect: each closed segment of the study's trials that are not RUNNING, as the
#: figures ``accounting.Usage.parse`` and ``accounting.wall_ms`` make of it (a number that is
#: not one counts 0, wall time at least 0, in whole milliseconds, steps truncated); ``odd``
#: marks a segment the database cannot read as Python does (not a JSON object, a figure out
#: of range). The JSON functions of each dialect parse a number as Python does (correctly
#: rounded), and the arithmetic is the same IEEE double arithmetic.
_CLOSED = {
    "sqlite": f"""
SELECT ending, gpus, cpus,
       CAST(MAX(0.0, wall) * 1000.0 + 0.5 AS INTEGER) AS ms,
       steps,
       CASE WHEN wall > {_MAX_WALL_S} OR ABS(steps) > {_MAX_STEPS} THEN 1 ELSE 0 END AS odd
FROM (
  SELECT json_extract(a.value_json, '$.ending') AS ending,
         CASE WHEN json_type(a.value_json, '$.gpus') IN ('integer', 'real')
              THEN json_extract(a.value_json, '$.gpus') ELSE 0.0 END AS gpus,
         CASE WHEN json_type(a.value_json, '$.cpus') IN ('integer', 'real')
              THEN json_extract(a.value_json, '$.cpus') ELSE 0.0 END AS cpus,
         CASE WHEN json_type(a.value_json, '$.wall_s') IN ('integer', 'real')
              THEN json_extract(a.value_json, '$.wall_s') ELSE 0.0 END AS wall,
         CASE WHEN json_type(a.value_json, '$.steps') IN ('integer', 'real')
              THEN CAST(json_extract(a.value_json, '$.steps') AS INTEGER) ELSE 0 END AS steps
  FROM trial_user_attributes a JOIN trials t ON t.trial_id = a.trial_id
  WHERE t.study_id = :s AND t.state <> 'RUNNING' AND a.key LIKE '{USAGE_ATTR_PREFIX}%'
    AND CASE WHEN json_valid(a.value_json) THEN json_type(a.value_json) = 'object'
             AND json_type(a.value_json, '$.ending') = 'text'
             AND json_extract(a.value_json, '$.ending') IN ({_ENDINGS}) ELSE 0 END
)
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, 1
FROM trial_user_attributes a JOIN trials t ON t.trial_id = a.trial_id
WHERE t.study_id = :s AND t.state <> 'RUNNING' AND a.key LIKE '{USAGE_ATTR_PREFIX}%'
  AND NOT json_valid(a.value_json)
""",
    "postgresql": f"""
SELECT j->>'ending' AS ending,
       CASE WHEN jsonb_typeof(j->'gpus') = 'number'
            THEN (j->>'gpus')::float8 ELSE 0.0::float8 END AS gpus,
       CASE WHEN jsonb_typeof(j->'cpus') = 'number'
            THEN (j->>'cpus')::float8 ELSE 0.0::float8 END AS cpus,
       CASE WHEN jsonb_typeof(j->'wall_s') = 'number' AND (j->>'wall_s')::float8 <= {_MAX_WALL_S}
            THEN FLOOR(GREATEST(0.0::float8, (j->>'wall_s')::float8) * 1000.0::float8
                       + 0.5::float8)::bigint ELSE 0 END AS ms,
       CASE WHEN jsonb_typeof(j->'steps') = 'number' AND ABS((j->>'steps')::float8) <= {_MAX_STEPS}
            THEN TRUNC((j->>'steps')::float8)::bigint ELSE 0 END AS steps,
       CASE WHEN (jsonb_typeof(j->'wall_s') = 'number' AND (j->>'wall_s')::float8 > {_MAX_WALL_S})
              OR (jsonb_typeof(j->'steps') = 'number'
                  AND ABS((j->>'steps')::float8) > {_MAX_STEPS}) THEN 1 ELSE 0 END AS odd
FROM (
  SELECT a.value_json::jsonb AS j
  FROM trial_user_attributes a JOIN trials t ON t.trial_id = a.trial_id
  WHERE t.study_id = :s AND t.state <> 'RUNNING' AND a.key LIKE '{USAGE_ATTR_PREFIX}%'
  OFFSET 0
) x
WHERE jsonb_typeof(j) = 'object' AND jsonb_typeof(j->'ending') = 'string'
  AND j->>'ending' IN ({_ENDINGS})
""",
}


@functools.cache
def _sums_statement(dialect: str) -> sa.TextClause:
    """One statement (one snapshot: a trial that ends meanwhile is counted once): the closed
    sums (kind ``c``; ``o``: odd segments were found), the finished trials (``f``), and the
    RUNNING trials' ledger rows (``r``)."""
    running = _ROWS.format(running="AND t.state = 'RUNNING'")
    # The RUNNING trials' rows first: PostgreSQL takes the columns' types from them.
    return sa.text(f"""
SELECT 'r', r.*, NULL, NULL, NULL, NULL, NULL, NULL FROM ({running}) r
UNION ALL
SELECT CASE WHEN odd = 0 THEN 'c' ELSE 'o' END, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       ending, gpus, cpus, SUM(ms), SUM(steps), COUNT(*)
FROM ({_CLOSED[dialect]}) c GROUP BY ending, gpus, cpus, odd
UNION ALL
SELECT 'f', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, COUNT(*)
FROM trials t WHERE t.study_id = :s AND t.state IN ('COMPLETE', 'PRUNED')
  AND EXISTS (SELECT 1 FROM trial_user_attributes a WHERE a.trial_id = t.trial_id
              AND a.key LIKE '{USAGE_ATTR_PREFIX}%')

""")


def ledger_sums(storage: RDBStorage, study_id: int) -> LedgerSums:
    """The budget gate's read (``IndexStore.ledger_sums``): one statement, the closed
    segments of the trials that are not RUNNING summed by the database. A stored segment the
    database cannot read as Python does (a PostgreSQL error on its JSON, or one counted odd)
    makes it the whole ledger, row by row, instead."""
    dialect = storage.engine.dialect.name
    if dialect not in _CLOSED:
        return LedgerSums((), tuple(ledger(storage, study_id)), 0)

    def query() -> LedgerSums | None:
        try:
            with storage.engine.connect() as conn:
                got = conn.execute(_sums_statement(dialect), {"s": study_id}).all()
        except sa.exc.DataError:  # a value that is not JSON, a number out of range
            return None
        return _read_sums(got)

    sums = with_retry(query, what="read the ledger", url=getattr(storage, "url", None))
    return sums if sums is not None else LedgerSums((), tuple(ledger(storage, study_id)), 0)


def _read_sums(got: Sequence[Sequence[Any]]) -> LedgerSums | None:
    """The statement's rows as sums (None: an odd segment was found)."""
    closed, rows, finished = [], [], 0
    for kind, *row in got:
        if kind == "c":
            ending, gpus, cpus, ms, steps, n = row[7:]
            closed.append(ClosedSum(str(ending), float(gpus), float(cpus), int(ms), int(steps),
                                    int(n)))
        elif kind == "o":
            return None
        elif kind == "f":
            finished = int(row[12])
        elif kind == "r":
            rows.append(row[:7])
    # The rows in the order the whole ledger has them (by trial number), so that running
    # segments add up in the same order.
    rows.sort(key=lambda r: int(r[0]))
    return LedgerSums(tuple(closed), tuple(_rows(rows)), finished)
