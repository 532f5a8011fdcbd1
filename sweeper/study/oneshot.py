"""One statement, one round trip: the runner's hot path on PostgreSQL.

Each step of a trial was a transaction of several statements (BEGIN, each statement, COMMIT,
every one a round trip to the server; a read was BEGIN, SELECT, ROLLBACK): 23 round trips
for a trial with one report. On PostgreSQL each step is one statement instead, a
data-modifying ``WITH`` where it writes several tables, atomic on its own and sent with
autocommit on: one round trip per step, five for that trial (look up the index and claim it,
open the trial, write its params and provenance, the report, the finish). SQLite has no
data-modifying ``WITH``: there the steps keep their transactions. What a retry after a lost
acknowledgement finds is unchanged: the claim's token, the upserts' rows, the finished state
and values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa


def alone(engine: sa.Engine) -> bool:
    """Whether ``engine``'s steps run as single statements (PostgreSQL)."""
    return engine.dialect.name == "postgresql"


def run(engine: sa.Engine, statement: sa.TextClause,
        params: Mapping[str, Any]) -> tuple[list[Any], int]:
    """Run ``statement`` alone with autocommit on: (its rows, its row count). A statement is
    its own transaction then: no BEGIN before it, no COMMIT or ROLLBACK after it."""
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        dbapi.autocommit = True
        try:
            result = conn.execute(statement, dict(params))
            rows = list(result.all()) if result.returns_rows else []
            return rows, result.rowcount
        finally:
            # A connection that broke raises here too; the statement's own error matters.
            with contextlib.suppress(Exception):
                dbapi.autocommit = False
