"""The index protocol's queries and claims (see DESIGN.md, "The index protocol").

A runner only ever touches the trials of its own index, found by a query on the indexed
``sweeper:index`` tag, never by a scan of the study. Claiming a WAITING trial is a conditional
UPDATE; creating the next attempt of an index holds the study lock (:mod:`._bulk`). Each of
the three writes (claim, next attempt, FAIL) stores its call's token in the same transaction,
so a retry after a lost acknowledgement knows its own write (:mod:`.writes`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper.protocol import INDEX_ATTR, STOP_ATTR
from sweeper.study.retry import with_retry
from sweeper.study.sql import oneshot, writes
from sweeper.study.sql._bulk import TrialRow, exclusive, insert_trials, utcnow
from sweeper.study.values import Attempt, NextTake, Taken

logger = logging.getLogger(__name__)

_ATTEMPTS_SQL = f"""
SELECT t.trial_id, t.number, t.state, t.datetime_start, hb.heartbeat, CURRENT_TIMESTAMP
FROM trial_user_attributes ua
JOIN trials t ON t.trial_id = ua.trial_id
LEFT JOIN trial_heartbeats hb ON hb.trial_id = t.trial_id
WHERE ua.key = '{INDEX_ATTR}' AND ua.value_json = :v AND t.study_id = :s
ORDER BY t.number
"""


def _as_datetime(value: datetime | str) -> datetime:
    """Naive datetime from a raw-SQL row (SQLite hands back text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=None)


def _db_now(conn: sa.Connection) -> datetime:
    return _as_datetime(conn.execute(sa.select(sa.func.now())).scalar_one())


_ATTEMPTS = sa.text(_ATTEMPTS_SQL)


def _attempts(conn: sa.Connection, study_id: int, index: int) -> list[Attempt]:
    return _parse_attempts(conn.execute(_ATTEMPTS, {"v": json.dumps(index),
                                                    "s": study_id}).all())


def _parse_attempts(rows: Sequence[Any]) -> list[Attempt]:
    """Attempts from the rows of :data:`_ATTEMPTS_SQL` (the database clock in each row)."""
    out = []
    for k, (tid, number, state, started, heartbeat, db_now) in enumerate(rows):
        st = TrialState[state] if isinstance(state, str) else TrialState(state)
        age = None
        if st == TrialState.RUNNING:
            if heartbeat is not None:
                age = (_as_datetime(db_now) - _as_datetime(heartbeat)).total_seconds()
            elif started is not None:
                age = (utcnow() - _as_datetime(started)).total_seconds()
        out.append(Attempt(tid, number, st, k, age))
    return out


def attempts(storage: RDBStorage, study_id: int,
             index: int) -> list[Attempt]:
    """Every trial tagged ``index``, oldest first: one indexed query."""
    def query() -> list[Attempt]:
        if oneshot.alone(storage.engine):  # one round trip, no transaction around it
            return _parse_attempts(oneshot.run(storage.engine, _ATTEMPTS, {
                "v": json.dumps(index), "s": study_id})[0])
        with storage.engine.connect() as conn:
            return _attempts(conn, study_id, index)

    return with_retry(query, what="find index", url=storage.url)


#: :func:`take` as one statement (PostgreSQL): the index's attempts; its WAITING trial claimed
#: (with the first heartbeat, the call's token and the caller's user attributes) when that is
#: the latest attempt and none finished; the trial this call claimed, now or in an attempt
#: whose token is stored; and, claimed now, that trial's attributes and params as they were
#: before the claim (one JSON array of [kind, key, value_json, internal value]), so that the
#: runner opens it without another round trip (:func:`sweeper.study.trials.open_claimed`);
#: and the sweep's recorded stop (:mod:`sweeper.study.stop`), which no claim passes: a runner
#: that starts after a rule or the brake fired claims nothing (one row with NULL attempt
#: columns carries it when the index has no attempt yet).
#: The read costs PostgreSQL about 0.15 ms more planning and execution, a separate statement
#: about 0.3 ms on an idle server and a wake-up of both sides on a busy one.
#: The parts of the ``WITH`` (``{guard}``: a further condition of the claim) and the SELECT's
#: columns and FROM are kept apart so that the take can ride with a finish
#: (:func:`take_riding`).
_TAKE_CTES = f"""halt AS (
  SELECT value_json FROM study_user_attributes WHERE study_id = :s AND key = '{STOP_ATTR}'),
att AS (
  SELECT t.trial_id, t.number, t.state, t.datetime_start, hb.heartbeat
  FROM trial_user_attributes ua
  JOIN trials t ON t.trial_id = ua.trial_id
  LEFT JOIN trial_heartbeats hb ON hb.trial_id = t.trial_id
  WHERE ua.key = '{INDEX_ATTR}' AND ua.value_json = :v AND t.study_id = :s),
pick AS (
  SELECT trial_id FROM att WHERE state = 'WAITING' AND number = (SELECT MAX(number) FROM att)
  AND NOT EXISTS (SELECT 1 FROM att WHERE state IN ('COMPLETE', 'PRUNED'))
  AND NOT EXISTS (SELECT 1 FROM halt WHERE CAST(value_json AS json)->>'state' = 'stopped')
  {{guard}}),
won AS (
  UPDATE trials SET state = 'RUNNING', datetime_start = :now
  WHERE trial_id IN (SELECT trial_id FROM pick) AND state = 'WAITING' RETURNING trial_id),
beat AS (
  INSERT INTO trial_heartbeats (trial_id, heartbeat) SELECT trial_id, CURRENT_TIMESTAMP FROM won),
mine AS (
  INSERT INTO sweeper_writes (token, trial_id) SELECT :token, trial_id FROM won),
attrs AS (
  INSERT INTO trial_user_attributes (trial_id, key, value_json)
  SELECT won.trial_id, a.key, a.value_json
  FROM won, unnest(CAST(:keys AS text[]), CAST(:values AS text[])) AS a(key, value_json)
  ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json)"""
