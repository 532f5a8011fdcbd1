"""The digits example resumed from a checkpoint: it goes on under the params it has now (PBT
copies a donor's checkpoint and perturbs its lr), not the ones saved in the optimizer's state."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

from trial_runner.examples.digits import train


class _Ctx:
    """The part of the trial context ``train`` uses; checkpoints in memory."""

    def __init__(self, params: dict[str, Any], resume: tuple[Any, int] | None = None) -> None:
        self.params, self.index, self.device = params, 0, "cpu"
        self.resume = resume
        self.reports: list[tuple[int, float]] = []
        self.saved: tuple[Any, int] | None = None

    def load_checkpoint(self) -> tuple[Any, int] | None:
        return self.resume

    def save_checkpoint(self, state: Any, step: int) -> None:
        import copy

        self.saved = (copy.deepcopy(state), step)

    def report(self, step: int, **metrics: float) -> None:
        self.reports.append((step, metrics["val_loss"]))

    def should_prune(self) -> bool:
        return False

    def set(self, key: str, value: Any) -> None:
        pass

    def autocast(self) -> Any:
        return contextlib.nullcontext()

    def grad_scaler(self) -> Any:
        return torch.amp.GradScaler("cuda", enabled=False)


BASE = {"epochs": 2, "hidden": 16, "optimizer": "sgd", "save_model": False, "threads": 1}


def test_a_resumed_trial_trains_with_its_current_learning_rate() -> None:
    donor = _Ctx({**BASE, "lr": 0.1})
    train(donor)  # type: ignore[arg-type]
    assert donor.saved is not None and donor.saved[1] == 1
    # Resumed at lr 0 (a perturbed lr taken to the limit): the weights must not move, so the
    # next epoch's validation loss is the checkpoint's. With the saved lr (0.1) they would.
    frozen = _Ctx({**BASE, "epochs": 3, "lr": 0.0}, resume=donor.saved)
    train(frozen)  # type: ignore[arg-type]
    assert [s for s, _ in frozen.reports] == [2]
    assert frozen.reports[0][1] == pytest.approx(donor.reports[-1][1], abs=1e-7)
    moving = _Ctx({**BASE, "epochs": 3, "lr": 0.1}, resume=donor.saved)
    train(moving)  # type: ignore[arg-type]
    assert moving.reports[0][1] != pytest.approx(donor.reports[-1][1], abs=1e-4)
