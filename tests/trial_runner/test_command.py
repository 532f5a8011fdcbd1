"""`trial.command` trials: argv placeholders, Katib-style stdout metrics, the metrics file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec
from trial_runner.command import (
    command_objective,
    parse_metric_line,
    render_argv,
)
from trial_runner.processes import last_error_line
from trial_runner.runner import RunnerSettings, run_index


def test_parse_metric_line() -> None:
    assert parse_metric_line("epoch 3: step=3 val_loss=0.41, val_accuracy=9.3e-1") == {
        "step": 3.0, "val_loss": 0.41, "val_accuracy": 0.93}
    assert parse_metric_line("loss = -1.5") == {"loss": -1.5}
    assert parse_metric_line("no metrics here; path=/tmp/x") == {}


def test_render_argv_never_uses_a_shell() -> None:
    argv = render_argv(["train.py", "--lr={lr}", "{name}"], {"lr": 0.1, "name": "a b; rm -rf /"})
    assert argv == ["train.py", "--lr=0.1", "a b; rm -rf /"]


SCRIPT = """
import json, os, sys
x = float(sys.argv[1])
for step in range(3):
    print(f"step={step} loss={x * x + 2 - step} note=1", flush=True)
assert "SWEEPER_STORAGE" not in os.environ
assert json.loads(os.environ["SWEEPER_PARAMS"])["x"] == x
with open(os.environ["SWEEPER_METRICS_FILE"], "w") as f:
    json.dump({"loss": x * x, "size": 3}, f)
"""


def _spec(tmp_path: Path, script: str, timeout: str | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "train.py"
    path.write_text(script)
    trial = {"command": [sys.executable, str(path), "{x}"], "retries": 0}
    if timeout:
        trial["timeout"] = timeout
    return make_spec(method="random", trial=trial,
                     parameters={"x": {"type": "float", "low": -2.0, "high": 2.0}})


def test_command_trial_reports_steps_and_final_metrics(sqlite_url: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, SCRIPT)
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    assert spec.trial.command is not None
    objective = command_objective(spec.trial.command, None)
    out = run_index(sweep, 0, objective, RunnerSettings(checkpoint_root=tmp_path / "c"))
    assert out.state == "COMPLETE", out.message
    t = sweep.study().trials[out.trial_number]
    x = t.params["x"]
    assert t.value == pytest.approx(x * x)
    assert t.intermediate_values == pytest.approx({0: x * x + 2, 1: x * x + 1, 2: x * x})
    assert t.user_attrs["size"] == 3


def test_failing_and_hanging_commands(sqlite_url: str, tmp_path: Path) -> None:
    failing = _spec(tmp_path, "import sys; print('loss=1'); sys.exit(5)")
    sweep, _ = create_or_resume(open_storage(sqlite_url), failing)
    assert failing.trial.command is not None
    out = run_index(sweep, 0, command_objective(failing.trial.command, None),
                    RunnerSettings(checkpoint_root=tmp_path / "c"))
    assert (out.state, out.exit_code) == ("FAIL", protocol.EXIT_RETRY)
    assert "exited with code 5" in sweep.study().trials[0].user_attrs["sweeper:fail_reason"]

    hanging = _spec(tmp_path, "import time; time.sleep(60)", timeout="1s")
    assert hanging.trial.command is not None
    out = run_index(sweep, 1, command_objective(hanging.trial.command, 1.0),
                    RunnerSettings(checkpoint_root=tmp_path / "c"))
    assert (out.state, out.exit_code) == ("FAIL", protocol.EXIT_NO_RETRY)
    t = sweep.study().trials[out.trial_number]
    assert t.state == TrialState.FAIL and "timed out" in t.user_attrs["sweeper:fail_reason"]


@pytest.mark.parametrize("lines, reason", [
    (["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
      "    import torchx", "ModuleNotFoundError: No module named 'torchx'"],
     "ModuleNotFoundError: No module named 'torchx'"),
    (["python: can't open file '/w/train.py': [Errno 2] No such file or directory"],
     "python: can't open file '/w/train.py': [Errno 2] No such file or directory"),
    (["epoch 1", "Segmentation fault (core dumped)", ""], "Segmentation fault (core dumped)"),
    (["loading data", "giving up"], "giving up"),
    ([], None), (["", "  "], None),
])
def test_last_error_line_picks_what_a_user_would_read(lines: list[str],
                                                      reason: str | None) -> None:
    assert last_error_line(lines) == reason


def test_a_failed_command_stores_the_programs_own_error(sqlite_url: str, tmp_path: Path,
                                                        capfd: pytest.CaptureFixture[str]
                                                        ) -> None:
    spec = _spec(tmp_path, "import sys\nprint('step=0 loss=1')\nimport not_a_module_xyz\n")
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    assert spec.trial.command is not None
    out = run_index(sweep, 0, command_objective(spec.trial.command, None),
                    RunnerSettings(checkpoint_root=tmp_path / "c"))
    assert (out.state, out.exit_code) == ("FAIL", protocol.EXIT_RETRY)
    reason = sweep.study().trials[0].user_attrs["sweeper:fail_reason"]
    assert "exited with code 1: ModuleNotFoundError: No module named 'not_a_module_xyz'" \
        in reason
    # The whole traceback still reaches the runner's stderr (the index's log file).
    assert "Traceback (most recent call last)" in capfd.readouterr().err
