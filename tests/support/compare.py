"""Shared by the compare-trials tests (artifacts, export, dashboard, notebook): run a small
real sweep through the CLI in a test's own directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from sweeper.cli import cli

QUADRATIC = "trial_runner.examples.synthetic:quadratic"


def quadratic_spec(name: str, *, trials: int = 6, method: str = "random",
                   **over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name, "method": method,
        "objective": {"metric": "loss", "direction": "minimize"},
        "parallelism": 2, "seed": 3,
        "trial": {"entrypoint": QUADRATIC, "fixed": {"epochs": 3, "save_artifact": True},
                  "retries": 0},
        "parameters": {"x": {"type": "float", "low": -1.0, "high": 2.0},
                       "opt": {"type": "categorical", "choices": ["adam", "sgd"]}},
    }
    if method != "grid":
        spec["trials"] = trials
    spec.update(over)
    return spec


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths (logs, checkpoints, ./sweeper-artifacts) land in the test's directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("SWEEPER_CODE_VERSION", "test-build-1")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_sweep(tmp_path: Path, url: str, spec: dict[str, Any]) -> Path:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = invoke("run", str(path), "--storage", url, "--log-dir", str(tmp_path / "logs"))
    assert result.exit_code == 0, result.output
    return path
