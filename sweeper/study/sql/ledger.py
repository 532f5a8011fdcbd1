"""The ledger's reads and the stale closer (:mod:`sweeper.accounting` decides what the rows
mean): every closed segment of a sweep and the open segments of its RUNNING trials in one
query, and the closing of an attempt's open segment by whoever ends the attempt for a runner
that could not (a stale heartbeat, a dead worker, a cancel), in the transaction that ends it."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper.accounting import Ending, OpenSegment
from sweeper.protocol import INDEX_ATTR, RESUMED_ATTR, SEGMENT_ATTR, USAGE_ATTR_PREFIX
from sweeper.study.retry import with_retry
from sweeper.study.values import LedgerRow

logger = logging.getLogger(__name__)

_LEDGER = sa.text(f"""
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
WHERE t.study_id = :s AND (a.key LIKE '{USAGE_ATTR_PREFIX}%'
                           OR (a.key = '{SEGMENT_ATTR}' AND t.state = 'RUNNING'))
ORDER BY t.number
""")


def _state(value: Any) -> TrialState:
    return value if isinstance(value, TrialState) else TrialState[str(value)]


def ledger(storage: RDBStorage, study_id: int) -> list[LedgerRow]:
    """Every closed segment of the study's trials, and the open segment of each RUNNING one
    (with the highest step it reported): one query."""
    def query() -> list[LedgerRow]:
        with storage.engine.connect() as conn:
            rows = conn.execute(_LEDGER, {"s": study_id}).all()
        return [LedgerRow(int(number), _index(ix), _state(state), str(key), str(value),
                          None if step is None else int(step), _index(resumed))
                for number, ix, state, key, value, step, resumed in rows]

    return with_retry(query, what="read the ledger", url=getattr(storage, "url", None))


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
