"""The local backend directly: exit descriptions, and real small runs of ``LocalBackend.run``
(worker processes, SQLite) with objectives that finish, die and fail."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.base import RunResult, Tick
from sweeper.backends.local.backend import LocalBackend
from sweeper.backends.local.worker import describe_exit
from sweeper.study import Sweep, create_or_resume, open_storage
from tests.support.helpers import make_spec


@pytest.mark.parametrize(("code", "text"), [
    (None, "is still running"),
    (-signal.SIGKILL, "was killed by SIGKILL"),
    (-signal.SIGTERM, "was killed by SIGTERM"),
    (protocol.EXIT_SIGNAL_BASE + signal.SIGKILL, "was killed by SIGKILL"),  # 137: a shell's view
    (protocol.EXIT_SIGNAL_BASE + signal.SIGSEGV, "was killed by SIGSEGV"),
    (protocol.EXIT_OK, "exited with code 0 (ok)"),
    (protocol.EXIT_RETRY, "exited with code 1 (retryable failure)"),
    (protocol.EXIT_NO_RETRY, "exited with code 3 (failed (no retry))"),
    (protocol.EXIT_CONFIG, "exited with code 4 (configuration error)"),
    (2, "exited with code 2 (error)"),
    (protocol.EXIT_SIGNAL_BASE, "exited with code 128 (error)"),
    (255, "exited with code 255 (error)"),  # 128 + 127 is no signal
])
def test_describe_exit(code: int | None, text: str) -> None:
    assert describe_exit(code) == text


# --------------------------------------------------------------------------- real runs

OBJECTIVES = '''
import os
import signal
import time


def train(ctx):
    print(f"objective output of index {ctx.index}", flush=True)
    if ctx.index == 1 and ctx.attempt == 0:
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-trial
    ctx.report(0, loss=ctx.params["x"] + 1.0)
    return ctx.params["x"]


def broken(ctx):
    if ctx.index == 0:
        return float("nan")  # an unusable result: the runner reports EXIT_NO_RETRY
    if ctx.index == 1:
        os._exit(3)  # the worker itself exits with EXIT_NO_RETRY
    return ctx.params["x"]


def die_first(ctx):
    if ctx.index == 0 and ctx.attempt == 0:
        time.sleep(0.5)  # long enough for the worker to have been handed its next index
        os.kill(os.getpid(), signal.SIGKILL)
    return ctx.params["x"]


def last_alone(ctx):
    # Index 2 runs long; meanwhile nothing is left to hand out. Returns how many workers of
    # the sweep are still alive (not exited, not a zombie) at its end.
    if ctx.index != 2:
        return 0.0
    time.sleep(1.5)
    alive = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        alive += int(ppid) == os.getppid() and state != "Z"
    return float(alive)
'''


def _run(backend: LocalBackend, sweep: Sweep, indexes: Sequence[int], storage_url: str,
         tick: Tick) -> RunResult:
    """Parallelism comes from the spec (2 workers here)."""
    return backend.run(sweep, indexes, storage_url=storage_url, tick=tick)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Workers import ``objectives`` from the working directory (on their PYTHONPATH)."""
    (tmp_path / "objectives.py").write_text(OBJECTIVES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPER_HEARTBEAT_INTERVAL", "0.2")
    monkeypatch.setenv("SWEEPER_GRACE_PERIOD", "3")
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SWEEPER_CODE_VERSION", "test")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU slots, whatever the machine has
    return tmp_path


def _sweep(url: str, entrypoint: str, n: int, retries: int) -> Sweep:
    spec = make_spec(name="local", parallelism=2,
                     trial={"entrypoint": entrypoint, "fixed": {}, "retries": retries},
                     parameters={"x": {"type": "float",
                                       "values": [float(i) for i in range(n)]}})
    sweep, _ = create_or_resume(open_storage(url), spec)
    return sweep


def _states(sweep: Sweep, index: int) -> list[TrialState]:
    return [a.state for a in sweep.storage.attempts(sweep.study_id, index)]


def test_every_index_finishes_exactly_once_and_a_killed_worker_is_retried(
        workdir: Path, sqlite_url: str) -> None:
    sweep = _sweep(sqlite_url, "objectives:train", n=4, retries=1)
    ticks: list[int] = []
    logs = workdir / "logs"
    result = _run(LocalBackend(logs), sweep, range(4), sqlite_url, lambda: ticks.append(1))

    assert result.finished == (0, 1, 2, 3)
    assert result.failed == () and not result.interrupted
    assert ticks  # the caller's progress was driven at least once
    trials = sweep.study().get_trials()
    done = Counter(t.user_attrs[protocol.INDEX_ATTR] for t in trials
                   if t.state == TrialState.COMPLETE)
    assert done == {0: 1, 1: 1, 2: 1, 3: 1}
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert {t.value for t in trials if t.state == TrialState.COMPLETE} == {0.0, 1.0, 2.0, 3.0}
    # index 1: the killed attempt is FAIL with the reason, the retry completed it
    assert _states(sweep, 1) == [TrialState.FAIL, TrialState.COMPLETE]
    killed, retry = (sweep.storage.get_trial(a.trial_id)
                     for a in sweep.storage.attempts(sweep.study_id, 1))
    assert killed.user_attrs[protocol.FAIL_REASON_ATTR] == "runner process was killed by SIGKILL"
    assert retry.user_attrs[protocol.ATTEMPT_ATTR] == 1
    assert retry.user_attrs[protocol.RETRY_OF_ATTR] == killed.number
    assert retry.params == killed.params == {"x": 1.0}
    for i in (0, 2, 3):
        assert _states(sweep, i) == [TrialState.COMPLETE]
    # each index's output went to its own log file
    for i in range(4):
        text = (logs / f"index-{i}.log").read_text()
        assert f"objective output of index {i}" in text
        assert f"objective output of index {(i + 1) % 4}" not in text


def test_no_retry_failures_land_in_failed_and_are_not_retried(workdir: Path,
                                                              sqlite_url: str) -> None:
    sweep = _sweep(sqlite_url, "objectives:broken", n=3, retries=2)
    result = _run(LocalBackend(workdir / "logs"), sweep, range(3), sqlite_url, lambda: None)

    assert result.failed == (0, 1)
    assert result.finished == (2,)
    # retries: 2 would allow two more attempts; EXIT_NO_RETRY allows none
    assert _states(sweep, 0) == [TrialState.FAIL]
    assert _states(sweep, 1) == [TrialState.FAIL]
    assert _states(sweep, 2) == [TrialState.COMPLETE]
    nan_trial, exited = (sweep.storage.get_trial(sweep.storage.attempts(sweep.study_id, i)[0]
                                                 .trial_id) for i in (0, 1))
    assert "not finite" in nan_trial.user_attrs[protocol.FAIL_REASON_ATTR]
    assert exited.user_attrs[protocol.FAIL_REASON_ATTR] == \
        "runner process exited with code 3 (failed (no retry))"


def test_idle_workers_exit_once_nothing_is_left_to_hand_out(workdir: Path,
                                                            sqlite_url: str) -> None:
    sweep = _sweep(sqlite_url, "objectives:last_alone", n=3, retries=0)
    result = _run(LocalBackend(workdir / "logs"), sweep, range(3), sqlite_url, lambda: None)
    assert result.finished == (0, 1, 2)
    last = sweep.storage.get_trial(sweep.storage.attempts(sweep.study_id, 2)[0].trial_id)
    assert last.value == 1.0  # only its own worker: the idle one exited (and was not replaced)


def test_an_index_handed_ahead_to_a_worker_that_dies_runs_once_elsewhere(
        workdir: Path, sqlite_url: str) -> None:
    """With more indexes pending than workers, a busy worker is handed its next index while
    its trial runs. The worker running index 0 dies holding one: that index was never
    started, so it goes back to the queue uncounted and runs once, without a failed attempt."""
    sweep = _sweep(sqlite_url, "objectives:die_first", n=8, retries=1)
    result = _run(LocalBackend(workdir / "logs"), sweep, range(8), sqlite_url, lambda: None)
    assert result.finished == tuple(range(8)) and result.failed == ()
    assert _states(sweep, 0) == [TrialState.FAIL, TrialState.COMPLETE]
    for i in range(1, 8):
        assert _states(sweep, i) == [TrialState.COMPLETE], i


def test_no_indexes_starts_no_worker(tmp_path: Path, sqlite_url: str) -> None:
    sweep = _sweep(sqlite_url, "objectives:train", n=2, retries=0)
    result = _run(LocalBackend(tmp_path / "logs"), sweep, [], sqlite_url, lambda: None)
    assert result == RunResult()
    assert not (tmp_path / "logs").exists()
    assert _states(sweep, 0) == [TrialState.WAITING]


def test_workers_behind_the_in_process_proxy_finish_every_index_once(
        workdir: Path, storage_url: str) -> None:
    """proxy=True: the workers get grpc://127.0.0.1:PORT, not the database URL; a killed worker
    is retried through the proxy as through the database; the proxy saw every claim."""
    from prometheus_client import CollectorRegistry

    sweep = _sweep(storage_url, "objectives:train", n=4, retries=1)
    registry = CollectorRegistry()
    result = _run(LocalBackend(workdir / "logs", proxy=True, metrics=registry), sweep,
                  range(4), storage_url, lambda: None)
    assert result.finished == (0, 1, 2, 3) and result.failed == ()
    assert _states(sweep, 1) == [TrialState.FAIL, TrialState.COMPLETE]
    for i in (0, 2, 3):
        assert _states(sweep, i) == [TrialState.COMPLETE]
    # 4 WAITING trials claimed + 1 new attempt for the killed index, all through the proxy
    assert registry.get_sample_value("sweeper_index_claim_seconds_count") == 5
    assert registry.get_sample_value("sweeper_tell_seconds_count") == 4
    worker_logs = "\n".join(p.read_text() for p in (workdir / "logs").glob("*.log"))
    assert storage_url not in worker_logs


def test_the_proxy_is_on_by_default_only_where_it_pays() -> None:
    from sweeper.proxy.client import PROXY_AUTO_PARALLELISM, proxy_pays

    pg = "postgresql://u:p@db/sweeps"
    assert proxy_pays(pg, PROXY_AUTO_PARALLELISM)
    assert not proxy_pays(pg, PROXY_AUTO_PARALLELISM - 1)
    assert not proxy_pays("sqlite:///sweeps.db", 1000)  # no connections to save


def test_run_help_states_the_measured_threshold() -> None:
    from click.testing import CliRunner

    from sweeper.cli import cli
    from sweeper.proxy.client import PROXY_AUTO_PARALLELISM

    out = CliRunner().invoke(cli, ["run", "--help"]).output
    assert f"from {PROXY_AUTO_PARALLELISM} workers" in " ".join(out.split())
