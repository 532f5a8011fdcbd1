"""An imported W&B sweep runs its W&B program unchanged, with the real ``wandb`` package
(offline: nothing goes to W&B's servers): the parameters arrive in ``wandb.config`` (a nested
one nested), every ``wandb.log`` call is a report at W&B's step, and W&B's hyperband early
termination (successive halving here) prunes on those reports."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper.cli import cli
from sweeper.study import load_sweep, open_storage

#: The real wandb package (the test extra installs it): a missing one fails, never skips.
importlib.import_module("wandb")

REPO = Path(__file__).resolve().parents[2]
WANDB = REPO / "tests" / "data" / "importers" / "wandb"


@pytest.fixture
def no_wandb_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean W&B environment (no mode, key or directory of the user's) in ``tmp_path``, with
    this interpreter as the command's ``python``."""
    for name in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no ~/.config/wandb
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_wandb_program_runs_unchanged_and_reports_every_log(
        sqlite_url: str, no_wandb_settings: Path) -> None:
    tmp = no_wandb_settings
    shutil.copy(WANDB / "wandb_train.py", tmp / "wandb_train.py")
    out = tmp / "sweep.sweeper.yaml"
    result = CliRunner().invoke(cli, ["import", "wandb", str(WANDB / "wandb_program.yaml"),
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["run", str(out), "--storage", sqlite_url])
    assert result.exit_code == 0, result.output
    trials = sorted(load_sweep(open_storage(sqlite_url), "wandb-program").study().get_trials(),
                    key=lambda t: t.number)
    assert [t.params["learning_rate"] for t in trials] == [0.01, 0.1, 0.5]  # the grid's order
    best, *worse = trials
    # Parameters through wandb.config (the program reads no argv), the nested one nested:
    for t in trials:
        assert t.user_attrs["lr_seen"] == t.params["learning_rate"]
        assert t.user_attrs["momentum_seen"] == 0.9
    # Every wandb.log call reported at W&B's step: one per epoch (commit=False joins a step).
    assert best.state == TrialState.COMPLETE
    assert sorted(best.intermediate_values) == [0, 1, 2, 3, 4, 5]
    assert best.value == pytest.approx(1 / 6)
    assert best.user_attrs["train.loss"] == pytest.approx(1.1 / 6)  # nested dict: dotted name
    # max_iter 4, s 1, eta 2: W&B's bracket at 2 -> pruned there, below the best.
    for t in worse:
        assert t.state == TrialState.PRUNED, t
        assert max(t.intermediate_values) == 2
    # Offline: W&B's own run files, one per trial, nothing synced.
    runs = sorted((tmp / "wandb").glob("offline-run-*"))
    assert len(runs) == 3
    assert not list((tmp / "wandb").glob("run-*"))


def test_the_users_wandb_mode_is_kept(sqlite_url: str, no_wandb_settings: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """WANDB_MODE=disabled (the user's choice) writes no run files; the reports still come."""
    tmp = no_wandb_settings
    monkeypatch.setenv("WANDB_MODE", "disabled")
    shutil.copy(WANDB / "wandb_train.py", tmp / "wandb_train.py")
    out = tmp / "sweep.sweeper.yaml"
    assert CliRunner().invoke(cli, ["import", "wandb", str(WANDB / "wandb_program.yaml"),
                                    "-o", str(out)]).exit_code == 0
    result = CliRunner().invoke(cli, ["run", str(out), "--storage", sqlite_url,
                                      "--set", "trials=1"])
    assert result.exit_code == 0, result.output
    (trial, *_) = load_sweep(open_storage(sqlite_url), "wandb-program").study().get_trials()
    assert trial.state == TrialState.COMPLETE and sorted(trial.intermediate_values) == \
        [0, 1, 2, 3, 4, 5]
    assert not list(tmp.glob("wandb/offline-run-*"))