_TAKE_COLUMNS = """att.*, CURRENT_TIMESTAMP,
  COALESCE((SELECT trial_id FROM won),
           (SELECT trial_id FROM sweeper_writes WHERE token = :token)),
  (SELECT json_agg(json_build_array(o.kind, o.key, o.value_json, o.num)) FROM (
     SELECT 'u' AS kind, key, value_json, CAST(NULL AS DOUBLE PRECISION) AS num
     FROM trial_user_attributes WHERE trial_id = (SELECT trial_id FROM won)
     UNION ALL
     SELECT 's', key, value_json, NULL FROM trial_system_attributes
     WHERE trial_id = (SELECT trial_id FROM won)
     UNION ALL
     SELECT 'p', param_name, distribution_json, param_value FROM trial_params
     WHERE trial_id = (SELECT trial_id FROM won)) o),
  (SELECT value_json FROM halt)"""
_TAKE_FROM = "FROM (SELECT 1) one LEFT JOIN att ON true ORDER BY att.number"
_TAKE_SQL = f"WITH {_TAKE_CTES.format(guard='')}\nSELECT {_TAKE_COLUMNS}\n{_TAKE_FROM}\n"
_TAKE = sa.text(_TAKE_SQL)


@dataclass(frozen=True)
class TakeParts:
    """A take as parts of another data-modifying statement (:func:`take_riding`): its ``WITH``
    parts, the SELECT's columns (the take's own first, as :func:`take` reads them) and FROM,
    its binds, and how to read its rows."""

    ctes: str
    columns: str
    from_: str
    binds: dict[str, Any]
    read: Callable[[Sequence[Any]], Taken]


def _take_binds(study_id: int, index: int, user_attrs: Mapping[str, Any] | None,
                token: str) -> tuple[dict[str, Any], Callable[[Sequence[Any]], Taken]]:
    """The binds of a take and the reader of its rows (the take's columns first in each)."""
    now, attrs = utcnow(), {k: json.dumps(v) for k, v in (user_attrs or {}).items()}
    binds = {"v": json.dumps(index), "s": study_id, "now": now, "token": token,
             "keys": list(attrs), "values": list(attrs.values())}
    set_now = tuple(("u", k, v, None) for k, v in attrs.items())

    def read(rows: Sequence[Any]) -> Taken:
        found = _parse_attempts([row[:6] for row in rows if row[0] is not None])
        won, stored_json, halt = rows[0][6], rows[0][7], rows[0][8]  # one row at least
        stop = json.loads(halt) if halt is not None else None
        claimed = next((a for a in found if a.trial_id == won), None)
        if claimed is None or stored_json is None:
            return Taken(found, claimed, stop_read=True, stop=stop)
        stored = tuple((kind, key, value_json, num) for kind, key, value_json, num in stored_json)
        return Taken(found, claimed, stored + set_now, now, stop_read=True, stop=stop)

    return binds, read


def take(storage: RDBStorage, study_id: int, index: int,
         user_attrs: Mapping[str, Any] | None = None, token: str | None = None) -> Taken:
    """A runner's first look at ``index``: its attempts and, on PostgreSQL, in the same
    statement and round trip, the claim of its WAITING trial when that is what the runner
    would claim next (the latest attempt, none finished, the sweep not stopped), with
    ``user_attrs`` set on the trial it claims, and the sweep's stop attribute. A retry after a
    lost acknowledgement finds its claim by its token."""
    if not oneshot.alone(storage.engine):
        return Taken(attempts(storage, study_id, index))
    writes.ensure_table(storage.engine)
    binds, read = _take_binds(study_id, index, user_attrs, token or writes.new_token())

    def query() -> Taken:
        return read(oneshot.run(storage.engine, _TAKE, binds)[0])

    return with_retry(query, what="claim", url=storage.url)


