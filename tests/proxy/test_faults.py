"""The fault tests' guarantees with every runner and the CLI behind a real ``sweeper proxy``
process (real PostgreSQL, real worker processes): killed runners, two launches at once, a
database restart, and the proxy itself SIGKILLed and started again in the middle of a sweep.
Each checks, on the database directly: every index has exactly one finished trial, nothing is
left RUNNING, every failed attempt has a linked retry, no trial ran twice."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from sweeper.study import open_storage
from tests.support.chaos import REPO, SWEEPER, chaos_spec, check, run_chaos
from tests.support.proxy import ProxyProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _env(url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    return dict(os.environ, SWEEPER_STORAGE=url, SWEEPER_TEST_MARKERS=str(markers),
                PYTHONPATH=str(REPO), SWEEPER_CHECKPOINT_DIR=str(tmp_path / "ckpt"), **extra)


def _spec(tmp_path: Path, name: str, indexes: int, parallelism: int, duration: float) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(chaos_spec(name, indexes, parallelism, duration, 3)))
    return path


def _sweep(spec: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([str(SWEEPER), "run", str(spec)], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _running(pg_url: str, name: str) -> int:
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(pg_url))
    except KeyError:
        return 0
    return len(study.get_trials(states=(TrialState.RUNNING,)))


def _wait_running(pg_url: str, name: str, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _running(pg_url, name) < n:
        assert time.monotonic() < deadline, f"no {n} running trials of {name}"
        time.sleep(0.2)


def test_a_sweep_through_the_proxy_finishes_and_no_runner_sees_the_password(
        pg_url: str, tmp_path: Path) -> None:
    with ProxyProcess(pg_url, tmp_path) as proxy:
        spec = _spec(tmp_path, "viaproxy", indexes=12, parallelism=3, duration=0.3)
        proc = _sweep(spec, _env(proxy.url, tmp_path), tmp_path)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert f"storage {proxy.url}" in err
    assert check(pg_url, "viaproxy", 12, tmp_path / "markers", 0, 0, 0.0).problems == []
    password = pg_url.split(":")[2].split("@")[0]
    logs = "\n".join(p.read_text() for p in (tmp_path / ".sweeper").rglob("*.log"))
    assert logs and password not in logs and password not in err


def test_killed_runners_through_the_proxy_lose_nothing(pg_url: str, tmp_path: Path) -> None:
    with ProxyProcess(pg_url, tmp_path) as proxy:
        report = run_chaos(pg_url, indexes=30, parallelism=5, kills=6, interval=1.5,
                           duration=1.5, workdir=tmp_path, sweep_storage=proxy.url)
    print(report.summary())
    assert report.kills >= 6
    assert report.problems == []
    assert report.killed_attempts >= 1


def test_two_launches_through_the_proxy_make_one_plan(pg_url: str, tmp_path: Path) -> None:
    with ProxyProcess(pg_url, tmp_path) as proxy:
        spec = _spec(tmp_path, "twice", indexes=12, parallelism=3, duration=0.5)
        env = _env(proxy.url, tmp_path)
        procs = [_sweep(spec, env, tmp_path) for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    trials = optuna.load_study(study_name="twice", storage=open_storage(pg_url)).get_trials()
    assert Counter(t.user_attrs["sweeper:index"] for t in trials) == Counter(range(12))
    assert check(pg_url, "twice", 12, tmp_path / "markers", 0, 0, 0.0).problems == []


def test_a_proxy_killed_and_restarted_mid_sweep_loses_nothing(pg_url: str,
                                                              tmp_path: Path) -> None:
    proxy = ProxyProcess(pg_url, tmp_path).start()
    try:
        spec = _spec(tmp_path, "proxydown", indexes=16, parallelism=4, duration=2.0)
        env = _env(proxy.url, tmp_path, SWEEPER_GRACE_PERIOD="10",
                   SWEEPER_HEARTBEAT_INTERVAL="0.5")
        proc = _sweep(spec, env, tmp_path)
        _wait_running(pg_url, "proxydown", n=3)
        time.sleep(0.5)
        proxy.kill()  # mid-trial: reports, heartbeats, claims and tells are cut off
        time.sleep(2.0)
        assert _running(pg_url, "proxydown") >= 1  # the runners wait, they do not give up
        proxy.start()  # same port: the runners' channels reconnect on their own
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    finally:
        proxy.stop()
    assert check(pg_url, "proxydown", 16, tmp_path / "markers", 0, 0, 0.0).problems == []
    logs = "\n".join(p.read_text() for p in (tmp_path / ".sweeper").rglob("*.log"))
    assert "storage proxy unavailable" in logs + err  # the outage was seen and ridden out


def test_database_restart_behind_the_proxy_loses_nothing(pg_url: str, tmp_path: Path) -> None:
    if not pg_url.startswith("postgresql://sweeper:sweeper-test-pw@127.0.0.1"):
        pytest.fail("this test restarts the local PostgreSQL cluster; point it at it")
    with ProxyProcess(pg_url, tmp_path) as proxy:
        spec = _spec(tmp_path, "dbrestart", indexes=16, parallelism=4, duration=2.0)
        proc = _sweep(spec, _env(proxy.url, tmp_path), tmp_path)
        _wait_running(pg_url, "dbrestart", n=2)
        time.sleep(1.0)
        out = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True,
                             check=True).stdout.split()
        subprocess.run(["pg_ctlcluster", out[0], out[1], "restart", "-m", "fast"], check=True,
                       timeout=120)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert check(pg_url, "dbrestart", 16, tmp_path / "markers", 0, 0, 0.0).problems == []
