"""Retrying what a database restart interrupts: which errors are transient (decided by the
error, not by its class alone), the backoff, and the one-line error for everything else.

Transient, retried with backoff until the deadline: a lost connection (libpq's "server closed
the connection", "could not connect", SQLSTATE class 08), a server restart or
``pg_terminate_backend`` (57P01-57P03), too many connections (53300), serialization failures and
deadlocks (40001, 40P01), a lock timeout (55P03), SQLite's "database is locked".

Permanent, failed at once with :class:`StorageFailure` (one line, no password): every other
error the server reports (a missing table, a read-only database or transaction, failed
authentication, disk full, a statement timeout, ...), a host name that does not resolve,
SQLite errors other than busy/locked ("no such table", "attempt to write a readonly database",
"unable to open database file"). A transient error that outlasts the deadline is a
:class:`StorageOutage` (a StorageFailure with the exit code of an unreachable storage). Errors
that are not database errors (KeyError for an unknown id, Optuna's UpdateFinishedTrialError,
...) pass through untouched.

A retried write may have landed before its acknowledgement was lost. Writes that cannot simply
run twice say what "already done" looks like: ``landed`` (checked before each retry) or a token
the write stores with itself (:mod:`sweeper.study.sql.writes`).
"""

from __future__ import annotations

import functools
import logging
import random
import re
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import optuna
import sqlalchemy as sa

from sweeper.errors import StorageError, StorageUnavailableError

logger = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: SQLSTATEs a retry can fix (class 08 "connection exception" as a whole, see _TRANSIENT_CLASSES).
TRANSIENT_SQLSTATES: Final = frozenset({
    "57P01",  # admin_shutdown: fast shutdown, restart, pg_terminate_backend
    "57P02",  # crash_shutdown: another backend crashed, the server restarts
    "57P03",  # cannot_connect_now: the database system is starting up / shutting down
    "53300",  # too_many_connections: others will disconnect
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "55P03",  # lock_not_available (lock_timeout)
})
_TRANSIENT_CLASSES: Final = ("08",)

#: libpq / psycopg2 messages of a connection that failed for good (no SQLSTATE reaches the
#: client when the server refuses a connection): wrong password, no such role or database, a
#: host name that does not exist (getaddrinfo's EAI_NONAME; its EAI_AGAIN, "temporary failure
#: in name resolution", is a DNS server that may answer again).
_PERMANENT_CONNECT_MESSAGES: Final = (
    "authentication failed", "no pg_hba.conf entry", "does not exist", "permission denied",
    "invalid dsn", "invalid connection option", "sslmode value",
    "name or service not known", "nodename nor servname provided",
    "no address associated with hostname",
)
#: SQLite's retryable conditions, by message (its exceptions carry sqlite_errorname too).
_SQLITE_TRANSIENT_MESSAGES: Final = ("database is locked", "database table is locked",
                                     "database schema has changed")

_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)


class StorageFailure(StorageError, optuna.exceptions.StorageInternalError):
    """A database error no retry fixes: permanent, or transient past the deadline. A
    StorageError for sweeper (one line, exit code 2) and a StorageInternalError for Optuna's
    callers (what RDBStorage raises for database errors)."""


class StorageOutage(StorageUnavailableError, StorageFailure):
    """A transient database error that outlasted the deadline: the database may come back, so
    it is no user's mistake (the exit code of :class:`StorageUnavailableError`)."""


#: What wraps a driver's error on its way up: SQLAlchemy's errors and Optuna's storage error.
_WRAPPERS = (optuna.exceptions.StorageInternalError, sa.exc.SQLAlchemyError)

def _driver_error(e: BaseException) -> tuple[BaseException, sa.exc.DBAPIError | None] | None:
    """The driver's exception behind ``e`` (directly, or through Optuna's StorageInternalError
    and SQLAlchemy's wrapper, which chain it as ``__cause__``), with the SQLAlchemy wrapper if
    there is one. None for anything else: an error that merely happened while handling a
    database error (Optuna's DuplicatedStudyError after an IntegrityError) is not one."""
    err: BaseException | None = e
    for _ in range(8):
        if err is None:
            return None
        if isinstance(err, sa.exc.DBAPIError):
            return (err.orig if err.orig is not None else err), err
        if type(err).__module__.startswith(("psycopg2", "sqlite3", "_sqlite3", "psycopg")):
            return err, None
        if not isinstance(err, _WRAPPERS):
            return None
        err = err.__cause__
    return None


def classify(e: BaseException) -> str | None:
    """``"transient"``, ``"permanent"``, or None for an error that is not a database error."""
    for err in (e, e.__cause__):
        if isinstance(err, (sa.exc.TimeoutError, sa.exc.PendingRollbackError)):
            return "transient"  # every pooled connection busy; a connection lost mid-transaction
    found = _driver_error(e)
    if found is None:
        return None
    orig, wrapper = found
    if wrapper is not None and wrapper.connection_invalidated:
        return "transient"
    code = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    if code:
        code = str(code)
        return "transient" if code in TRANSIENT_SQLSTATES or code[:2] in _TRANSIENT_CLASSES \
            else "permanent"
    return _classify_without_sqlstate(orig)