def take_riding(storage: RDBStorage, ahead: NextTake, guard: str) -> TakeParts:
    """:func:`take` of ``ahead`` as parts of a statement that finishes another trial
    (PostgreSQL; ``RetryingRDBStorage.riding``): it claims only where ``guard`` (SQL) holds,
    the finish's match. The same statement's snapshot, the same claim, the same token: what
    it found is what :func:`take` would have found at that moment, and a take of the same
    index with the same token afterwards finds a claim of it that landed."""
    writes.ensure_table(storage.engine)
    binds, read = _take_binds(ahead.study_id, ahead.index, ahead.user_attrs, ahead.token)
    return TakeParts(_TAKE_CTES.format(guard=f"AND {guard}"), _TAKE_COLUMNS, _TAKE_FROM,
                     binds, read)


def claim(storage: RDBStorage, trial_id: int, *,
          token: str | None = None) -> bool:
    """WAITING -> RUNNING for exactly one caller: a conditional UPDATE, atomic on PostgreSQL
    and SQLite alike (Optuna's read-then-write claim is not, on SQLite). Records the first
    heartbeat and the claim's token in the same transaction: a retry whose first attempt won
    (the acknowledgement lost) finds the token and reports the win. Through a proxy the
    client makes the token and sends it, so a call it retries (its reply lost with a proxy
    restart) is recognised too."""
    token = token or writes.new_token()
    writes.ensure_table(storage.engine)

    def update() -> bool:
        if oneshot.alone(storage.engine):
            return writes.claim_alone(storage.engine, trial_id, token, start=utcnow(),
                                      heartbeat=True)[0]
        with storage.engine.begin() as conn:
            return writes.claim_waiting(conn, trial_id, token, start=utcnow(), heartbeat=True)

    return with_retry(update, what="claim", url=storage.url)


def new_attempt(storage: RDBStorage, study_id: int, index: int, *,
                after: Attempt | None, params: dict[str, Any] | None,
                token: str | None = None) -> int | None:
    """Create the next attempt of ``index`` as RUNNING (owned by the caller), linked to
    ``after``. Returns its trial id, or None when another runner got there first (the latest
    attempt is no longer ``after``): the caller looks again. The new trial and the call's
    token are one transaction: a retry that finds the token returns the trial it created."""
    token = token or writes.new_token()
    writes.ensure_table(storage.engine)

    def create() -> int | None:
        with exclusive(storage.engine, study_id) as conn:
            current = _attempts(conn, study_id, index)
            latest = current[-1] if current else None
            if (latest.trial_id if latest else None) != (after.trial_id if after else None) \
                    or (latest is not None and not latest.state.is_finished()):
                mine = writes.find(conn, token)
                return mine[1] if mine is not None else None
            row = TrialRow(index=index, params=params, state=TrialState.RUNNING,
                           attempt=len(current),
                           retry_of=after.number if after is not None else None)
            tid = insert_trials(conn, study_id, [row])[0]
            conn.execute(writes.record(token, study_id=study_id, trial_id=tid))
            return tid

    return with_retry(create, what="create attempt", url=storage.url)


def mark_failed(storage: RDBStorage, trial_id: int, reason: str, *,
                token: str | None = None) -> bool:
    """RUNNING -> FAIL with the reason stored on the trial, in one transaction with the call's
    token. True if this call failed it (also when a retry finds its own landed FAIL); False if
    the trial had already finished (completed, or failed by someone else)."""
    token = token or writes.new_token()
    writes.ensure_table(storage.engine)

    def fail() -> bool:
        with storage.engine.begin() as conn:
            return writes.fail_unfinished(conn, trial_id, token, reason[:2000])

    return with_retry(fail, what="mark failed", url=storage.url)


def fail_stale_trials(storage: RDBStorage, study_id: int,
                      grace_s: float) -> list[int]:
    """Mark RUNNING trials whose heartbeat is older than ``grace_s`` FAIL (the watcher's sweep
    for runners that froze or vanished). Returns the ids of the trials it failed."""
    def stale() -> list[tuple[int, int]]:
        with storage.engine.connect() as conn:
            now = _db_now(conn)
            rows = conn.execute(sa.text(
                "SELECT t.trial_id, t.number, hb.heartbeat FROM trials t JOIN trial_heartbeats hb "
                "ON hb.trial_id = t.trial_id WHERE t.study_id = :s AND t.state = 'RUNNING'"),
                {"s": study_id}).all()
        return [(tid, number) for tid, number, hb in rows
                if (now - _as_datetime(hb)).total_seconds() > grace_s]

    failed = []
    for tid, number in with_retry(stale, what="find stale trials", url=storage.url):
        if mark_failed(storage, tid, f"heartbeat older than {grace_s:.0f}s: runner presumed dead"):
            logger.warning("trial #%d: heartbeat stale for %.0fs; marked FAIL", number, grace_s)
            failed.append(tid)
    return failed
