"""Opening a database as the index store: engine settings per database, the schema and the
additions the index protocol needs, each failure one line without the password."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage

from sweeper.errors import StorageError, StorageMissingError
from sweeper.protocol import INDEX_ATTR
from sweeper.study.retry import StorageFailure, StorageOutage, with_retry
from sweeper.study.sql import writes
from sweeper.study.sql.storage import logger
from sweeper.study.sql.store import SqlStore
from sweeper.study.urls import driver_url, redact, scrub

#: What opening a storage raises, each turned into one line without the password: database
#: and driver errors (SQLAlchemy wraps the driver's), a driver that is not installed, Optuna's
#: own errors and its schema-version check (RuntimeError), a malformed URL or file path.
OPEN_ERRORS = (sa.exc.SQLAlchemyError, optuna.exceptions.OptunaError, ImportError, RuntimeError,
               ValueError, LookupError, OSError)


def open_sql_store(url: str, *, connect_deadline_s: float = 0.0, pool_size: int = 1,
                   max_overflow: int = 1, prepared: bool = False,
                   create: bool = True) -> SqlStore:
    """Open (and on first use create) the Optuna schema at ``url``.

    ``connect_deadline_s`` > 0 keeps retrying transient errors (a database not up yet, or
    dropping connections) that long, a warning on each retry, then raises
    :class:`~sweeper.study.retry.StorageOutage`; 0 fails at once. Permanent errors fail at once
    either way, with one clear line. Errors never contain the password.
    ``prepared``: the orchestrator already created and checked the schema (trial runners), so
    skip Optuna's table creation and alembic version check (a second connection held at once
    and a tenth of a runner's start-up) and the index DDL (a table lock on PostgreSQL); a
    database without the schema still gets the full treatment.
    ``create=False`` (commands that only read, and delete): never create anything, neither a
    SQLite file nor the schema nor sweeper's index; a storage that does not exist yet raises
    :class:`StorageMissingError` saying so.
    """
    real = driver_url(url)
    engine_kwargs = engine_options(url, pool_size=pool_size, max_overflow=max_overflow)

    def connect() -> SqlStore:
        if not create:
            return _open_existing(url, real, engine_kwargs)
        if prepared:
            storage = _open_prepared(real, engine_kwargs)
            if storage is not None:
                return storage
        return _open_and_prepare(real, engine_kwargs)

    try:
        if connect_deadline_s > 0:
            return with_retry(connect, deadline_s=connect_deadline_s,
                              what=f"opening {redact(url)}", url=url)
        return connect()
    except StorageOutage:
        raise
    except StorageFailure as e:  # permanent: said as when there is no retry
        raise _cannot_open(url, e.__cause__ or e) from None
    except StorageError:
        raise
    except OPEN_ERRORS as e:
        raise _cannot_open(url, e) from None


def _cannot_open(url: str, e: BaseException) -> StorageError:
    cause = e.__cause__ or e
    detail = str(getattr(cause, "orig", None) or cause).strip().splitlines()
    reason = detail[0] if detail else type(cause).__name__
    return StorageError(scrub(f"cannot open storage {redact(url)}: {reason}", url))


def engine_options(url: str, *, pool_size: int = 1, max_overflow: int = 1) -> dict[str, Any]:
    """The SQLAlchemy engine options :func:`open_storage` uses for ``url`` (SQLite busy
    timeout; PostgreSQL pool size, connect timeout; the storage adds a ping of connections
    that sat idle, :func:`ping_when_idle`)."""
    scheme = driver_url(url).split("://", 1)[0]
    if scheme.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    if scheme.startswith("postgresql"):
        return {"pool_size": pool_size, "max_overflow": max_overflow,
                "pool_recycle": 1800,
                "connect_args": {"connect_timeout": 10, "application_name": "sweeper"}}
    raise StorageError(f"unsupported storage URL {redact(url)}: use sqlite:///path.db or "
                       "postgresql://user:password@host/db")


def _open_existing(url: str, real: str, engine_kwargs: dict[str, Any]) -> SqlStore:
    """Open a storage that must already hold Optuna's schema, writing nothing."""
    parsed = sa.engine.make_url(real)
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database or ""
        if db and db != ":memory:" and not db.startswith("file:") and not os.path.isfile(db):
            raise StorageMissingError(f"storage {redact(url)}: the file "
                                      f"{os.path.abspath(db)} does not exist")
    probe = sa.create_engine(real, **engine_kwargs)
    try:
        has_schema = sa.inspect(probe).has_table("studies")
    finally:
        probe.dispose()
    if not has_schema:
        raise StorageMissingError(f"storage {redact(url)} has no Optuna tables (no sweep has "
                                  "run there)")
    return SqlStore(real, engine_kwargs=engine_kwargs, skip_table_creation=True)


def _open_prepared(real: str, engine_kwargs: dict[str, Any]) -> SqlStore | None:
    """The schema exists already: no table creation, version check or index DDL. None when
    that fails (no schema yet, or unreachable): the full path then says which."""
    try:
        storage = SqlStore(real, engine_kwargs=engine_kwargs,
                                     skip_compatibility_check=True, skip_table_creation=True)
        if storage.engine.dialect.name == "sqlite":
            with storage.engine.begin() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        return storage
    except OPEN_ERRORS:  # whatever it was, the full path tries again and says why
        return None


def _open_and_prepare(real: str, engine_kwargs: dict[str, Any]) -> SqlStore:
    # Two processes creating the schema of a fresh database at the same moment collide on
    # PostgreSQL's catalog (duplicate type or table); the loser just tries again.
    for attempt in range(5):
        try:
            storage = SqlStore(real, engine_kwargs=engine_kwargs)
            _prepare(storage)
            return storage
        except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
            text = str(e.__cause__ or e).lower()
            if attempt == 4 or not any(w in text for w in ("already exists", "duplicate",
                                                           "unique constraint")):
                raise
            time.sleep(0.2 + random.random() * 0.5)
    raise AssertionError("unreachable")


def _prepare(storage: RDBStorage) -> None:
    """SQLite: WAL so readers never block the writer. Both: a partial index that makes
    'trials of index i' a lookup instead of a scan (only rows tagged sweeper:index enter it),
    and the table of write tokens (:mod:`sweeper.study.sql.writes`), pruned of old ones."""
    engine = storage.engine
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        conn.exec_driver_sql(
            "CREATE INDEX IF NOT EXISTS ix_sweeper_index ON trial_user_attributes "
            f"(value_json, trial_id) WHERE key = '{INDEX_ATTR}'")
    try:
        writes.ensure_table(engine)
        with engine.begin() as conn:
            writes.prune(conn)
    except sa.exc.OperationalError as e:
        # A read-only database still serves status, best and export; its writes fail then.
        if "readonly" not in str(e).lower():
            raise
        logger.debug("read-only database: sweeper_writes left as it is")
