"""Chaos harness: a real sweep (PostgreSQL, local backend) while runner processes are
SIGKILLed at random; then check that nothing was lost or run twice.

    python -m tests.support.chaos [--indexes 200] [--parallelism 8] [--kills 40] [--duration 1.5]

`make chaos` runs the big version; tests/test_faults.py runs a small one in `make test`.
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
    """Worker processes of this sweep (found through /proc: cmdline + environment)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            if b"trial_runner" not in cmd:
                continue
            if f"SWEEPER_STUDY={study}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


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
    env = dict(os.environ, SWEEPER_STORAGE=sweep_storage or pg_url,
               SWEEPER_TEST_MARKERS=str(markers),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               SWEEPER_CHECKPOINT_DIR=str(workdir / "ckpt"))
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
    try:
        report = run_chaos(f"{args.admin_url.rsplit('/', 1)[0]}/{db}", indexes=args.indexes,
                           parallelism=args.parallelism, kills=args.kills,
                           interval=args.interval, duration=args.duration)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
    print(report.summary())
    return 0 if not report.problems else 1


if __name__ == "__main__":
    sys.exit(main())
