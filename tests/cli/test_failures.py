"""Failures explain themselves: `run` lists each index that failed for good with its reason, the
last lines of its log and the command for the rest; `status` shows the reason (table and JSON)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.study import load_sweep, open_storage
from tests.support.helpers import write_spec


def sweeper(*args: str, **env: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env or None, catch_exceptions=False)


@pytest.fixture
def failing_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> Path:
    """Indexes 1 and 3 raise on every attempt (2 attempts each); the rest finish."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPER_HEARTBEAT_INTERVAL", "0.5")
    (tmp_path / "failing.py").write_text(
        "def train(ctx):\n"
        "    print(f'training index {ctx.index} attempt {ctx.attempt}', flush=True)\n"
        "    if ctx.index == 1:\n"
        "        raise ValueError('bad learning rate for index 1')\n"
        "    if ctx.index == 3:\n"
        "        raise RuntimeError('out of memory on index 3')\n"
        "    return float(ctx.params['a'])\n")
    return write_spec(tmp_path, name="failing", trial={"entrypoint": "failing:train",
                                                       "retries": 1})


def test_run_names_each_failed_index_its_reason_and_last_log_lines(
        failing_sweep: Path, sqlite_url: str) -> None:
    result = sweeper("run", str(failing_sweep), "--storage", sqlite_url)
    assert result.exit_code == 1, result.output
    err = result.stderr
    assert "index 1 failed for good after 2 attempt(s): objective raised ValueError: bad " \
           "learning rate for index 1" in err
    assert "index 3 failed for good after 2 attempt(s): objective raised RuntimeError: out " \
           "of memory on index 3" in err
    block = err[err.index("index 1 failed for good"):err.index("index 3 failed for good")]
    lines = block.splitlines()
    key = load_sweep(open_storage(sqlite_url), "failing").state_key  # the sweep's own logs
    assert lines[1] == f"  last lines of file {Path('.sweeper/logs', key, 'index-1.log')}:"
    shown = [line[4:] for line in lines[2:-1]]
    assert len(shown) == 5 and all(line.startswith("    ") for line in lines[2:-1])
    assert any(line.startswith("ValueError: bad learning rate for index 1") for line in shown)
    block3 = err[err.index("index 3 failed for good"):]
    assert "    RuntimeError: out of memory on index 3" in block3
    assert "ValueError" not in block3  # each index shows its own log
    # ... and the command that shows the rest, which works as printed
    command = re.search(r"  the rest: (sweeper logs failing --index 1 .*)", block)
    assert command, block
    argv = shlex.split(command.group(1))[1:]
    assert argv[:4] == ["logs", "failing", "--index", "1"] and sqlite_url in argv
    full = sweeper(*argv)
    assert full.exit_code == 0, full.output
    assert "training index 1 attempt 1" in full.stdout
    assert "Traceback" in full.stdout and "ValueError: bad learning rate" in full.stdout
    # the one error line stays last, for scripts that read it
    assert err.strip().splitlines()[-1] == \
        "error: 2 index(es) failed for good: 1,3; see `sweeper status failing`"
    # the results on stdout are unchanged: the best trials only
    assert "failed for good" not in result.stdout and "best trials of failing" in result.stdout


def test_status_shows_the_reason_in_the_table_and_json(failing_sweep: Path,
                                                       sqlite_url: str) -> None:
    assert sweeper("run", str(failing_sweep), "--storage", sqlite_url).exit_code == 1
    table = sweeper("status", "failing", "--storage", sqlite_url, COLUMNS="100")
    assert table.exit_code == 0, table.output
    header, _, *rows = table.stdout.splitlines()[1:]
    assert header.split() == ["index", "state", "attempts", "trial", "loss", "reason"]
    spending = [r for r in rows if r.startswith("spent: ")]  # what was spent, under the table
    rows = rows[:rows.index(spending[0])]
    by_index = {int(r.split()[0]): r for r in rows}
    assert by_index[1].endswith("objective raised ValueError: bad learning rate for index 1")
    assert by_index[0].split()[1] == "COMPLETE" and "raised" not in by_index[0]
    assert all(len(r) <= 100 for r in rows)
    narrow = sweeper("status", "failing", "--storage", sqlite_url, COLUMNS="60")
    row1 = next(r for r in narrow.stdout.splitlines() if r.startswith("1 "))
    assert row1.endswith("...") and "objective raised" in row1  # clipped, not wrapped

    doc = json.loads(sweeper("status", "failing", "--storage", sqlite_url, "--format",
                             "json").stdout)
    reasons = {r["index"]: r["fail_reason"] for r in doc["per_index"]}
    assert reasons[1] == "objective raised ValueError: bad learning rate for index 1"
    assert reasons[3] == "objective raised RuntimeError: out of memory on index 3"
    assert reasons[0] is None and reasons[2] is None and reasons[4] is None


