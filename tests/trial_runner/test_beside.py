"""The runner beside a command trial (trial_runner.beside) with the real shim (sweeper.shim) run
by /bin/sh on this machine: orders through the shared directory, the program's output and exit
status, pruning by signal, a signalled shim, a dead shim, a restarted runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol, shim
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec
from trial_runner import beside
from trial_runner.beside import Exchange
from trial_runner.command import command_objective
from trial_runner.outcome import Interrupted
from trial_runner.runner import RunnerSettings, run_index


@pytest.fixture
def exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Exchange,
                                                                                subprocess.Popen[bytes]]]:
    d = tmp_path / "exchange"
    d.mkdir()
    proc = subprocess.Popen(["/bin/sh", "-c", shim.SCRIPT, "sweeper-shim", str(d)])
    monkeypatch.setenv(protocol.ENV_EXCHANGE_DIR, str(d))
    monkeypatch.setattr(beside, "_current", [])
    ex = beside.current()
    assert ex is not None
    assert ex.wait_ready() == proc.pid
    yield ex, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_the_shim_runs_each_order_and_exits_with_the_runners_code(
        exchange: tuple[Exchange, subprocess.Popen[bytes]]) -> None:
    ex, proc = exchange
    program = ex.start([sys.executable, "-c", "import os, sys; print(os.environ['X']);"
                        "print('oops', file=sys.stderr); sys.exit(5)"], {"X": "a b'c $HOME"})
    assert list(program.stdout) == ["a b'c $HOME\n"]
    assert list(program.stderr) == ["oops\n"]
    assert program.wait() == 5
    ex.finish(protocol.EXIT_NO_RETRY)
    assert proc.wait(timeout=5) == protocol.EXIT_NO_RETRY


def test_stop_reaches_the_program_and_its_children(
        exchange: tuple[Exchange, subprocess.Popen[bytes]]) -> None:
    ex, _ = exchange
    program = ex.start(["sh", "-c", "sleep 60 & echo started; wait"], {})
    assert next(iter(program.stdout)) == "started\n"
    pid = program.pid
    assert pid is not None
    children = beside.descendants(pid)
    assert len(children) == 2
    began = time.monotonic()
    program.stop(grace_s=2)
    assert program.wait() == 128 + signal.SIGTERM
    assert time.monotonic() - began < 2
    time.sleep(0.2)
    assert not any(beside.alive(p) for p in children)


def test_a_signalled_shim_interrupts_the_attempt(
        exchange: tuple[Exchange, subprocess.Popen[bytes]]) -> None:
    ex, proc = exchange
    program = ex.start(["sh", "-c", "echo up; sleep 60"], {})
    assert next(iter(program.stdout)) == "up\n"
    proc.send_signal(signal.SIGTERM)
    with pytest.raises(Interrupted) as e:
        program.wait()
    assert e.value.signum == signal.SIGTERM
    with pytest.raises(Interrupted):
        ex.start(["true"], {})
    ex.finish(protocol.EXIT_SIGNAL_BASE + signal.SIGTERM)
    assert proc.wait(timeout=5) == protocol.EXIT_SIGNAL_BASE + signal.SIGTERM


def test_a_killed_shim_is_a_lost_program(
        exchange: tuple[Exchange, subprocess.Popen[bytes]]) -> None:
    ex, proc = exchange
    program = ex.start(["sh", "-c", "echo up; exec sleep 60"], {})
    assert next(iter(program.stdout)) == "up\n"
    pid = program.pid
    assert pid is not None
    proc.kill()  # the container's init: the runtime kills the rest of the container with it
    proc.wait()
    os.kill(pid, signal.SIGKILL)
    assert program.wait() == beside.LOST and program.lost


def test_a_restarted_runner_stops_what_the_previous_one_left_running(
        exchange: tuple[Exchange, subprocess.Popen[bytes]]) -> None:
    ex, proc = exchange
    program = ex.start(["sh", "-c", "echo up; exec sleep 60"], {})
    assert next(iter(program.stdout)) == "up\n"
    again = Exchange(ex.root)
    assert again.next == 1
    again.wait_ready()
    assert again.recover() is False
    assert program.wait() == 128 + signal.SIGTERM
    again.finish(0)
    assert proc.wait(timeout=5) == 0
    assert Exchange(ex.root).recover() is True


PROGRAM = """
import json, os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: (print("stopped by SIGTERM", flush=True), sys.exit(1)))
x = float(sys.argv[1])
for step in range(50):
    print(f"step={step} loss={x + step + 100 * int(os.environ['JOB_ID'])}", flush=True)
    time.sleep(0.05)
with open(os.environ["SWEEPER_METRICS_FILE"], "w") as f:
    json.dump({"loss": x, "size": 3}, f)
