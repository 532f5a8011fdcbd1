"""Server-side prepared statements for the one-statement steps (PostgreSQL, psycopg2).

A statement sent as text is parsed, analysed and planned by PostgreSQL on every call: for the
runner's data-modifying ``WITH`` statements the planning alone took about 1.2 ms of the
server's time per statement, and a trial's steps are two statements. Prepared once per
connection (SQL-level ``PREPARE``), a statement is sent as ``EXECUTE name(...)`` from then on:
it skips parsing, and after its first five executions PostgreSQL keeps a generic plan when it
costs no more than the custom ones, skipping planning too. What the statement does, its
atomicity and what a retry finds are those of the text.

Where preparing cannot work the statement runs as text, as before:

- a statement PostgreSQL will not prepare (a parameter whose type it cannot infer): the
  ``PREPARE`` fails before anything ran; remembered for the process and not tried again;
- a pooler in transaction mode (PgBouncer) may send the ``EXECUTE`` to a server connection
  that never saw the ``PREPARE``: it fails before doing anything (SQLSTATE 26000), and the
  engine stops preparing;
- ``SWEEPER_PG_PREPARE=0`` in the environment turns it off.
"""

from __future__ import annotations

import hashlib
import os
import re
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

#: Key of the pooled connection's ``info`` holding (the DBAPI connection, names prepared on it).
_KEY = "sweeper.prepared"
#: Names one connection may hold: statements whose text varies (the upserts, with their
#: number of rows) are prepared up to this many, the rest run as text.
MAX_PER_CONNECTION = 64
#: SQLSTATE of ``EXECUTE`` naming a statement the server connection does not have.
_UNKNOWN_NAME = "26000"
#: SQLSTATE of ``PREPARE`` naming one it has (a pooler's server connection shared with another
#: client that prepared the same text, under the same name).
_DUPLICATE_NAME = "42P05"
#: SQLSTATE of a missing table or column: the text fails as well, and the next call may not.
_NOT_YET = ("42P01", "42703")

_refused: weakref.WeakSet[sa.Engine] = weakref.WeakSet()  # engines behind a pooler
_unpreparable: set[str] = set()  # texts PostgreSQL would not prepare
_BIND = re.compile(r"%\(([^)]+)\)s|%%")


@dataclass(frozen=True)
class Form:
    """A statement's prepared form: its name, its ``PREPARE``, and its ``EXECUTE`` (with the
    driver's binds, in the order of the ``$n`` they fill)."""

    name: str
    prepare: str
    execute: str


@lru_cache(maxsize=512)
def form(sql: str) -> Form:
    """The prepared form of ``sql`` (psycopg2's ``%(name)s`` binds, literal ``%`` doubled):
    each bind becomes ``$n`` by its first appearance, the name is the text's hash (the same
    text prepares under the same name on every connection and in every process)."""
    order: dict[str, int] = {}

    def placeholder(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "%"
        return f"${order.setdefault(m.group(1), len(order) + 1)}"

    body = _BIND.sub(placeholder, sql)
    name = "sweeper_" + hashlib.sha1(sql.encode()).hexdigest()[:20]
    args = ", ".join(f"%({b})s" for b in order)
    return Form(name, f"PREPARE {name} AS {body}",
                f"EXECUTE {name}({args})" if args else f"EXECUTE {name}")


@dataclass(frozen=True)
class Statement:
    """``sql`` (the driver's bind style) to run on the pooled connection ``raw``."""

    engine: sa.Engine
    raw: Any  # sqlalchemy.pool.PoolProxiedConnection
    sql: str

    def execute(self, cursor: Any, binds: dict[str, Any]) -> None:
        """Run the statement on ``cursor``: prepared when it can be, else as text."""
        names = self._names()
        if names is None:
            cursor.execute(self.sql, binds)
            return
        f = form(self.sql)
        if f.name not in names:
            if len(names) >= MAX_PER_CONNECTION or not _prepare(cursor, f, self.sql):
                cursor.execute(self.sql, binds)
                return
            names.add(f.name)
        try:
            cursor.execute(f.execute, binds)
        except self.engine.dialect.loaded_dbapi.Error as e:
            if _code(e) != _UNKNOWN_NAME:
                raise
            # Nothing ran: a pooler (or a DISCARD) lost the name. Text from now on.
            _refused.add(self.engine)
            names.clear()
            cursor.execute(self.sql, binds)

    def _names(self) -> set[str] | None:
        """The names prepared on this connection, or None where it does not prepare."""
        if not enabled(self.engine) or self.sql in _unpreparable:
            return None
        conn = self.raw.dbapi_connection
        held = self.raw.info.get(_KEY)
        if held is None or held[0] is not conn:  # a new connection behind the pooled one
            held = (conn, set())
            self.raw.info[_KEY] = held
        names: set[str] = held[1]
        return names


def enabled(engine: sa.Engine) -> bool:
    """Whether ``engine``'s one-statement steps are prepared."""
    return (engine.dialect.driver == "psycopg2" and engine not in _refused
            and os.environ.get("SWEEPER_PG_PREPARE", "1") != "0")


def _prepare(cursor: Any, f: Form, sql: str) -> bool:
    """``PREPARE`` ``f`` on ``cursor``'s connection: whether it is prepared there now. An
    error of the statement's own (class 42: its text, its types) leaves it to run as text."""
    try:
        cursor.execute(f.prepare)
    except Exception as e:
        code = _code(e)
        if code == _DUPLICATE_NAME:
            return True
        if code is None or not code.startswith("42"):
            raise  # the connection, the server: the caller's to handle
        if code not in _NOT_YET:
            _unpreparable.add(sql)
        return False
    return True


def _code(e: BaseException) -> str | None:
    code = getattr(e, "pgcode", None)
    return code if isinstance(code, str) else None
