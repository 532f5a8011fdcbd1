"""`sweeper logs` on a local sweep: the index's log file (named on stderr), one attempt of it,
the last lines, following it while the index runs, and forcing the backend. (On Kubernetes:
tests/backends/test_kubernetes_logs.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sweeper import protocol
from sweeper.cli import cli
from sweeper.runlogs import split_attempts
from sweeper.study import load_sweep, open_storage
from tests.support.helpers import write_spec

SWEEPER = Path(sys.executable).parent / "sweeper"


def sweeper(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubeconfig anywhere: a command that went to Kubernetes would fail (exit 3)."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_logs_of_a_local_sweep_by_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          sqlite_url: str, no_cluster: None) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "retried.py").write_text(
        "def train(ctx):\n"
        "    print(f'output of index {ctx.index} attempt {ctx.attempt}', flush=True)\n"
        "    if ctx.index == 2 and ctx.attempt == 0:\n"
        "        raise RuntimeError('first attempt of index 2 fails')\n"
        "    return float(ctx.params['a'])\n")
    spec = write_spec(tmp_path, name="retried", trial={"entrypoint": "retried:train",
                                                       "retries": 1})
    logs_dir = tmp_path / "elsewhere"
    assert sweeper("run", str(spec), "--storage", sqlite_url, "--log-dir",
                   str(logs_dir)).exit_code == 0

    # The log directory and backend were recorded: no --log-dir, no --backend needed.
    latest = sweeper("logs", "retried", "--index", "2", "--storage", sqlite_url)
    assert latest.exit_code == 0, latest.output
    key = load_sweep(open_storage(sqlite_url), "retried").state_key  # the sweep's own directory
    path = Path("elsewhere", key, protocol.index_log_name(2))  # under the cwd: relative
    assert re.fullmatch(rf"file {re.escape(str(path))} \(index 2, attempt 1, trial #\d+; "
                        r"attempts in the file: 0-1\)", latest.stderr.strip()), latest.stderr
    assert "output of index 2 attempt 1" in latest.stdout
    assert "attempt 0" not in latest.stdout  # only the latest attempt
    assert latest.stdout.startswith("=== sweeper: index 2, attempt 1, trial #")

    first = sweeper("logs", "retried", "--index", "2", "--attempt", "0", "--storage",
                    sqlite_url)
    assert first.exit_code == 0, first.output
    assert "output of index 2 attempt 0" in first.stdout
    assert "RuntimeError: first attempt of index 2 fails" in first.stdout
    assert "attempt 1" not in first.stdout
    assert ", attempt 0, trial #" in first.stderr

    tail = sweeper("logs", "retried", "--index", "2", "--attempt", "0", "--tail", "2",
                   "--storage", sqlite_url)
    assert tail.stdout.splitlines() == first.stdout.splitlines()[-2:]

    missing = sweeper("logs", "retried", "--index", "2", "--attempt", "5", "--storage",
                      sqlite_url)
    assert missing.exit_code == 1
    assert missing.stderr.strip() == f"error: {path} holds no attempt 5 of index 2 " \
                                     "(attempts in it: 0, 1)"
    outside = sweeper("logs", "retried", "--index", "10", "--storage", sqlite_url)
    assert outside.exit_code == 2 and "sweep retried has indexes 0..9" in outside.stderr

    # --log-dir names the directory `run` was given; --backend forces where to look.
    given = sweeper("logs", "retried", "--index", "0", "--storage", sqlite_url, "--log-dir",
                    str(logs_dir))
    assert given.exit_code == 0 and "output of index 0 attempt 0" in given.stdout
    forced = sweeper("logs", "retried", "--index", "0", "--storage", sqlite_url,
                     "--backend", "kubernetes")
    assert forced.exit_code == 3 and "no Kubernetes configuration" in forced.stderr
    both = sweeper("logs", "retried", "--index", "0", "--attempt", "0", "--follow",
                   "--storage", sqlite_url)
    assert both.exit_code == 2 and "--follow follows the latest attempt" in both.stderr


def test_logs_without_the_storage_finds_the_default_log_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str,
        no_cluster: None) -> None:
    """No storage at hand (the default sweeps.db does not exist here): the local file under
    .sweeper/logs is found all the same."""
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, name="nostore")
    assert sweeper("run", str(spec), "--storage", sqlite_url).exit_code == 0
    result = sweeper("logs", "nostore", "--index", "3")
    assert result.exit_code == 0, result.output
    key = load_sweep(open_storage(sqlite_url), "nostore").state_key
    assert f"file {Path('.sweeper/logs', key, 'index-3.log')} (index 3, attempt 0" \
        in result.stderr
    assert "index 3: trial #" in result.stdout


def test_follow_prints_the_log_while_the_index_runs_and_stops_when_it_ends(
        tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "gated.py").write_text(
        "import os, time\n"
        "def train(ctx):\n"
        "    print('waiting for the gate', flush=True)\n"
        "    while not os.path.exists('gate'):\n"
        "        time.sleep(0.05)\n"
        "    print('through the gate', flush=True)\n"
        "    return 1.0\n")
    spec = write_spec(tmp_path, name="gated", method="random", trials=1,
                      trial={"entrypoint": "gated:train"})
    env = {**os.environ, "SWEEPER_STORAGE": sqlite_url, "SWEEPER_HEARTBEAT_INTERVAL": "0.5",
           "KUBECONFIG": str(tmp_path / "none")}
    run = subprocess.Popen([str(SWEEPER), "run", str(spec)], cwd=tmp_path, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    follow = None
    try:
        _wait_for(lambda: _study_exists(sqlite_url, "gated"), run)
        follow = subprocess.Popen([str(SWEEPER), "logs", "gated", "--index", "0", "--follow"],
                                  cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        assert follow.stdout is not None
        seen = []
        for line in follow.stdout:  # the trial is still running: it waits for the gate
            seen.append(line)
            if line.strip() == "waiting for the gate":
                break
        assert seen and seen[-1].strip() == "waiting for the gate", "".join(seen)
        assert follow.poll() is None
        (tmp_path / "gate").touch()
        rest, err = follow.communicate(timeout=120)
        assert follow.returncode == 0, err
        assert "through the gate" in rest
        assert "index 0: trial #0 complete: loss=1" in rest  # written after the trial ended
        key = load_sweep(open_storage(sqlite_url), "gated").state_key
        assert f"file {Path('.sweeper/logs', key, 'index-0.log')} (index 0" in err
        assert err.strip().splitlines()[-1] == "index 0: attempt 0 (trial #0) ended COMPLETE"
        assert run.wait(timeout=120) == 0
    finally:
        for proc in (run, follow):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_logs_of_a_promoted_index_hold_every_segment_and_no_other_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str,
        no_cluster: None) -> None:
    """Promotion ASHA on the local backend: a worker done with its own index resumes paused
    trials of other indexes. What each promoted segment prints goes to its own index's log,
    after a header that names the rung it was promoted from, never to the promoter's index."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "steps.py").write_text(
        "from optuna import TrialPruned\n"
        "def train(ctx):\n"
        "    resumed = ctx.load_checkpoint()\n"
        "    start = resumed[1] + 1 if resumed is not None else 0\n"
        "    for step in range(start, 10):\n"
        "        print(f'output of index {ctx.index} step {step}', flush=True)\n"
        "        ctx.report(step, loss=ctx.params['a'] + 1 / (step + 1))\n"
        "        ctx.save_checkpoint({}, step=step)\n"
        "        if ctx.should_prune():\n"
        "            raise TrialPruned()\n"
        "    return ctx.params['a'] + 0.1\n")
    spec = write_spec(tmp_path, name="promoted", trials=9, parallelism=1,
                      scheduler={"type": "asha", "mode": "promotion", "min_resource": 1,
                                 "max_resource": 9, "reduction_factor": 3},
                      trial={"entrypoint": "steps:train"},
                      parameters={"a": {"type": "int", "low": 0, "high": 8}})
    run = sweeper("run", str(spec), "--storage", sqlite_url)
    assert run.exit_code == 0, run.output
    study = load_sweep(open_storage(sqlite_url), "promoted").study()
    steps = {int(t.user_attrs[protocol.INDEX_ATTR]): sorted(t.intermediate_values)
             for t in study.trials}
    assert sorted(steps) == list(range(9)) and max(map(len, steps.values())) == 10

    rung_steps = (1, 3)  # min_resource 1, reduction_factor 3 (max_resource 9 ends the trial)
    for index, reported in steps.items():
        shown = sweeper("logs", "promoted", "--index", str(index), "--storage", sqlite_url)
        assert shown.exit_code == 0, shown.output
        printed = re.findall(r"^output of index (\d+) step (\d+)$", shown.stdout, re.M)
        # every step the trial ran, whichever worker ran it, once each, in order; nothing else
        assert printed == [(str(index), str(s)) for s in reported], shown.stdout
        segments = split_attempts(shown.stdout)
        assert all(s.header is not None and s.header.index == index for s in segments)
        assert segments[0].header.promoted_from is None  # type: ignore[union-attr]
        for seg in segments[1:]:  # each promoted segment resumes after its rung's step
            rung = seg.header.promoted_from  # type: ignore[union-attr]
            assert rung is not None, shown.stdout
            first = re.search(rf"^output of index {index} step (\d+)$", seg.text, re.M)
            assert first is not None and int(first[1]) == rung_steps[rung] + 1, seg.text
        if len(segments) > 1:
            assert f", {len(segments)} segments)" in shown.stderr, shown.stderr
    # One worker: index 0, the best, paused at rung 0 (the first there), was resumed by the
    # worker of index 2 once three trials had reached the rung; so it ran in segments.
    assert len(split_attempts(sweeper("logs", "promoted", "--index", "0", "--storage",
                                      sqlite_url).stdout)) >= 2