def _classify_without_sqlstate(orig: BaseException) -> str:
    """A driver error that carries no SQLSTATE: SQLite's, or a connection that was lost or
    could not be opened (decided by its message)."""
    message = str(orig).lower()
    name = str(getattr(orig, "sqlite_errorname", "") or "")
    if name or "sqlite" in type(orig).__module__:
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or \
                any(m in message for m in _SQLITE_TRANSIENT_MESSAGES):
            return "transient"
        return "permanent"
    if isinstance(orig, (sa.exc.OperationalError, sa.exc.InterfaceError)) or \
            type(orig).__name__ in ("OperationalError", "InterfaceError"):
        # No SQLSTATE: the client lost or could not open the connection. A refused login, an
        # unknown database or host is for good; anything else (refused, reset, closed, a DNS
        # server that does not answer) a restart or a network blip.
        if any(m in message for m in _PERMANENT_CONNECT_MESSAGES):
            return "permanent"
        return "transient"
    return "permanent"


def is_transient(e: BaseException) -> bool:
    """Connection loss, server restart, serialization failure, SQLite busy: worth a retry."""
    return classify(e) == "transient"


def describe(e: BaseException) -> str:
    """The database's own words for ``e``, one line, with its SQLSTATE, without passwords."""
    found = _driver_error(e)
    orig: BaseException = found[0] if found is not None else e
    lines = [ln.strip() for ln in str(orig).splitlines() if ln.strip()]
    text = lines[0] if lines else type(orig).__name__
    for prefix in ("fatal:", "error:"):
        if text.lower().startswith(prefix):
            text = text[len(prefix):].strip()
    code = getattr(orig, "pgcode", None)
    if code:
        text += f" (SQLSTATE {code})"
    return _URL_PASSWORD.sub(r"\1***@", text)


def failure(e: BaseException, what: str, *, waited_s: float | None = None,
            url: str | None = None) -> StorageFailure:
    """The one-line error for a database error no retry fixes: permanent, or (``waited_s``
    given) transient for longer than the caller waits, a :class:`StorageOutage`."""
    if waited_s is None:
        text = f"database error during {what}: {describe(e)}"
    else:
        text = f"database unavailable for {waited_s:.0f}s during {what}: {describe(e)}"
    if url:
        from sweeper.study.urls import scrub

        text = scrub(text, url)
    return StorageFailure(text) if waited_s is None else StorageOutage(text)


class _NotDone:
    def __repr__(self) -> str:
        return "NOT_DONE"


#: What a ``landed`` check returns when the interrupted write did not land: run it again.
NOT_DONE: Final[Any] = _NotDone()


def with_retry(fn: Callable[..., T], *args: Any, deadline_s: float = 300.0,
               what: str | None = None, landed: Callable[[], Any] | None = None,
               url: str | None = None, **kwargs: Any) -> T:
    """Call ``fn``, retrying transient database errors with capped exponential backoff.

    ``landed``, when given, is asked before every retry whether the interrupted call took
    effect after all (its commit reached the server, the acknowledgement did not): it returns
    the call's result, or :data:`NOT_DONE` to run ``fn`` again. Permanent database errors, and
    transient ones past ``deadline_s``, raise :class:`StorageFailure`; other errors pass."""
    name = str(what or getattr(fn, "__name__", "a query"))
    start = time.monotonic()
    delay = 0.2
    interrupted = False
    while True:
        try:
            if interrupted and landed is not None:
                result = landed()
                if result is not NOT_DONE:
                    logger.info("%s: the interrupted call had landed", name)
                    return result
            return fn(*args, **kwargs)
        except StorageFailure:
            raise
        except Exception as e:
            kind = classify(e)
            if kind is None:
                raise
            waited = time.monotonic() - start
            if kind == "permanent":
                raise failure(e, name, url=url) from e
            if waited > deadline_s:
                raise failure(e, name, waited_s=waited, url=url) from e
            pause = min(delay * (0.5 + random.random()), max(0.05, deadline_s - waited))
            logger.warning("database unavailable during %s (%s); retrying in %.1fs", name,
                           describe(e), pause)
            interrupted = True
            time.sleep(pause)
            delay = min(delay * 2, 5.0)


def retried(fn: F) -> F:
    """A storage method that runs the method of the same name one class up (``super()``, found
    when called, as a ``def`` that calls ``super().name(...)`` would) through
    ``self._retry``, with ``fn``'s signature: one line per retried call of Optuna's storage
    API, in the database storage and in the proxy's client alike."""
    name = fn.__name__

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        mro = type(self).__mro__
        owner = next(cls for cls in mro if vars(cls).get(name) is method)
        return self._retry(name, getattr(super(owner, self), name), *args, **kwargs)

    return cast(F, method)
