"""One statement, one round trip: the runner's hot path on PostgreSQL.

As transactions of several statements (BEGIN, each statement, COMMIT, every one a round trip
to the server; a read is BEGIN, SELECT, ROLLBACK) a trial with one report is 23 round trips.
On PostgreSQL each step is one statement instead, a data-modifying ``WITH`` where it writes
several tables, atomic on its own and sent with autocommit on: one round trip per step, two
for that trial (look up the index, claim it, stamp the runner's provenance and read the trial
back, whose planned params were stored when it was enqueued; the finish, with the report
written behind), and one where a local worker takes its next index in the finish's statement
(``RetryingRDBStorage.riding``). SQLite has no data-modifying ``WITH``: there the steps keep
their transactions. What a retry after a lost acknowledgement finds is the same either way:
the claim's token, the upserts' rows, the finished state and values. The
statements go to the driver's cursor, past SQLAlchemy's execution layer (see :func:`run`),
as server-side prepared statements (see :mod:`sweeper.study.sql.prepared`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from sweeper.study.sql import prepared


def alone(engine: sa.Engine) -> bool:
    """Whether ``engine``'s steps run as single statements (PostgreSQL)."""
    return engine.dialect.name == "postgresql"


def run(engine: sa.Engine, statement: sa.TextClause | str,
        params: Mapping[str, Any]) -> tuple[list[Any], int]:
    """Run ``statement`` (``:name`` binds, as in ``sa.text``) alone with autocommit on: (its
    rows as tuples, its row count). A statement is its own transaction then: no BEGIN before
    it, no COMMIT or ROLLBACK after it.

    It goes to the driver's cursor directly, on a pooled connection: SQLAlchemy's execution
    layer (building the clause, its compiled-cache lookup, the result's metadata) cost as much
    client CPU as the rest of a trial. What stays as with ``Connection.execute``: the pool and
    its events, the driver's errors wrapped in SQLAlchemy's classes (a lost connection is
    invalidated and says so, for :mod:`sweeper.study.retry`), and the engine's
    ``before_cursor_execute`` / ``after_cursor_execute`` listeners, which see each statement
    (with no Connection or context: there is none)."""
    sql = _driver_sql(engine.dialect, statement if isinstance(statement, str) else statement.text)
    binds = dict(params)
    dbapi_error = engine.dialect.loaded_dbapi.Error
    try:
        raw = engine.raw_connection()
    except dbapi_error as e:
        raise _wrapped(engine, sql, binds, e, gone=False) from e
    try:
        dbapi = raw.dbapi_connection
        assert dbapi is not None
        dbapi.autocommit = True
        cursor = raw.cursor()
        try:
            return _execute(engine, cursor, prepared.Statement(engine, raw, sql), binds)
        except dbapi_error as e:
            gone = engine.dialect.is_disconnect(e, dbapi, cursor)
            if gone:
                raw.invalidate(e)
            raise _wrapped(engine, sql, binds, e, gone=gone) from e
        finally:
            # A connection that broke raises here too; the statement's own error matters.
            with contextlib.suppress(Exception):
                cursor.close()
            with contextlib.suppress(Exception):
                dbapi.autocommit = False
    finally:
        raw.close()


def _execute(engine: sa.Engine, cursor: Any, statement: prepared.Statement,
             binds: dict[str, Any]) -> tuple[list[Any], int]:
    events, sql = engine.dispatch, statement.sql
    if events.before_cursor_execute:
        events.before_cursor_execute(None, cursor, sql, binds, None, False)
    statement.execute(cursor, binds)
    rows = list(cursor.fetchall()) if cursor.description is not None else []
    if events.after_cursor_execute:
        events.after_cursor_execute(None, cursor, sql, binds, None, False)
    return rows, cursor.rowcount


def _wrapped(engine: sa.Engine, sql: str, binds: dict[str, Any], e: Exception, *,
             gone: bool) -> sa.exc.StatementError:
    """The driver's error as ``Connection.execute`` raises it (OperationalError, ...)."""
    return sa.exc.DBAPIError.instance(sql, binds, e, engine.dialect.loaded_dbapi.Error,
                                      connection_invalidated=gone, dialect=engine.dialect)


@functools.lru_cache(maxsize=512)
def _driver_sql(dialect: sa.Dialect, text: str) -> str:
    """``text`` in the driver's own bind style (``%(name)s`` for psycopg2, literal percent
    signs doubled), as SQLAlchemy compiles it. Statements are few and fixed (the upserts vary
    only with their number of rows): each is compiled once per process."""
    return str(sa.text(text).compile(dialect=dialect))