"""


def _spec(tmp_path: Path, pruner: dict[str, object] | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "train.py"
    path.write_text(PROGRAM)
    extra = {"pruner": pruner} if pruner else {}
    return make_spec(method="random", trial={"command": [sys.executable, str(path), "{x}"],
                                             "retries": 0},
                     parameters={"x": {"type": "float", "low": 0.0, "high": 1.0}}, **extra)


def test_a_command_trial_through_the_shim_completes_and_is_pruned(
        exchange: tuple[Exchange, subprocess.Popen[bytes]], sqlite_url: str,
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 2})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    assert spec.trial.command is not None
    objective = command_objective(spec.trial.command, None)
    settings = RunnerSettings(checkpoint_root=tmp_path / "c")
    assert run_index(sweep, 0, objective, settings).state == "COMPLETE"
    out = run_index(sweep, 1, objective, settings)  # its loss is 100 above index 0's
    assert out.state == "PRUNED", out.message
    trial = sweep.study().trials[1]
    assert trial.state == TrialState.PRUNED and max(trial.intermediate_values) < 10
    assert "stopped by SIGTERM" in capfd.readouterr().out  # the runner copied its output


def test_a_command_trial_through_the_shim_reports_its_metrics(
        exchange: tuple[Exchange, subprocess.Popen[bytes]], sqlite_url: str,
        tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    assert spec.trial.command is not None
    out = run_index(sweep, 0, command_objective(spec.trial.command, None),
                    RunnerSettings(checkpoint_root=tmp_path / "c"))
    assert out.state == "COMPLETE", out.message
    trial = sweep.study().trials[0]
    assert trial.value == pytest.approx(trial.params["x"])
    assert len(trial.intermediate_values) == 50 and trial.user_attrs["size"] == 3


REPO = Path(__file__).resolve().parents[2]


def _pod(tmp_path: Path, env: dict[str, str], *args: str
         ) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """The split pod's two processes on this machine: the shim and `python -m trial_runner`
    with the exchange directory (a sidecar: it waits for SIGTERM once the shim has ended)."""
    d = tmp_path / "pod-exchange"
    d.mkdir()
    sh = subprocess.Popen(["/bin/sh", "-c", shim.SCRIPT, "sweeper-shim", str(d)])
    runner = subprocess.Popen([sys.executable, "-m", "trial_runner", *args],
                              env={**env, protocol.ENV_EXCHANGE_DIR: str(d)}, cwd=REPO)
    return sh, runner


def test_the_trials_container_ends_with_the_runners_exit_code(sqlite_url: str,
                                                              tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in (protocol.ENV_STUDY,
                                                             protocol.ENV_EXCHANGE_DIR)}
    (tmp_path / "config").mkdir()
    sh, runner = _pod(tmp_path / "config", env)  # no sweep named: a configuration error
    assert sh.wait(timeout=60) == protocol.EXIT_CONFIG
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 0

    spec = _spec(tmp_path)
    create_or_resume(open_storage(sqlite_url), spec)
    env.update({protocol.ENV_STORAGE: sqlite_url, protocol.ENV_STUDY: spec.name,
                protocol.ENV_CHECKPOINT_DIR: str(tmp_path / "c")})
    (tmp_path / "ok").mkdir()
    sh, runner = _pod(tmp_path / "ok", env, "--index", "0")
    assert sh.wait(timeout=60) == protocol.EXIT_OK
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 0
    trials = create_or_resume(open_storage(sqlite_url), spec)[0].study().trials
    assert [t.state for t in trials if t.user_attrs.get(protocol.INDEX_ATTR) == 0] \
        == [TrialState.COMPLETE]


def test_a_pod_of_several_indexes_hands_the_shim_one_program_each(sqlite_url: str,
                                                                   tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    create_or_resume(open_storage(sqlite_url), spec)
    env = {k: v for k, v in os.environ.items() if k != protocol.ENV_EXCHANGE_DIR}
    env.update({protocol.ENV_STORAGE: sqlite_url, protocol.ENV_STUDY: spec.name,
                protocol.ENV_CHECKPOINT_DIR: str(tmp_path / "c"), protocol.ENV_JOB_ID: "1",
                protocol.ENV_INDEXES_PER_POD: "2"})
    (tmp_path / "pod").mkdir()
    sh, runner = _pod(tmp_path / "pod", env)  # job index 1: sweep indexes 2 and 3
    assert sh.wait(timeout=90) == protocol.EXIT_OK
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 0
    orders = sorted((tmp_path / "pod" / "pod-exchange").glob("*.order"))
    assert [p.read_text() for p in orders] == ["run\n", "run\n", "exit 0\n"]
    trials = create_or_resume(open_storage(sqlite_url), spec)[0].study().trials
    assert sorted(t.user_attrs[protocol.INDEX_ATTR] for t in trials
                  if t.state == TrialState.COMPLETE) == [2, 3]


def test_an_image_without_sleep_is_a_configuration_error(tmp_path: Path) -> None:
    out = subprocess.run(["/bin/sh", "-c", shim.SCRIPT, "sweeper-shim", str(tmp_path)],
                         env={"PATH": str(tmp_path / "empty")}, capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == protocol.EXIT_CONFIG
    assert "this image has no sleep command" in out.stderr
    assert not (tmp_path / shim.READY).exists()
