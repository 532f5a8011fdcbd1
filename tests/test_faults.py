"""Faults that must lose nothing (issue: exactly once under faults). Real PostgreSQL, the real
CLI and runner processes; each test would fail if its guarantee broke."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import yaml
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.study import open_storage
from tests.support.chaos import (
    REPO,
    SWEEPER,
    chaos_spec,
    check,
    run_chaos,
    run_database_chaos,
    runner_pids,
)

pytestmark = pytest.mark.slow


def _env(pg_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    return dict(os.environ, SWEEPER_STORAGE=pg_url, SWEEPER_TEST_MARKERS=str(markers),
                PYTHONPATH=str(REPO), SWEEPER_CHECKPOINT_DIR=str(tmp_path / "ckpt"), **extra)


def _spec(tmp_path: Path, name: str, indexes: int, parallelism: int, duration: float,
          retries: int = 3) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(chaos_spec(name, indexes, parallelism, duration, retries)))
    return path


def _sweep(spec: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    # SIGINT as a terminal delivers it, even where the suite runs as a background job (whose
    # children a non-interactive shell starts with SIGINT ignored).
    return subprocess.Popen([str(SWEEPER), "run", str(spec)], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_running(pg_url: str, name: str, n: int = 1, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            study = optuna.load_study(study_name=name, storage=open_storage(pg_url))
            if len(study.get_trials(states=(TrialState.RUNNING,))) >= n:
                return
        except KeyError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"no running trial of {name} after {timeout}s")


def test_killed_runners_lose_nothing_and_run_nothing_twice(pg_url: str, tmp_path: Path) -> None:
    report = run_chaos(pg_url, indexes=40, parallelism=6, kills=8, interval=1.5,
                       duration=1.5, workdir=tmp_path)
    print(report.summary())
    assert report.kills >= 8
    assert report.problems == []
    assert report.killed_attempts >= 1


def test_database_faults_at_random_lose_nothing(pg_url: str, pg_admin: sa.Engine,
                                               tmp_path: Path) -> None:
    """The small version of `make chaos CHAOS_MODE=database`: every connection of the sweep
    (orchestrator and workers) goes through the fault proxy, which hits random protocol
    statements with random faults; the sweep loses nothing, runs nothing twice, and no fault
    costs an attempt."""
    report = run_database_chaos(pg_url, pg_admin, indexes=16, parallelism=4, rate=0.06,
                                duration=0.5, seed=1, workdir=tmp_path)
    print(report.summary())
    assert sum(report.faults.values()) >= 5
    assert len(report.faults) >= 3  # several kinds, not one
    assert report.base.problems == []
    assert (report.duplicates, report.lost, report.wasted) == (0, 0, 0)


def test_retry_resumes_the_builtin_example_from_its_checkpoint(pg_url: str,
                                                              tmp_path: Path) -> None:
    spec = tmp_path / "digits.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "ckpt", "method": "grid", "objective": {"metric": "val_accuracy",
                                                         "direction": "maximize"},
        "trial": {"entrypoint": "trial_runner.examples.digits:train",
                  "fixed": {"epochs": 400}},
        "parameters": {"lr": {"type": "float", "values": [0.01]}}}))
    env = _env(pg_url, tmp_path, JOB_ID="0")
    from sweeper.spec import load_spec
    from sweeper.study import create_or_resume

    sweep, _ = create_or_resume(open_storage(pg_url), load_spec(spec))
    runner = [sys.executable, "-m", "trial_runner", "--study", "ckpt"]
    proc = subprocess.Popen(runner, env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
    marker = tmp_path / "ckpt" / sweep.state_key / "index-0" / "checkpoint.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if marker.exists() and json.loads(marker.read_text())["step"] >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = json.loads(marker.read_text())["step"]
    # the killed attempt is RUNNING with a stale heartbeat: the retry fails it, then resumes
    retry = subprocess.run(runner, env=dict(env, SWEEPER_GRACE_PERIOD="1",
                                            SWEEPER_HEARTBEAT_INTERVAL="0.2"),
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert retry.returncode == 0, retry.stderr
    trials = optuna.load_study(study_name="ckpt", storage=open_storage(pg_url)).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[1].user_attrs["start_epoch"] == saved + 1
    assert trials[1].user_attrs["sweeper:resumed_from_step"] == saved
    assert trials[1].user_attrs["sweeper:retry_of"] == trials[0].number
    assert min(trials[1].intermediate_values) == saved + 1


def _pg_cluster() -> list[str]:
    out = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[:2]


def test_database_restart_mid_sweep(pg_url: str, tmp_path: Path) -> None:
    if not pg_url.startswith("postgresql://sweeper:sweeper-test-pw@127.0.0.1"):
        pytest.fail("this test restarts the local PostgreSQL cluster; point it at it")
    spec = _spec(tmp_path, "restart", indexes=16, parallelism=4, duration=2.0)
    proc = _sweep(spec, _env(pg_url, tmp_path), tmp_path)
    _wait_running(pg_url, "restart", n=2)
    time.sleep(1.0)
    version, cluster = _pg_cluster()
    subprocess.run(["pg_ctlcluster", version, cluster, "restart", "-m", "fast"], check=True,
                   timeout=120)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    report = check(pg_url, "restart", 16, tmp_path / "markers", 0, 0, 0.0)
    assert report.problems == []


def test_frozen_runner_is_failed_by_the_watcher_and_retried(pg_url: str,
                                                             tmp_path: Path) -> None:
    spec = _spec(tmp_path, "frozen", indexes=6, parallelism=2, duration=3.0)
    env = _env(pg_url, tmp_path, SWEEPER_GRACE_PERIOD="2", SWEEPER_HEARTBEAT_INTERVAL="0.3")
    proc = _sweep(spec, env, tmp_path)
    _wait_running(pg_url, "frozen", n=2)  # both workers are mid-trial: freeze one of them
    pid = runner_pids("frozen")[0]
    os.kill(pid, signal.SIGSTOP)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err
    trials = optuna.load_study(study_name="frozen", storage=open_storage(pg_url)).get_trials()
    stale = [t for t in trials if t.state == TrialState.FAIL]
    assert stale and all("heartbeat" in t.user_attrs["sweeper:fail_reason"] for t in stale)
    assert check(pg_url, "frozen", 6, tmp_path / "markers", 0, 0, 0.0).problems == []


def test_two_launches_at_once_make_one_plan(pg_url: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "twice", indexes=12, parallelism=3, duration=0.5)
    env = _env(pg_url, tmp_path)
    procs = [_sweep(spec, env, tmp_path) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    trials = optuna.load_study(study_name="twice", storage=open_storage(pg_url)).get_trials()
    assert Counter(t.user_attrs["sweeper:index"] for t in trials) == Counter(range(12))
    assert check(pg_url, "twice", 12, tmp_path / "markers", 0, 0, 0.0).problems == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stopping_sweeper_run_leaves_it_resumable(pg_url: str, tmp_path: Path,
                                                  sig: signal.Signals) -> None:
    spec = _spec(tmp_path, "stopped", indexes=8, parallelism=2, duration=3.0)
    env = _env(pg_url, tmp_path)
    proc = _sweep(spec, env, tmp_path)
    _wait_running(pg_url, "stopped", n=2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "run the same command again" in err
    study = optuna.load_study(study_name="stopped", storage=open_storage(pg_url))
    before = study.get_trials()
    assert not [t for t in before if t.state == TrialState.RUNNING]
    interrupted = [t for t in before if t.state == TrialState.FAIL]
    assert interrupted and all("stopped" in t.user_attrs["sweeper:fail_reason"]
                               or "interrupted" in t.user_attrs["sweeper:fail_reason"]
                               for t in interrupted)
    stopped = re.search(r"stopped (\d+) running trial\(s\)", err)
    assert stopped and int(stopped.group(1)) == len(interrupted), err
    done_before = {t.number for t in before if t.state == TrialState.COMPLETE}
    rerun = _sweep(spec, env, tmp_path)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    after = study.get_trials()
    assert {t.number for t in after if t.state == TrialState.COMPLETE} >= done_before
    assert check(pg_url, "stopped", 8, tmp_path / "markers", 0, 0, 0.0).problems == []


def test_sigterm_inside_a_runner_fails_the_trial_resumably(pg_url: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "term", indexes=1, parallelism=1, duration=30.0)
    from sweeper.spec import load_spec
    from sweeper.study import create_or_resume

    create_or_resume(open_storage(pg_url), load_spec(spec))
    env = _env(pg_url, tmp_path, JOB_ID="0")
    proc = subprocess.Popen([sys.executable, "-m", "trial_runner", "--study", "term"], env=env,
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    _wait_running(pg_url, "term")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert proc.returncode not in (protocol.EXIT_NO_RETRY, protocol.EXIT_CONFIG)
    (t,) = optuna.load_study(study_name="term", storage=open_storage(pg_url)).get_trials()
    assert t.state == TrialState.FAIL
    assert "interrupted by SIGTERM" in t.user_attrs["sweeper:fail_reason"]


def test_killing_sweeper_run_takes_its_workers_along(pg_url: str, tmp_path: Path) -> None:
    """`kill -9` of the orchestrator: the workers notice (PR_SET_PDEATHSIG), mark their trials
    FAIL and exit; nothing is left RUNNING or orphaned, and a new run finishes the sweep."""
    spec = _spec(tmp_path, "orphans", indexes=4, parallelism=2, duration=20.0)
    env = _env(pg_url, tmp_path)
    proc = _sweep(spec, env, tmp_path)
    _wait_running(pg_url, "orphans", n=2)
    assert len(runner_pids("orphans")) == 2
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while runner_pids("orphans") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert runner_pids("orphans") == []
    study = optuna.load_study(study_name="orphans", storage=open_storage(pg_url))
    states = Counter(t.state for t in study.get_trials())
    logs = "\n".join(p.read_text() for p in (tmp_path / ".sweeper").rglob("*.log"))
    assert states[TrialState.RUNNING] == 0 and states[TrialState.FAIL] == 2, logs
