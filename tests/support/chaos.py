"""Chaos harness: a real sweep (PostgreSQL, local backend) under faults; then check that
nothing was lost or run twice.

    python -m tests.support.chaos [--mode kill] [--indexes 200] [--parallelism 8] [--kills 40]
    python -m tests.support.chaos --mode database [--indexes 200] [--rate 0.03]

``kill``: runner processes are SIGKILLed at random. ``database``: every database connection
of the sweep (orchestrator and runners) goes through tests/support/faultproxy.py, which hits
random protocol statements with random faults (connection cut before the statement or after
its COMMIT landed, a stall, ``pg_terminate_backend``, a simulated server restart) for the whole
run; the report counts faults injected, attempts wasted, duplicates and lost values.

`make chaos` runs the big versions; tests/test_faults.py runs small ones in `make test`.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy as sa
import yaml
from optuna.trial import TrialState

from sweeper.backends.local.forked import WORKER_NAME
from tests.support.helpers import drop_database

REPO = Path(__file__).resolve().parents[2]
SWEEPER = Path(sys.executable).parent / "sweeper"


def chaos_spec(name: str, indexes: int, parallelism: int, duration: float, retries: int) -> dict:
    return {
        "name": name, "method": "random", "trials": indexes, "parallelism": parallelism,
        "seed": 3, "objective": {"metric": "loss", "direction": "minimize"},
        "trial": {"entrypoint": "tests.support.fault_objectives:steady", "retries": retries,
                  "fixed": {"duration": duration, "steps": 10}},
        "parameters": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
    }


def runner_pids(study: str) -> list[int]:
    """Worker processes of this sweep, found through /proc: an exec'd worker by its command
    line and environment, a forked one by its name and the log its stdout goes to (the local
    backend logs under LOG_DIR/STUDY-UID8/, the sweep's state key)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if _is_worker_of(entry, study):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _is_worker_of(proc: Path, study: str) -> bool:
    if (proc / "comm").read_bytes().strip() == WORKER_NAME:
        if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False  # exited, not yet reaped
        logs = Path(os.readlink(proc / "fd" / "1")).parent.name
        return logs == study or (logs.startswith(f"{study}-") and len(logs) == len(study) + 9)
    if b"trial_runner" not in (proc / "cmdline").read_bytes():
        return False
    return f"SWEEPER_STUDY={study}".encode() in (proc / "environ").read_bytes().split(b"\0")


@dataclass
class ChaosReport:
    indexes: int
    kills: int
    exit_code: int
    wall_s: float
    problems: list[str]
    killed_attempts: int
    trials: int

    def summary(self) -> str:
        verdict = "OK" if not self.problems else "FAILED"
        lines = [f"chaos {verdict}: {self.indexes} indexes, {self.kills} runner kills, "
                 f"{self.trials} trials ({self.killed_attempts} failed attempts, each retried), "
                 f"sweep exit {self.exit_code}, {self.wall_s:.1f}s",
                 "checked: every index has exactly one COMPLETE/PRUNED trial; no trial left "
                 "RUNNING; every FAIL attempt has a retry linked to it (sweeper:retry_of); "
                 "no trial executed twice (O_EXCL markers)"]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def _env(pg_url: str, workdir: Path, markers: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, SWEEPER_STORAGE=pg_url, SWEEPER_TEST_MARKERS=str(markers),
                PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                SWEEPER_CHECKPOINT_DIR=str(workdir / "ckpt"), **extra)


def run_chaos(pg_url: str, *, indexes: int = 40, parallelism: int = 6, kills: int = 8,
              interval: float = 1.5, duration: float = 1.5, seed: int = 0,
              workdir: Path | None = None, sweep_storage: str | None = None) -> ChaosReport:
    """``sweep_storage``: the URL the sweep runs on (a storage proxy's grpc://...) when it is
    not ``pg_url`` itself; the check always reads the database directly."""
    rng = random.Random(seed)
    workdir = workdir or Path(tempfile.mkdtemp(prefix="sweeper-chaos-"))
    markers = workdir / "markers"
    markers.mkdir(parents=True, exist_ok=True)
    name = f"chaos-{uuid.uuid4().hex[:8]}"
    spec_path = workdir / "chaos.yaml"
    spec_path.write_text(yaml.safe_dump(chaos_spec(name, indexes, parallelism, duration,
                                                   retries=kills + 2)))
    env = _env(pg_url, workdir, markers)
    if sweep_storage is not None:
        env["SWEEPER_STORAGE"] = sweep_storage
    start = time.monotonic()
    with open(workdir / "run.err", "w") as err:
        proc = subprocess.Popen([str(SWEEPER), "run", str(spec_path), "--log-dir",
                                 str(workdir / "logs")], cwd=workdir, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    done_kills = 0
    try:
        while proc.poll() is None and done_kills < kills:
            time.sleep(interval * (0.5 + rng.random()))
            pids = runner_pids(name)
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
                done_kills += 1
        code = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    wall = time.monotonic() - start
    return check(pg_url, name, indexes, markers, done_kills, code, wall)


#: The protocol's statements (psycopg2 inlines parameters, so the text names the step): what
#: the database chaos run hits at random.
PROTOCOL_STATEMENTS = {
    "create sweep": r"^INSERT INTO studies",
    "bulk enqueue": r"'sweeper:enqueued'",
    "claim": r"UPDATE trials SET state = 'RUNNING'",
    "new attempt": r"INSERT INTO trials \(",
    "suggest": r"INSERT INTO trial_params",
    "report": r"INSERT INTO trial_intermediate_values",
    "metrics": r"INSERT INTO trial_user_attributes",
    "heartbeat": r"^UPDATE trial_heartbeats",
    "tell": r"UPDATE trials SET state='COMPLETE'",
    "mark failed": r"^UPDATE trials SET state = 'FAIL'",
    "find index": r"FROM trial_user_attributes ua",
    "watch": r"^SELECT t\.trial_id, t\.number, hb\.heartbeat",
}


@dataclass
class DatabaseChaosReport:
    """What a database chaos run did and found."""

    indexes: int
    faults: Counter[str]
    by_step: Counter[str]
    wasted: int
    duplicates: int
    lost: int
    base: ChaosReport

    def summary(self) -> str:
        ok = not self.base.problems and self.duplicates == 0 and self.lost == 0
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))
        steps = ", ".join(f"{k} {n}" for k, n in sorted(self.by_step.items()))
        lines = [f"database chaos {'OK' if ok else 'FAILED'}: {self.indexes} indexes, "
                 f"{self.base.trials} trials, sweep exit {self.base.exit_code}, "
                 f"{self.base.wall_s:.1f}s",
                 f"faults injected: {sum(self.faults.values())} ({kinds})",
                 f"  by protocol step: {steps}",
                 f"attempts wasted: {self.wasted}",
                 f"duplicates: {self.duplicates}",
                 f"lost values: {self.lost}"]
        lines += [f"  problem: {p}" for p in self.base.problems]
        return "\n".join(lines)


