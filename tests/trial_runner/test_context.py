"""TrialContext directly, on a real Optuna study in a temporary SQLite file: reporting,
pruning, checkpoints, result checking and device detection."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from sweeper.protocol import DEVICE_ATTR, HISTORY_ATTR, RESUMED_ATTR
from sweeper.study import open_storage
from trial_runner.context import InvalidResult, TrialContext, objective_values


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ctx.db'}"


def _study(tmp_path: Path, directions: tuple[str, ...] = ("minimize",),
           pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study:
    # sweeper's own storage, as a runner's trial has (its writes go through the index store)
    return optuna.create_study(storage=open_storage(_url(tmp_path)),
                               directions=list(directions),
                               pruner=pruner or optuna.pruners.NopPruner())


def _ctx(study: optuna.Study, tmp_path: Path, metrics: tuple[str, ...] = ("loss",),
         attempt: int = 0) -> TrialContext:
    trial = study.ask()
    return TrialContext(params={"lr": 0.1}, index=3, trial_number=trial.number, attempt=attempt,
                        checkpoint_dir=tmp_path / "ckpt" / "index-3", trial=trial,
                        objective_metrics=metrics)


def _stored(study: optuna.Study, ctx: TrialContext) -> optuna.trial.FrozenTrial:
    """The trial as the database has it (read through a new storage: no in-process cache)."""
    path = ctx.checkpoint_dir.parents[1]  # tmp_path: where _study put the database
    fresh = optuna.load_study(study_name=study.study_name, storage=_url(path))
    return fresh.trials[ctx.trial_number]


# --------------------------------------------------------------------------- report


def test_report_writes_the_objective_and_keeps_the_other_metrics(tmp_path: Path) -> None:
    study = _study(tmp_path)
    ctx = _ctx(study, tmp_path)
    ctx.report(0, loss=2.5, acc=0.5)
    ctx.report(1, loss=1.5, acc=0.75, lr_now=np.float32(0.25))  # numpy scalars are numbers
    t = _stored(study, ctx)
    assert t.intermediate_values == {0: 2.5, 1: 1.5}
    assert t.user_attrs["acc"] == 0.75 and t.user_attrs["lr_now"] == 0.25  # the latest value
    assert t.user_attrs[HISTORY_ATTR] == {"loss": [[0, 2.5], [1, 1.5]],
                                          "acc": [[0, 0.5], [1, 0.75]], "lr_now": [[1, 0.25]]}


def test_a_non_finite_objective_is_kept_in_history_but_not_reported(tmp_path: Path) -> None:
    study = _study(tmp_path)
    ctx = _ctx(study, tmp_path)
    ctx.report(0, loss=1.0, acc=0.5)
    ctx.report(1, loss=float("nan"), acc=float("inf"))
    t = _stored(study, ctx)
    assert t.intermediate_values == {0: 1.0}
    assert t.user_attrs["acc"] == 0.5  # the last finite value; JSON has no inf
    history = t.user_attrs[HISTORY_ATTR]
    assert history["loss"][0] == [0, 1.0] and math.isnan(history["loss"][1][1])
    assert history["acc"][1] == [1, math.inf]


def test_report_without_the_objective_metric_reports_no_intermediate_value(
        tmp_path: Path) -> None:
    study = _study(tmp_path)
    ctx = _ctx(study, tmp_path)
    ctx.report(0, acc=0.5)
    t = _stored(study, ctx)
    assert t.intermediate_values == {} and t.user_attrs["acc"] == 0.5


@pytest.mark.parametrize("step", [-1, 1.5, "2", True])
def test_report_rejects_a_bad_step(tmp_path: Path, step: Any) -> None:
    ctx = _ctx(_study(tmp_path), tmp_path)
    with pytest.raises(ValueError, match="step must be a non-negative int"):
        ctx.report(step, loss=1.0)


def test_report_rejects_a_metric_that_is_not_a_number(tmp_path: Path) -> None:
    study = _study(tmp_path)
    ctx = _ctx(study, tmp_path)
    with pytest.raises(ValueError, match=r"metric acc='high' is not a number"):
        ctx.report(0, loss=1.0, acc="high")
    assert _stored(study, ctx).intermediate_values == {}  # nothing half-written


def test_multi_objective_report_keeps_metrics_and_never_prunes(tmp_path: Path) -> None:
    study = _study(tmp_path, ("minimize", "maximize"))
    ctx = _ctx(study, tmp_path, ("loss", "acc"))
    ctx.report(0, loss=1.0, acc=0.5)  # Optuna refuses trial.report in multi-objective studies
    t = _stored(study, ctx)
    assert t.intermediate_values == {}
    assert (t.user_attrs["loss"], t.user_attrs["acc"]) == (1.0, 0.5)
    assert ctx.should_prune() is False


# --------------------------------------------------------------------------- pruning


def test_should_prune_follows_the_pruner(tmp_path: Path) -> None:
    study = _study(tmp_path, pruner=optuna.pruners.ThresholdPruner(upper=1.0))
    ctx = _ctx(study, tmp_path)
    ctx.report(0, loss=0.5)
    assert ctx.should_prune() is False
    ctx.report(1, loss=3.0)
    assert ctx.should_prune() is True


def test_should_prune_with_the_median_pruner(tmp_path: Path) -> None:
    study = _study(tmp_path, pruner=optuna.pruners.MedianPruner(n_startup_trials=2))
    for final in (1.0, 2.0):
        done = study.ask()
        done.report(final, 0)
        study.tell(done, final)
    good = _ctx(study, tmp_path)
    good.report(0, loss=0.5)
    bad = _ctx(study, tmp_path)
    bad.report(0, loss=10.0)
    assert (good.should_prune(), bad.should_prune()) == (False, True)


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_the_latest_wins(tmp_path: Path) -> None:
    study = _study(tmp_path)
    ctx = _ctx(study, tmp_path)
    assert ctx.load_checkpoint() is None
    ctx.save_checkpoint({"weights": [1, 2]}, step=1)
    ctx.save_checkpoint({"weights": [3, 4]}, step=2)
    # what a retry sees: a new attempt (another trial) of the same index, same directory
    retry = _ctx(study, tmp_path, attempt=1)
    assert retry.load_checkpoint() == ({"weights": [3, 4]}, 2)
    assert retry.resumed_from_step == 2
    assert _stored(study, retry).user_attrs[RESUMED_ATTR] == 2
    marker = json.loads((ctx.checkpoint_dir / "checkpoint.json").read_text())
    assert marker == {"step": 2, "trial_number": ctx.trial_number, "attempt": 0}
    # the temporary file each save writes first does not stay behind
    assert sorted(p.name for p in ctx.checkpoint_dir.iterdir()) == \
        ["checkpoint.json", "checkpoint.pt"]


def test_a_save_that_fails_halfway_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    ctx = _ctx(_study(tmp_path), tmp_path)
    ctx.save_checkpoint({"epoch": 1, "blob": b"x" * 100_000}, step=1)
    # pickling fails after part of the payload (the blob) is written: a "killed" save
    with pytest.raises(Exception, match=r"(?i)pickle"):
        ctx.save_checkpoint({"blob": b"y" * 100_000, "fn": lambda: None}, step=2)
    state, step = ctx.load_checkpoint() or (None, None)
    assert step == 1 and state is not None and state["epoch"] == 1
    assert json.loads((ctx.checkpoint_dir / "checkpoint.json").read_text())["step"] == 1


def test_a_leftover_temporary_file_is_never_read(tmp_path: Path) -> None:
    ctx = _ctx(_study(tmp_path), tmp_path)
    ctx.save_checkpoint("good", step=4)
    # another process was killed while writing its temporary file
    (ctx.checkpoint_dir / "checkpoint.tmp99999").write_bytes(b"\x80\x04garbage-half-written")
    assert ctx.load_checkpoint() == ("good", 4)


# --------------------------------------------------------------------------- results


@pytest.mark.parametrize(("result", "metrics", "values", "extra"), [
    (0.25, ("loss",), [0.25], {}),
    (3, ("loss",), [3.0], {}),
    (np.float64(0.5), ("loss",), [0.5], {}),
    ({"loss": 0.1, "acc": 0.9}, ("loss",), [0.1], {"acc": 0.9}),
    ({"acc": 0.9, "loss": 0.1, "n": 5}, ("loss", "acc"), [0.1, 0.9], {"n": 5}),  # spec order
    ((0.1, 0.9), ("loss", "acc"), [0.1, 0.9], {}),
    ([0.1, 0.9], ("loss", "acc"), [0.1, 0.9], {}),
])
def test_objective_values_accepted(result: Any, metrics: tuple[str, ...], values: list[float],
                                   extra: dict[str, Any]) -> None:
    got, got_extra = objective_values(result, metrics)
    assert got == values and got_extra == extra
    assert all(type(v) is float for v in got)


@pytest.mark.parametrize(("result", "metrics", "reason"), [
    ({"acc": 0.9}, ("loss",), "lack the objective metric 'loss'"),
    ({"loss": 0.1}, ("loss", "acc"), "lack the objective metric 'acc'"),
    (float("nan"), ("loss",), "'loss' is nan (not finite)"),
    (float("-inf"), ("loss",), "'loss' is -inf (not finite)"),
    ({"loss": float("nan")}, ("loss",), "not finite"),
    (None, ("loss",), "returned None for 'loss'"),
    ("0.5", ("loss",), "'loss' must be a number, got str"),
    (True, ("loss",), "must be a number, got bool"),
    ((0.1,), ("loss",), "must be a number, got tuple"),
    (0.5, ("loss", "acc"), "must return a dict with ['loss', 'acc'], got float"),
    ((0.1, 0.2, 0.3), ("loss", "acc"), "got tuple"),
])
def test_objective_values_rejected(result: Any, metrics: tuple[str, ...], reason: str) -> None:
    with pytest.raises(InvalidResult) as e:
        objective_values(result, metrics)
    assert reason in str(e.value)


# --------------------------------------------------------------------------- device


def test_device_is_cpu_without_cuda_and_recorded_once(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    calls: list[int] = []

    def no_cuda() -> bool:
        calls.append(1)
        return False

    monkeypatch.setattr(torch.cuda, "is_available", no_cuda)
    study = _study(tmp_path)
    ctx = _ctx(study, tmp_path)
    assert ctx.device == "cpu" and ctx.device == "cpu"
    assert len(calls) == 1  # detected once per trial
    assert _stored(study, ctx).user_attrs[DEVICE_ATTR] == "cpu"


def test_device_is_cuda_with_the_gpu_name(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H100 80GB HBM3")
    study = _study(tmp_path)
    ctx = _ctx(study, tmp_path)
    assert ctx.device == "cuda"
    assert _stored(study, ctx).user_attrs[DEVICE_ATTR] == "cuda:NVIDIA H100 80GB HBM3"


def test_device_is_cpu_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    ctx = _ctx(_study(tmp_path), tmp_path)
    assert ctx.device == "cpu"