def _study_exists(url: str, name: str) -> bool:
    try:
        load_sweep(open_storage(url), name)
    except Exception:  # noqa: BLE001 - not created yet (or the file is still being made)
        return False
    return True


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str],
              limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


#: A trial that prints the index its environment names and its checkpoint directory at every
#: step, resuming after the step in its checkpoint: as a program (``command:``, its metrics on
#: stdout) and as a Python entrypoint that also starts a program (which inherits the runner's
#: environment).
_PROG = (
    "import os, subprocess, sys, time\n"
    "def job_id():\n"
    "    if sys.argv[1:2] == ['sub']:  # the entrypoint's child process\n"
    "        code = 'import os; print(os.environ[\"JOB_ID\"])'\n"
    "        return subprocess.run([sys.executable, '-c', code], capture_output=True,\n"
    "                              text=True, check=True).stdout.strip()\n"
    "    return os.environ['JOB_ID']\n"
    "def steps(ckpt_dir, a, report):\n"
    "    ckpt = os.path.join(ckpt_dir, 'step')\n"
    "    start = int(open(ckpt).read()) + 1 if os.path.exists(ckpt) else 0\n"
    "    for step in range(start, 10):\n"
    "        os.makedirs(ckpt_dir, exist_ok=True)\n"
    "        with open(ckpt + '.new', 'w') as f:\n"
    "            f.write(str(step))\n"
    "        os.replace(ckpt + '.new', ckpt)\n"
    "        print(f'env JOB_ID is {job_id()} at step {step} in '\n"
    "              f'{os.path.basename(ckpt_dir)}', flush=True)\n"
    "        if report(step, a + 1 / (step + 1)):\n"
    "            return None\n"
    "    return a + 0.1\n"
    "def train(ctx):\n"
    "    from optuna import TrialPruned\n"
    "    def report(step, loss):\n"
    "        ctx.report(step, loss=loss)\n"
    "        return ctx.should_prune()\n"
    "    loss = steps(str(ctx.checkpoint_dir), ctx.params['a'], report)\n"
    "    if loss is None:\n"
    "        raise TrialPruned()\n"
    "    return loss\n"
    "if __name__ == '__main__':\n"
    "    def report(step, loss):\n"
    "        print(f'step={step} loss={loss}', flush=True)\n"
    "        time.sleep(0.2)  # the runner stops the program at a rung, as it reads the line\n"
    "    loss = steps(os.environ['SWEEPER_CHECKPOINT_DIR'], float(sys.argv[1]), report)\n"
    "    print(f'loss={loss}', flush=True)\n")