def run_database_chaos(pg_url: str, admin: sa.Engine, *, indexes: int = 40,
                       parallelism: int = 6, rate: float = 0.03, duration: float = 0.6,
                       seed: int = 0, workdir: Path | None = None) -> DatabaseChaosReport:
    """A sweep whose every database connection meets random faults for the whole run."""
    from tests.support.faultproxy import FaultProxy, random_policy

    workdir = workdir or Path(tempfile.mkdtemp(prefix="sweeper-dbchaos-"))
    markers = workdir / "markers"
    markers.mkdir(parents=True, exist_ok=True)
    name = f"dbchaos-{uuid.uuid4().hex[:8]}"
    spec_path = workdir / "chaos.yaml"
    spec_path.write_text(yaml.safe_dump(chaos_spec(name, indexes, parallelism, duration,
                                                   retries=3)))
    with FaultProxy.for_url(pg_url, admin) as proxy:
        proxy.policy = random_policy(PROTOCOL_STATEMENTS, rate=rate, seed=seed, delay=0.5)
        # Reports written behind every 0.1 s: the timer's writes meet the faults too, not only
        # the finishes that take the last reports with them.
        env = _env(proxy.url(pg_url), workdir, markers, SWEEPER_HEARTBEAT_INTERVAL="0.3",
                   SWEEPER_REPORT_DELAY="0.1")
        start = time.monotonic()
        with open(workdir / "run.err", "w") as err:
            code = subprocess.run([str(SWEEPER), "run", str(spec_path), "--log-dir",
                                   str(workdir / "logs")], cwd=workdir, env=env,
                                  stdout=subprocess.DEVNULL, stderr=err, timeout=1800
                                  ).returncode
        wall = time.monotonic() - start
        proxy.policy = None
        injected = list(proxy.injected)
    base = check(pg_url, name, indexes, markers, 0, code, wall)
    wasted, duplicates, lost = _tally(pg_url, name, markers)
    return DatabaseChaosReport(indexes, Counter(i.kind for i in injected),
                               Counter(i.step for i in injected), wasted, duplicates, lost,
                               base)


