"""What "already done" looks like for each write that cannot simply run twice.

A retried write may find its own earlier attempt: the commit reached the server and the
acknowledgement was lost with the connection. Such a write stores a token (a fresh random id
per call) in ``sweeper_writes`` in the same transaction as its effect; a retry that finds its
token knows the earlier attempt won, and reports what it would have reported then. Claims,
new attempts, FAILs by sweeper, study and trial creation go through here; the other writes
are idempotent as they stand (upserts, the enqueue's flag under the study lock, a tell that
finds its own values, see :mod:`sweeper.study.sql.storage`).

Tokens only matter while their call retries (minutes); rows older than :data:`TOKEN_TTL` are
pruned when the orchestrator opens the storage.
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from datetime import datetime, timedelta, timezone
from typing import Final

import sqlalchemy as sa

from sweeper.accounting import Ending
from sweeper.protocol import FAIL_REASON_ATTR
from sweeper.study.sql.ledger import close_open

logger = logging.getLogger(__name__)

#: How long a token is kept: far beyond any retry deadline.
TOKEN_TTL: Final = timedelta(days=1)

_METADATA = sa.MetaData()
#: One row per token-carrying write: which study or trial it created, claimed or failed.
WRITES = sa.Table(
    "sweeper_writes", _METADATA,
    sa.Column("token", sa.String(32), primary_key=True),
    sa.Column("study_id", sa.Integer, nullable=True),
    sa.Column("trial_id", sa.Integer, nullable=True),
    sa.Column("created", sa.DateTime, nullable=False, server_default=sa.func.current_timestamp()),
)

_READY: weakref.WeakSet[sa.Engine] = weakref.WeakSet()


def new_token() -> str:
    return uuid.uuid4().hex


def ensure_table(engine: sa.Engine) -> None:
    """Create ``sweeper_writes`` if this database lacks it (once per engine and process).
    Two processes creating it at once collide in PostgreSQL's catalog: the loser is fine."""
    if engine in _READY:
        return
    try:
        _METADATA.create_all(engine, checkfirst=True)
    except sa.exc.DBAPIError as e:
        if not any(w in str(e).lower() for w in ("already exists", "duplicate", "unique")):
            raise
    _READY.add(engine)


def prune(conn: sa.Connection) -> None:
    """Forget tokens older than :data:`TOKEN_TTL`."""
    cutoff = datetime.now(timezone.utc).replace(tzinfo=None) - TOKEN_TTL
    conn.execute(WRITES.delete().where(WRITES.c.created < cutoff))


def record(token: str, *, study_id: int | None = None,
           trial_id: int | None = None) -> sa.Insert:
    """The statement that stores ``token`` (run it in the transaction of the write)."""
    return WRITES.insert().values(token=token, study_id=study_id, trial_id=trial_id)


def find(conn: sa.Connection, token: str) -> tuple[int | None, int | None] | None:
    """(study_id, trial_id) of the write that stored ``token``; None if none did."""
    row = conn.execute(sa.select(WRITES.c.study_id, WRITES.c.trial_id)
                       .where(WRITES.c.token == token)).one_or_none()
    return None if row is None else (row[0], row[1])


def claim_waiting(conn: sa.Connection, trial_id: int, token: str, *, start: datetime,
                  heartbeat: bool) -> bool:
    """WAITING -> RUNNING for exactly one caller (a conditional UPDATE, atomic on PostgreSQL
    and SQLite alike), with the first heartbeat if asked, and the token. True when this call
    won, now or in an attempt whose acknowledgement was lost."""
    won = conn.execute(sa.text(
        "UPDATE trials SET state = 'RUNNING', datetime_start = :now "
        "WHERE trial_id = :t AND state = 'WAITING'"), {"t": trial_id, "now": start}).rowcount
    if won == 1:
        if heartbeat:
            # An upsert: a WAITING trial has no heartbeat row, but a paused one whose frozen
            # promoter beat once more after the put-back (sweeper.study.sql.paused) may.
            conn.execute(sa.text("INSERT INTO trial_heartbeats (trial_id, heartbeat) "
                                 "VALUES (:t, CURRENT_TIMESTAMP) ON CONFLICT (trial_id) "
                                 "DO UPDATE SET heartbeat = CURRENT_TIMESTAMP"), {"t": trial_id})
        conn.execute(record(token, trial_id=trial_id))
        return True
    return find(conn, token) is not None


