"""What the CLI says stays short and exact: counts in the singular when there is one, a
stopped sweep whose indexes all finished says so (no resume hint for nothing), and a changed
grid is refused pointing at its parameters (the grid's size follows from them), and Optuna's
ExperimentalWarning for what sweeper uses on purpose reaches neither the terminal nor a log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sweeper.cli import cli
from tests.support.helpers import write_spec


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_validate_counts_in_the_singular(tmp_path: Path) -> None:
    path = write_spec(tmp_path, name="single", method="grid",
                      parameters={"x": {"type": "int", "values": [3]}})
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: single: grid, 1 index, 1 parameter, objective ")


def test_a_stop_after_every_index_finished_has_no_resume_hint(
        tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zero.py").write_text("def train(ctx):\n    return 0.0\n")
    path = write_spec(tmp_path, name="all-done", method="grid", parallelism=1,
                      stop={"value": 0.1}, trial={"entrypoint": "zero:train"},
                      parameters={"x": {"type": "int", "values": [0]}})
    result = invoke("run", str(path), "--storage", sqlite_url)
    assert result.exit_code == 0, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("stopped: stop rule value fired at ")
    assert last.endswith("; every index finished"), last


def test_a_changed_grid_points_at_its_parameters(tmp_path: Path, sqlite_url: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zero.py").write_text("def train(ctx):\n    return 0.0\n")
    kw = {"name": "regrid", "method": "grid", "trial": {"entrypoint": "zero:train"}}
    path = write_spec(tmp_path, parameters={"x": {"type": "int", "values": [0, 1]}}, **kw)
    assert invoke("run", str(path), "--storage", sqlite_url).exit_code == 0
    write_spec(tmp_path, parameters={"x": {"type": "int", "values": [0, 1, 2]}}, **kw)
    result = invoke("run", str(path), "--storage", sqlite_url)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: parameters: a different sweep named 'regrid' "
                           "already exists in this storage (parameters differ)"), line


NSGA3 = """\
name: quiet-nsga3
method: nsga3
objective:
  - {metric: f1, direction: minimize}
  - {metric: f2, direction: minimize}
trials: 4
parallelism: 2
trial:
  entrypoint: trial_runner.examples.synthetic:zdt1
  retries: 0
parameters:
  x1: {type: float, low: 0.0, high: 1.0}
  x2: {type: float, low: 0.0, high: 1.0}
"""
CONDITIONAL_TPE = """\
name: quiet-tpe
method: tpe
objective: {metric: loss, direction: minimize}
trials: 4
parallelism: 2
trial:
  entrypoint: trial_runner.examples.synthetic:quadratic
  fixed: {epochs: 1}
  retries: 0
parameters:
  opt: {type: categorical, choices: [a, b]}
  x: {type: float, low: 0.0, high: 1.0, when: {opt: a}}
"""


@pytest.mark.parametrize("spec", [NSGA3, CONDITIONAL_TPE], ids=["nsga3", "conditional-tpe"])
def test_no_experimental_warning_on_a_postgresql_run(spec: str, tmp_path: Path,
                                                     pg_url: str) -> None:
    """Issue 25, point 9: on PostgreSQL `sweeper run` builds the runners' sampler before
    forking them, and Optuna marks NSGAIIISampler (nsga3) and TPE's group=True (a conditional
    space) experimental: its ExperimentalWarning reached the terminal. The installed console
    script, as a user runs it; the index logs are checked too (where exec'd workers put it)."""
    import subprocess
    import sys

    (tmp_path / "spec.yaml").write_text(spec)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "SWEEPER_STORAGE")}
    run = subprocess.run([str(Path(sys.executable).parent / "sweeper"), "run", "spec.yaml",
                          "--storage", pg_url], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    logs = "".join(p.read_text() for p in (tmp_path / ".sweeper" / "logs").rglob("*.log"))
    for text in (run.stdout, run.stderr, logs):
        assert "ExperimentalWarning" not in text and "is experimental" not in text, text