def test_a_failing_program_reads_like_its_own_output(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A command trial that fails: its log holds the program's stdout and stderr and one line
    from sweeper with the exit code (no traceback of sweeper's, each line once); a program
    that prints no objective metric is told which line was expected, with its last lines."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text("import sys\nprint('epoch 1 done')\n"
                                     "raise ValueError('bad shape')\n")
    (tmp_path / "quiet.py").write_text("print('loss is 0.3')\n")
    for name, script in (("bad-program", "bad.py"), ("quiet-program", "quiet.py")):
        spec = write_spec(tmp_path, name=name, method="grid",
                          objective={"metric": "val_loss", "direction": "minimize"},
                          trial={"command": ["python", script], "retries": 0},
                          parameters={"x": {"type": "int", "values": [0]}})
        assert sweeper("run", str(spec)).exit_code == 1
    key = load_sweep(open_storage("sqlite:///sweeps.db"), "bad-program").state_key
    log = (tmp_path / ".sweeper" / "logs" / key / "index-0.log").read_text()
    assert "epoch 1 done" in log and 'File "' in log and "ValueError: bad shape" in log
    # Its stdout and stderr are two pipes, so their lines may interleave either way round; the
    # only frames in the log are the program's own (no traceback of sweeper's).
    frames = [line for line in log.splitlines() if line.lstrip().startswith('File "')]
    assert frames and all("bad.py" in frame for frame in frames), log
    failed = [line for line in log.splitlines() if "failed:" in line]
    assert len(failed) == 1, log
    assert failed[0].endswith("index 0: trial #0 failed: the program exited with code 1: "
                              "ValueError: bad shape")
    assert "Traceback (most recent call last)" in log and log.count("Traceback") == 1

    key = load_sweep(open_storage("sqlite:///sweeps.db"), "quiet-program").state_key
    log = (tmp_path / ".sweeper" / "logs" / key / "index-0.log").read_text()
    (failed,) = [line for line in log.splitlines() if "failed:" in line]
    assert failed.endswith("the program reported no 'val_loss': expected a stdout line like "
                           "'val_loss=0.25' or 'val_loss: 0.25' (or 'val_loss' in the JSON "
                           "file $SWEEPER_METRICS_FILE), saw none; the last lines of its "
                           "stdout: loss is 0.3")


def _broken_sweep(tmp_path: Path, name: str, **extra: object) -> Path:
    (tmp_path / "broken.py").write_text(
        "import os\n"
        "def train(ctx):\n"
        "    if not os.path.exists('fixed'):\n"
        "        raise KeyError('step')\n"
        "    return float(ctx.params['a'])\n")
    return write_spec(tmp_path, name=name, method="random", trials=20,
                      trial={"entrypoint": "broken:train", "retries": 1}, **extra)


def test_a_sweep_whose_first_attempts_all_fail_stops_early(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> None:
    """The default brake: 20 indexes whose objective always raises stop after the first 5
    failed attempts (plus those already running), with one line naming the common reason;
    the rest stays resumable once the bug is fixed."""
    monkeypatch.chdir(tmp_path)
    spec = _broken_sweep(tmp_path, "broken")
    result = sweeper("run", str(spec), "--storage", sqlite_url, "-p", "2")
    assert result.exit_code == 1, result.output
    study = optuna.load_study(study_name="broken", storage=sqlite_url)
    failed = [t for t in study.trials if t.state.name == "FAIL"]
    assert 5 <= len(failed) <= 5 + 2, len(failed)  # not 40 attempts
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: stopped: stop rule failing_start fired at ")
    assert "the first 5 attempts all failed and none completed; most often: objective raised " \
           "KeyError: 'step'" in last
    assert "`sweeper resume broken --ignore-stop` runs them" in last
    assert len(result.output.splitlines()) < 40

    (tmp_path / "fixed").touch()
    resumed = sweeper("resume", "broken", "--storage", sqlite_url, "--ignore-stop")
    assert resumed.exit_code == 0, resumed.output
    finished = {t.user_attrs["sweeper:index"] for t in optuna.load_study(
        study_name="broken", storage=sqlite_url).trials if t.state.name == "COMPLETE"}
    assert finished == set(range(20))


def test_the_brake_is_off_with_max_failed_trials_0(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> None:
    monkeypatch.chdir(tmp_path)
    spec = _broken_sweep(tmp_path, "unbraked", stop={"max_failed_trials": 0})
    result = sweeper("run", str(spec), "--storage", sqlite_url, "-p", "2")
    assert result.exit_code == 1, result.output
    trials = optuna.load_study(study_name="unbraked", storage=sqlite_url).trials
    assert [t.state.name for t in trials].count("FAIL") == 40
    assert "stop rule" not in result.output