def _tally(pg_url: str, name: str, markers: Path) -> tuple[int, int, int]:
    """(attempts wasted, duplicates, lost values). The chaos objective never fails, so every
    FAIL trial is an attempt a fault cost; a duplicate is a second finished trial of an index
    or a trial executed twice; a lost value is a finished trial whose value, parameters or
    intermediate values are not what its objective produced."""
    from sweeper.study import open_storage

    trials = optuna.load_study(study_name=name, storage=open_storage(pg_url)).get_trials()
    finished = Counter(t.user_attrs["sweeper:index"] for t in trials
                       if t.state == TrialState.COMPLETE)
    executed = Counter(p.name for p in markers.iterdir())
    duplicates = sum(n - 1 for n in finished.values() if n > 1) + \
        sum(n - 1 for n in executed.values() if n > 1)
    wasted = sum(1 for t in trials if t.state == TrialState.FAIL)
    lost = 0
    for t in trials:
        if t.state != TrialState.COMPLETE:
            continue
        x = t.params.get("x")
        start = int(t.user_attrs.get("start_step", 0))
        expected = {s: x * x + (10 - s) for s in range(start, 10)} if x is not None else None
        if x is None or t.value != x * x or t.intermediate_values != expected:
            lost += 1
    return wasted, duplicates, lost


def check(pg_url: str, name: str, indexes: int, markers: Path, kills: int, code: int,
          wall: float) -> ChaosReport:
    from sweeper.study import open_storage

    study = optuna.load_study(study_name=name, storage=open_storage(pg_url))
    trials = study.get_trials()
    problems = []
    finished = Counter(t.user_attrs["sweeper:index"] for t in trials
                       if t.state in (TrialState.COMPLETE, TrialState.PRUNED))
    for i in range(indexes):
        if finished[i] != 1:
            problems.append(f"index {i} has {finished[i]} finished trials")
    running = [t.number for t in trials if t.state == TrialState.RUNNING]
    if running:
        problems.append(f"trials left RUNNING: {running}")
    retried = {t.user_attrs.get("sweeper:retry_of") for t in trials}
    failed = [t for t in trials if t.state == TrialState.FAIL]
    for t in failed:
        if t.number not in retried:
            problems.append(f"FAIL trial #{t.number} has no retry linked to it")
    executed = Counter(p.name for p in markers.iterdir())
    twice = [k for k, v in executed.items() if v > 1]
    if twice:
        problems.append(f"executed twice: {twice}")
    if code != 0:
        problems.append(f"sweeper run exited {code}")
    return ChaosReport(indexes, kills, code, wall, problems, len(failed), len(trials))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["kill", "database"], default="kill")
    parser.add_argument("--rate", type=float, default=0.03,
                        help="database mode: chance that a protocol statement meets a fault")
    parser.add_argument("--indexes", type=int, default=200)
    parser.add_argument("--parallelism", type=int, default=8)
    parser.add_argument("--kills", type=int, default=40)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=1.5)
    parser.add_argument("--admin-url", default=os.environ.get(
        "SWEEPER_TEST_PG", "postgresql://sweeper:sweeper-test-pw@127.0.0.1:5432/postgres"))
    args = parser.parse_args()
    db = f"sweeper_chaos_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.admin_url.replace("postgresql://", "postgresql+psycopg2://"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{db}"'))
    url = f"{args.admin_url.rsplit('/', 1)[0]}/{db}"
    try:
        report: ChaosReport | DatabaseChaosReport
        if args.mode == "database":
            report = run_database_chaos(url, admin, indexes=args.indexes,
                                        parallelism=args.parallelism, rate=args.rate,
                                        duration=args.duration)
            failed = bool(report.base.problems or report.duplicates or report.lost)
        else:
            report = run_chaos(url, indexes=args.indexes, parallelism=args.parallelism,
                               kills=args.kills, interval=args.interval,
                               duration=args.duration)
            failed = bool(report.problems)
    finally:
        drop_database(admin, db)
    print(report.summary())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
