"""Shared pieces: a fresh PostgreSQL database per measurement, plain-Optuna worker processes,
the connection sampler, machine/version facts and small statistics helpers."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")
DEFAULT_ADMIN_URL = "postgresql://sweeper:sweeper-test-pw@127.0.0.1:5432/postgres"


def admin_url() -> str:
    """The PostgreSQL admin URL (a role with CREATEDB): ``SWEEPER_BENCH_PG``, then the test
    suite's ``SWEEPER_TEST_PG``, then the local test server that ``make postgres`` sets up."""
    return os.environ.get("SWEEPER_BENCH_PG") or os.environ.get("SWEEPER_TEST_PG") \
        or DEFAULT_ADMIN_URL


def _psycopg2(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg2://", 1)


def admin_engine() -> sa.Engine:
    return sa.create_engine(_psycopg2(admin_url()), isolation_level="AUTOCOMMIT",
                            pool_pre_ping=True, connect_args={"connect_timeout": 5})


def wait_for_server(timeout_s: float = 120.0) -> None:
    """Block until PostgreSQL accepts connections again (other people's fault-injection tests
    restart the shared server now and then)."""
    deadline = time.monotonic() + timeout_s
    engine = admin_engine()
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.execute(sa.text("SELECT 1"))
                return
            except sa.exc.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
    finally:
        engine.dispose()


def _admin(sql: str) -> None:
    for attempt in range(3):
        engine = admin_engine()
        try:
            with engine.connect() as conn:
                conn.execute(sa.text(sql))
            return
        except (sa.exc.OperationalError, sa.exc.InterfaceError):
            if attempt == 2:
                raise
            wait_for_server()
        finally:
            engine.dispose()


@contextmanager
def fresh_database(tag: str) -> Iterator[tuple[str, str]]:
    """A new empty database for one measurement, dropped afterwards (even on error).
    Yields (database name, URL in the plain ``postgresql://`` form users write)."""
    name = f"sweeper_bench_{tag}_{uuid.uuid4().hex[:8]}"
    _admin(f'CREATE DATABASE "{name}"')
    try:
        base = admin_url().rsplit("/", 1)[0]
        yield name, f"{base}/{name}"
    finally:
        for _ in range(100):  # an autovacuum worker on it is the server's: we wait for it
            try:
                _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except sa.exc.ProgrammingError as e:
                if "pg_signal_backend" not in str(e):
                    raise
                time.sleep(0.1)


def optuna_storage(url: str) -> Any:
    """Plain Optuna's RDBStorage on ``url`` with Optuna's own defaults (what a user writes)."""
    from optuna.storages import RDBStorage

    return RDBStorage(_psycopg2(url))


# --------------------------------------------------------------------------- plain workers


def plain_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def launch_plain(job: Mapping[str, Any], log: Path) -> subprocess.Popen[bytes]:
    """Start one plain-Optuna worker process (``benchmarks.plain``) for ``job``."""
    out = open(log, "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        env = dict(plain_env(), SWEEPER_BENCH_JOB=json.dumps(job))  # not argv: it has a password
        return subprocess.Popen([sys.executable, "-m", "benchmarks.plain"],
                                cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out)
    finally:
        out.close()


def wait_all(procs: Sequence[subprocess.Popen[bytes]], what: str, log: Path,
             timeout_s: float = 1800.0) -> None:
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{what}: workers did not finish in {timeout_s:.0f}s") from None
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise Disturbed(f"{what}: {len(bad)} worker(s) failed (exit {bad[0]}):\n{tail}")


# --------------------------------------------------------------------------- connections


_SAMPLER = """
import json, os, select, sys
import sqlalchemy as sa
engine = sa.create_engine(os.environ["SAMPLER_URL"], isolation_level="AUTOCOMMIT")
query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :d")
samples = []
with engine.connect() as conn:
    print("ready", flush=True)
    while not select.select([sys.stdin], [], [], float(sys.argv[2]))[0]:
        samples.append(int(conn.execute(query, {"d": sys.argv[1]}).scalar_one()))
    samples.append(int(conn.execute(query, {"d": sys.argv[1]}).scalar_one()))
print(json.dumps(samples), flush=True)
"""


class ConnectionSampler:
    """Counts the backends connected to one database every ``interval_s`` from a separate
    connection to the admin database (so the sampler never counts itself), in a separate
    process: a thread here would make ``sweeper run``'s local backend exec its workers
    instead of forking them (it forks only from a process with one thread)."""

    def __init__(self, database: str, interval_s: float = 0.05) -> None:
        self.database = database
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ConnectionSampler:
        env = dict(os.environ, SAMPLER_URL=_psycopg2(admin_url()))  # not argv: a password
        self._proc = subprocess.Popen([sys.executable, "-c", _SAMPLER, self.database,
                                       str(self.interval_s)], env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            raise Disturbed("the connection sampler did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("stop\n", timeout=30)
        self.samples = json.loads(out.strip().splitlines()[-1])

    @property
    def peak(self) -> int:
        return max(self.samples, default=0)


# --------------------------------------------------------------------------- statistics


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sample."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary_ms(xs_s: Sequence[float]) -> dict[str, float]:
    """p50/p95/mean/min/max in milliseconds of durations given in seconds."""
    ms = [x * 1000.0 for x in xs_s]
    return {"p50": percentile(ms, 50), "p95": percentile(ms, 95),
            "mean": statistics.fmean(ms) if ms else float("nan"),
            "min": min(ms, default=float("nan")), "max": max(ms, default=float("nan")),
            "n": len(ms)}


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# --------------------------------------------------------------------------- facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"nproc": os.cpu_count(), "cpu_model": _cpu_model(), "memory_gib": _memory_gib(),
            "platform": platform.platform(), "load_average_at_start": load}


def versions() -> dict[str, str]:
    import optuna
    import psycopg2

    import sweeper

    out = {"python": platform.python_version(), "sweeper": sweeper.__version__,
           "optuna": optuna.__version__, "sqlalchemy": sa.__version__,
           "psycopg2": psycopg2.__version__.split()[0]}
    try:
        engine = admin_engine()
        with engine.connect() as conn:
            out["postgresql"] = str(conn.execute(sa.text("SHOW server_version")).scalar_one())
            out["postgresql_max_connections"] = str(
                conn.execute(sa.text("SHOW max_connections")).scalar_one())
        engine.dispose()
    except sa.exc.SQLAlchemyError as e:
        out["postgresql"] = f"unreachable ({type(e).__name__})"
    return out


@dataclass
class Row:
    """One line of the result table: what was measured, against which target, and verdict."""

    item: str
    measured: str
    target: str
    status: str  # PASS, MISS or INFO (no target)
    figures: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"item": self.item, "measured": self.measured, "target": self.target,
                "status": self.status, "figures": self.figures}


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


#: Runs repeated because something outside the benchmark disturbed them (a worker killed by
#: another process on a shared machine, ...): what happened, for the JSON.
DISTURBED: list[str] = []


def _disturbance(e: BaseException) -> bool:
    """A run that ended because of the machine, not the code under test: a worker killed from
    outside, or the shared PostgreSQL server restarting under it."""
    from sweeper.errors import StorageError

    seen: BaseException | None = e
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, (Disturbed, StorageError, sa.exc.OperationalError,
                             sa.exc.InterfaceError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def undisturbed(fn: Callable[[], T], what: str, log: Callable[[str], None],
                tries: int = 3) -> T:
    """``fn()``, repeated (up to ``tries`` times) when the run was disturbed from outside: a
    measurement is only kept from a run that completed exactly as designed, and every repeat is
    recorded in the results."""
    for attempt in range(1, tries + 1):
        started = server_started_at()
        try:
            result = fn()
        except Exception as e:
            if not _disturbance(e) or attempt == tries:
                raise
            why = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        else:
            if server_started_at() == started:
                return result
            why = "the PostgreSQL server restarted during the run"
            if attempt == tries:
                raise Disturbed(why)
        DISTURBED.append(f"{what}: {why}")
        log(f"  {what}: run disturbed ({why}); repeating it")
        wait_for_server()
    raise AssertionError("unreachable")


def server_started_at() -> str:
    wait_for_server()
    engine = admin_engine()
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SELECT pg_postmaster_start_time()")).scalar_one())
    finally:
        engine.dispose()


class Disturbed(RuntimeError):
    """A benchmark run did not complete as designed (e.g. a worker was killed from outside)."""