def fail_unfinished(conn: sa.Connection, trial_id: int, token: str, reason: str) -> bool:
    """RUNNING (or WAITING) -> FAIL with the reason stored on the trial, and the token. True
    when this call failed it, now or in an attempt whose acknowledgement was lost; False when
    the trial had finished otherwise (completed, or failed by someone else). An open segment
    its runner did not close is closed as failed (:func:`close_open`)."""
    failed = conn.execute(sa.text(
        "UPDATE trials SET state = 'FAIL', datetime_complete = :now "
        "WHERE trial_id = :t AND state IN ('RUNNING', 'WAITING')"),
        {"t": trial_id, "now": datetime.now()}).rowcount
    if failed == 1:
        close_open(conn, trial_id, Ending.FAILED)
        params = {"t": trial_id, "k": FAIL_REASON_ATTR}
        conn.execute(sa.text("DELETE FROM trial_user_attributes WHERE trial_id = :t "
                             "AND key = :k"), params)
        conn.execute(sa.text("INSERT INTO trial_user_attributes (trial_id, key, value_json) "
                             "VALUES (:t, :k, :v)"), {**params, "v": json.dumps(reason)})
        conn.execute(record(token, trial_id=trial_id))
        return True
    return find(conn, token) is not None


def trial_state(conn: sa.Connection, trial_id: int) -> str | None:
    """The trial's state name, or None when there is no such trial."""
    state = conn.execute(sa.text("SELECT state FROM trials WHERE trial_id = :t"),
                         {"t": trial_id}).scalar_one_or_none()
    return None if state is None else str(getattr(state, "name", state))


#: :func:`claim_waiting` as one statement (PostgreSQL): the claim, its first heartbeat (when
#: ``beat``) and its token, then whether this call won (now, or in an earlier attempt whose
#: token is stored) and the trial's state before the statement (NULL: no such trial).
_CLAIM_ALONE = sa.text(
    "WITH won AS (UPDATE trials SET state = 'RUNNING', datetime_start = :now "
    "WHERE trial_id = :t AND state = 'WAITING' RETURNING trial_id), "
    "beat AS (INSERT INTO trial_heartbeats (trial_id, heartbeat) "
    "SELECT trial_id, CURRENT_TIMESTAMP FROM won WHERE :beat "
    "ON CONFLICT (trial_id) DO UPDATE SET heartbeat = CURRENT_TIMESTAMP), "
    "mine AS (INSERT INTO sweeper_writes (token, trial_id) SELECT :token, trial_id FROM won) "
    "SELECT (SELECT COUNT(*) FROM won) + (SELECT COUNT(*) FROM sweeper_writes "
    "WHERE token = :token), (SELECT state FROM trials WHERE trial_id = :t)")


def claim_alone(engine: sa.Engine, trial_id: int, token: str, *, start: datetime,
                heartbeat: bool) -> tuple[bool, str | None]:
    """:func:`claim_waiting` in one statement and round trip (PostgreSQL, see
    :mod:`sweeper.study.sql.oneshot`): (whether this call won, the trial's state before it)."""
    from sweeper.study.sql import oneshot

    rows, _ = oneshot.run(engine, _CLAIM_ALONE, {"t": trial_id, "now": start, "beat": heartbeat,
                                                 "token": token})
    won, state = rows[0]
    return bool(won), None if state is None else str(getattr(state, "name", state))