@pytest.mark.parametrize("kind", ["entrypoint", "command"])
def test_a_promoted_trial_sees_its_own_index_in_its_environment(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str,
        no_cluster: None) -> None:
    """Promotion ASHA: a segment resumed by another index's worker runs with its own trial's
    JOB_ID (how a trial learns its hyperparameter set), in the runner's environment, in a
    process the trial starts and in a ``command:``'s, and with its own index's checkpoint
    directory, as its first run did."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "prog.py").write_text(_PROG.replace("sys.argv[1:2] == ['sub']",
                                                    f"{kind == 'entrypoint'}"))
    trial = {"entrypoint": "prog:train"} if kind == "entrypoint" else \
        {"command": [sys.executable, str(tmp_path / "prog.py"), "{a}"]}
    spec = write_spec(tmp_path, name="promotedenv", trials=9, parallelism=1,
                      scheduler={"type": "asha", "mode": "promotion", "min_resource": 1,
                                 "max_resource": 9, "reduction_factor": 3},
                      trial=trial, parameters={"a": {"type": "int", "low": 0, "high": 8}})
    run = sweeper("run", str(spec), "--storage", sqlite_url)
    assert run.exit_code == 0, run.output
    promoted = 0
    for index in range(9):
        shown = sweeper("logs", "promotedenv", "--index", str(index), "--storage", sqlite_url)
        assert shown.exit_code == 0, shown.output
        for seg in split_attempts(shown.stdout):
            assert seg.header is not None and seg.header.index == index, shown.stdout
            seen = re.findall(r"^env JOB_ID is (\d+) at step \d+ in (\S+)$", seg.text, re.M)
            assert seen and set(seen) == {(str(index), f"index-{index}")}, seg.text
            promoted += seg.header.promoted_from is not None
    assert promoted >= 2  # segments resumed by other indexes' workers (three at rung 0 ...)
