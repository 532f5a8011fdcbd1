"""Transient vs permanent, decided by the error: real errors from a real PostgreSQL server and
real SQLite files, classified and retried (or not) by sweeper.study.retry; and the read-only
database that must fail at once with one line instead of retrying for five minutes."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import yaml

from sweeper.errors import StorageError, StorageUnavailableError
from sweeper.study import open_storage
from sweeper.study.retry import NOT_DONE, StorageFailure, classify, failure, with_retry

SWEEPER = Path(sys.executable).parent / "sweeper"


@pytest.fixture
def pg(pg_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://", 1),
                              pool_pre_ping=True)
    yield engine
    engine.dispose()


def _raised(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test inspects whatever the database raised
        return e
    raise AssertionError("no error")


def _server_error(engine: sa.Engine, sqlstate: str) -> BaseException:
    """A real error from the server carrying ``sqlstate`` (PL/pgSQL RAISE ... USING ERRCODE)."""
    def run() -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DO $$ BEGIN RAISE EXCEPTION 'injected {sqlstate}' "
                                 f"USING ERRCODE = '{sqlstate}'; END $$")

    return _raised(run)


@pytest.mark.parametrize(("sqlstate", "kind"), [
    ("40001", "transient"),  # serialization failure
    ("40P01", "transient"),  # deadlock
    ("57P01", "transient"),  # admin shutdown (restart, pg_terminate_backend)
    ("57P02", "transient"),  # crash shutdown
    ("57P03", "transient"),  # cannot connect now (starting up)
    ("08006", "transient"),  # connection failure
    ("53300", "transient"),  # too many connections
    ("57014", "permanent"),  # statement timeout / query cancelled
    ("53100", "permanent"),  # disk full
    ("28P01", "permanent"),  # invalid password
    ("42P01", "permanent"),  # undefined table
    ("25006", "permanent"),  # read-only transaction
])
def test_postgresql_errors_are_classified_by_sqlstate(pg: sa.Engine, sqlstate: str,
                                                      kind: str) -> None:
    e = _server_error(pg, sqlstate)
    assert isinstance(e, sa.exc.DBAPIError) and e.orig.pgcode == sqlstate  # type: ignore[union-attr]
    assert classify(e) == kind
    # the same through Optuna's wrapper (RDBStorage raises StorageInternalError from e)
    wrapped = _raised(lambda: _reraise_as_optuna(e))
    assert classify(wrapped) == kind


def _reraise_as_optuna(e: BaseException) -> None:
    raise optuna.exceptions.StorageInternalError("commit failed") from e


def test_a_terminated_connection_is_transient_and_the_retry_reconnects(
        pg: sa.Engine, pg_admin: sa.Engine) -> None:
    pids: list[int] = []
    terminate = [True, False, True, False]  # per call: is this connection terminated under it?

    def query() -> int:
        with pg.connect() as conn:
            pid = int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())
            pids.append(pid)
            if terminate[len(pids) - 1]:
                with pg_admin.connect() as admin:
                    admin.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                conn.execute(sa.text("SELECT 1"))  # the server has closed this connection
            return pid

    assert classify(_raised(query)) == "transient"
    assert with_retry(query, what="test") == pids[-1]  # not terminated: no retry needed
    assert with_retry(query, what="test") == pids[-1]  # terminated, retried
    assert len(pids) == 4 and pids[3] != pids[2]  # the retry ran on a new connection


def test_a_statement_timeout_fails_at_once(pg: sa.Engine) -> None:
    calls = []

    def slow() -> None:
        calls.append(1)
        with pg.connect() as conn:
            conn.exec_driver_sql("SET statement_timeout = '20ms'")
            conn.exec_driver_sql("SELECT pg_sleep(2)")

    with pytest.raises(StorageFailure) as e:
        with_retry(slow, what="slow query")
    assert calls == [1]
    assert str(e.value).startswith("database error during slow query: canceling statement "
                                   "due to statement timeout (SQLSTATE 57014)")


def test_connection_refused_is_transient_a_refused_login_permanent(pg_url: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = sa.create_engine(f"postgresql+psycopg2://u:pw@127.0.0.1:{port}/db")
    assert classify(_raised(refused.connect)) == "transient"
    user, rest = pg_url.split("://", 1)[1].split(":", 1)
    wrong = sa.create_engine(f"postgresql+psycopg2://{user}:wrong-pw@{rest.split('@', 1)[1]}")
    e = _raised(wrong.connect)
    assert classify(e) == "permanent", e
    nodb = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://", 1)
                            + "_missing")
    assert classify(_raised(nodb.connect)) == "permanent"
    nohost = sa.create_engine("postgresql+psycopg2://u:pw@no-such-host-40.invalid/db")
    assert classify(_raised(nohost.connect)) == "permanent"  # EAI_NONAME: no such host


@pytest.mark.parametrize(("message", "kind"), [
    ('could not translate host name "db" to address: Temporary failure in name resolution',
     "transient"),  # EAI_AGAIN: the DNS server may answer again
    ('could not translate host name "db" to address: Name or service not known', "permanent"),
    ('FATAL:  permission denied for database "sweeps"', "permanent"),
    ("SSL connection has been closed unexpectedly", "transient"),
    ("server closed the connection unexpectedly", "transient"),
])
def test_connection_failures_are_classified_by_libpq_message(message: str, kind: str) -> None:
    import psycopg2

    assert classify(sa.exc.OperationalError("connect", {}, psycopg2.OperationalError(message))) \
        == kind


def test_sqlite_locked_is_transient_readonly_and_missing_table_permanent(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0})
    try:
        def write() -> None:
            with engine.begin() as conn:
                conn.exec_driver_sql("INSERT INTO t VALUES (2)")

        assert classify(_raised(write)) == "transient"
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    def missing() -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT * FROM nope")

    assert classify(_raised(missing)) == "permanent"
    readonly = sa.create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")

    def write_ro() -> None:
        with readonly.begin() as conn:
            conn.exec_driver_sql("INSERT INTO t VALUES (3)")

    e = _raised(write_ro)
    assert "readonly" in str(e) and classify(e) == "permanent"
    engine.dispose()
    readonly.dispose()


def test_errors_that_are_not_database_errors_pass_through() -> None:
    assert classify(KeyError(3)) is None
    assert classify(optuna.exceptions.UpdateFinishedTrialError("done")) is None
    with pytest.raises(KeyError):
        with_retry(lambda: {}[1])


def test_landed_is_asked_before_each_retry(pg: sa.Engine) -> None:
    """A write interrupted by a transient error is not run again when ``landed`` finds it."""
    calls: list[str] = []

    def write() -> str:
        calls.append("write")
        raise _server_error(pg, "40001")

    def landed() -> object:
        calls.append("landed")
        return "found" if len(calls) >= 4 else NOT_DONE

    assert with_retry(write, what="w", landed=landed) == "found"
    assert calls == ["write", "landed", "write", "landed"]


def test_past_the_deadline_a_transient_error_fails_with_one_line_and_no_password(
        pg: sa.Engine) -> None:
    url = "postgresql://me:s3cret-pw@db.example:5432/sweeps"

    def down() -> None:
        raise _server_error(pg, "57P03")

    with pytest.raises(StorageFailure) as e:
        with_retry(down, what="claim", deadline_s=0.0, url=url)
    text = str(e.value)
    assert text.startswith("database unavailable for 0s during claim: injected 57P03")
    assert "\n" not in text
    assert isinstance(e.value, StorageError)
    assert isinstance(e.value, optuna.exceptions.StorageInternalError)
    assert isinstance(e.value, StorageUnavailableError) and e.value.exit_code == 75
    def denied() -> None:
        raise _server_error(pg, "42501")  # insufficient_privilege

    with pytest.raises(StorageFailure) as permanent:
        with_retry(denied, what="claim", url=url)
    assert not isinstance(permanent.value, StorageUnavailableError)
    assert permanent.value.exit_code == 2
    leaked = failure(RuntimeError(f"cannot reach {url} (password s3cret-pw)"), "connect",
                     url=url)
    assert "s3cret-pw" not in str(leaked) and "me:***@db.example" in str(leaked)


@pytest.fixture
def readonly_sqlite(tmp_path: Path) -> Iterator[Path]:
    """A sweeps.db nobody may write: chmod for users, the immutable flag for root (whom file
    modes do not stop)."""
    path = tmp_path / "sweeps.db"
    open_storage(f"sqlite:///{path}").engine.dispose()
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
    else:
        path.chmod(0o444)
    yield path
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    path.chmod(0o644)


def test_sweeper_run_on_a_readonly_sqlite_file_fails_at_once_with_one_line(
        readonly_sqlite: Path, tmp_path: Path) -> None:
    spec = tmp_path / "ro.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "ro", "method": "grid", "objective": {"metric": "loss", "direction": "minimize"},
        "trial": {"entrypoint": "tests.support.fault_objectives:steady"},
        "parameters": {"x": {"type": "float", "values": [0.1, 0.2]}}}))
    # A hang (the old five-minute retry) fails this test at the timeout.
    run = subprocess.run([str(SWEEPER), "run", str(spec), "--storage",
                          f"sqlite:///{readonly_sqlite}"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines == ["error: database error during create_new_study: attempt to write a "
                     "readonly database"], run.stderr
    assert "retrying" not in run.stderr
