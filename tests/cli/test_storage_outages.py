"""Every command opens its storage through a short outage (issue 40): connections killed again
and again, a server that refuses connections while it restarts. The same faults as the
database-fault tests (tests/support/faultproxy.py), here in a command's first seconds: the
command waits (a line on stderr) and succeeds; a storage that stays away is exit code 75;
permanent errors still fail at once with one line and exit code 2."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.errors import StorageUnavailableError
from sweeper.spec import load_spec
from sweeper.study import create_or_resume, open_storage
from tests.support.chaos import REPO, SWEEPER, chaos_spec, check
from tests.support.faultproxy import FaultProxy
from tests.support.helpers import make_spec, stop_process
from tests.support.proxy import free_port

#: Statements that opening a storage runs: Optuna's schema check, sweeper's index DDL, the
#: probe of a storage that must exist (pg_class, through SQLAlchemy's inspector).
OPENING = r"alembic_version|ix_sweeper_index|pg_catalog\.pg_class"


@pytest.fixture
def faults(pg_url: str, pg_admin: sa.Engine) -> Iterator[FaultProxy]:
    with FaultProxy.for_url(pg_url, pg_admin) as proxy:
        yield proxy


@contextmanager
def storm(proxy: FaultProxy, seconds: float, *, every: float = 0.5,
          downtime: float = 0.3) -> Iterator[None]:
    """For ``seconds``: every connection of the database terminated and new ones refused as a
    starting server refuses them (57P03) for ``downtime``, again every ``every`` seconds; and
    the next statements of :data:`OPENING` hit by ``pg_terminate_backend``."""
    proxy.arm("terminate", OPENING, step="opening", count=3)
    done = threading.Event()

    def loop() -> None:
        end = time.monotonic() + seconds
        while not done.is_set() and time.monotonic() < end:
            proxy.restart(downtime)
            done.wait(every)

    thread = threading.Thread(target=loop, daemon=True, name="storm")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _env(url: str, tmp_path: Path) -> dict[str, str]:
    import os

    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    return dict(os.environ, SWEEPER_STORAGE=url, SWEEPER_TEST_MARKERS=str(markers),
                PYTHONPATH=str(REPO), SWEEPER_CHECKPOINT_DIR=str(tmp_path / "ckpt"))


def _spec(tmp_path: Path, name: str, indexes: int) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(chaos_spec(name, indexes, 3, 0.3, 3)))
    return path


def _sweeper(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([str(SWEEPER), *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        stop_process(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_run_starts_while_connections_are_killed(pg_url: str, faults: FaultProxy,
                                                tmp_path: Path) -> None:
    spec = _spec(tmp_path, "stormy-start", indexes=8)
    url = faults.url(pg_url)
    with storm(faults, seconds=6.0):
        done = _sweeper(["run", str(spec)], _env(url, tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "terminate" in faults.kinds_fired("opening")
    assert "database unavailable during opening postgresql://sweeper:***@" in done.stderr
    assert "sweeper-test-pw" not in done.stderr + done.stdout
    report = check(pg_url, "stormy-start", 8, tmp_path / "markers", 0, 0, 0.0)
    assert report.problems == []


def test_resume_starts_while_connections_are_killed(pg_url: str, faults: FaultProxy,
                                                   tmp_path: Path) -> None:
    spec = _spec(tmp_path, "stormy-resume", indexes=6)
    create_or_resume(open_storage(pg_url), load_spec(spec))  # planned, nothing ran
    with storm(faults, seconds=5.0):
        done = _sweeper(["resume", "stormy-resume"], _env(faults.url(pg_url), tmp_path),
                        tmp_path)
    assert done.returncode == 0, done.stderr
    assert "terminate" in faults.kinds_fired("opening")
    report = check(pg_url, "stormy-resume", 6, tmp_path / "markers", 0, 0, 0.0)
    assert report.problems == []


def test_status_waits_out_killed_connections(pg_url: str, faults: FaultProxy,
                                             tmp_path: Path) -> None:
    spec = _spec(tmp_path, "stormy-status", indexes=4)
    create_or_resume(open_storage(pg_url), load_spec(spec))
    with storm(faults, seconds=3.0):
        done = _sweeper(["status", "stormy-status", "--format", "json"],
                        _env(faults.url(pg_url), tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "terminate" in faults.kinds_fired("opening")
    assert '"WAITING": 4' in done.stdout


@pytest.mark.parametrize("command", [["list"], ["status", "{name}"], ["best", "{name}"],
                                     ["export", "{name}"], ["delete", "{name}", "--yes"]])
def test_every_command_waits_for_a_restarting_server(pg_url: str, faults: FaultProxy,
                                                     command: list[str]) -> None:
    """The server refuses connections as it starts up (57P03) for the command's first two
    seconds, then takes them."""
    name = "restarting"
    create_or_resume(open_storage(pg_url), make_spec(name=name))
    faults.restart(2.0)
    started = time.monotonic()
    result = CliRunner().invoke(cli, [c.format(name=name) for c in command]
                                + ["--storage", faults.url(pg_url)])
    assert result.exit_code in (0, 1), result.stderr  # best: 1 when no trial finished yet
    assert "cannot open storage" not in result.stderr
    assert time.monotonic() - started >= 1.5


def test_a_database_that_stays_away_is_exit_code_75(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    result = CliRunner().invoke(cli, ["--storage-wait", "1.5", "list", "--storage",
                                      f"postgresql://u:pw-1234@127.0.0.1:{port}/db"])
    assert result.exit_code == StorageUnavailableError.exit_code == 75, result.output
    assert 1.5 <= time.monotonic() - started < 10
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: database unavailable for "), lines
    assert f"during opening postgresql://u:***@127.0.0.1:{port}/db: " in lines[-1]
    assert "Connection refused" in lines[-1]
    waits = [r.getMessage() for r in caplog.records if r.name == "sweeper.study.retry"]
    assert waits and all("database unavailable during opening" in w for w in waits)
    assert "pw-1234" not in result.output + caplog.text


def test_a_storage_proxy_that_stays_away_is_exit_code_75(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setenv("SWEEPER_STORAGE_WAIT", "1")
    result = CliRunner().invoke(cli, ["list", "--storage", f"grpc://127.0.0.1:{free_port()}"])
    assert result.exit_code == 75, result.output
    assert "cannot reach the storage proxy" in result.stderr


def _unknown_schema(pg_url: str) -> str:
    open_storage(pg_url).engine.dispose()
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://"))
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'v99.0.0.a'"))
    engine.dispose()
    return pg_url


@pytest.mark.parametrize(("case", "expected"), [
    ("password", "password authentication failed"),
    ("database", 'database "no_such_db_40" does not exist'),
    ("host", "could not translate host name"),
    ("schema", "no longer compatible with the table schema"),
])
def test_permanent_errors_fail_at_once_with_one_line(pg_url: str, case: str,
                                                     expected: str) -> None:
    base, _, db = pg_url.rpartition("/")
    url = {"password": base.replace(":sweeper-test-pw@", ":wrong-pw@") + f"/{db}",
           "database": f"{base}/no_such_db_40",
           "host": f"postgresql://u:pw@no-such-host-40.invalid/{db}",
           "schema": _unknown_schema(pg_url) if case == "schema" else ""}[case]
    for command in (["list"], ["status", "x"], ["run", "never-read.yaml"]):
        if command[0] == "run" and case != "schema":
            continue
        started = time.monotonic()
        result = CliRunner().invoke(cli, [*command, "--storage", url]) if command[0] != "run" \
            else _run_unknown_schema(url)
        assert result.exit_code == 2, (command, result.output)
        assert time.monotonic() - started < 10, command
        assert result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
        assert "WARNING" not in result.stderr and "Traceback" not in result.stderr
        assert "sweeper-test-pw" not in result.stderr and "wrong-pw" not in result.stderr


def _run_unknown_schema(url: str) -> object:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        spec = Path(d, "s.yaml")
        spec.write_text(yaml.safe_dump(chaos_spec("schema-40", 2, 1, 0.1, 0)))
        return CliRunner().invoke(cli, ["run", str(spec), "--storage", url])
