"""The local penalty of ``method: gp``'s acquisition (see ``sweeper._optuna_compat._gp``): kept
apart because it needs torch, which only a GP's ask should load (``sweeper validate`` builds the
sampler, not its acquisition)."""

from __future__ import annotations

import numpy as np
import torch
from optuna._gp import acqf as acqf_module
from optuna._gp.gp import GPRegressor
from optuna._gp.search_space import SearchSpace

#: Points of the space on which ``L`` is estimated, and their seed (an ask is reproducible).
LIPSCHITZ_POINTS = 1024
LIPSCHITZ_SEED = 0
#: Floors that keep the penalty finite at a running point the model is sure of.
_MIN_SIGMA = 1e-9
_MIN_LIPSCHITZ = 1e-7


def _scaled_distance(x: torch.Tensor, points: torch.Tensor, length_scales: torch.Tensor,
                     is_categorical: torch.Tensor) -> torch.Tensor:
    """Distance from each ``x`` (..., d) to each of ``points`` (n, d) in the kernel's metric:
    shape (..., n)."""
    diff = (x.unsqueeze(-2) - points).square()
    if bool(is_categorical.any()):
        diff[..., is_categorical] = (diff[..., is_categorical] > 0.0).to(diff.dtype)
    return (diff / length_scales.square()).sum(-1).add(1e-18).sqrt()


def lipschitz_constant(gpr: GPRegressor, search_space: SearchSpace) -> float:
    """The largest gradient norm of ``gpr``'s posterior mean over the continuous coordinates,
    in the kernel's metric, on :data:`LIPSCHITZ_POINTS` points of ``search_space``."""
    points = torch.from_numpy(search_space.sample_normalized_params(
        LIPSCHITZ_POINTS, np.random.RandomState(LIPSCHITZ_SEED))).requires_grad_(True)
    mean, _ = gpr.posterior(points)
    (grad,) = torch.autograd.grad(mean.sum(), points)
    continuous = torch.from_numpy(~search_space.is_categorical)
    scaled = grad[:, continuous] * torch.from_numpy(gpr.length_scales)[continuous]
    return max(float(scaled.norm(dim=-1).max()) if scaled.numel() else 0.0, _MIN_LIPSCHITZ)


class PenalisedLogEI(acqf_module.BaseAcquisitionFunc):
    """log EI(x) + sum over running points j of log phi_j(x) (see the module's docstring)."""

    def __init__(self, gpr: GPRegressor, search_space: SearchSpace, threshold: float,
                 running: torch.Tensor) -> None:
        super().__init__(gpr.length_scales, search_space)
        self._log_ei = acqf_module.LogEI(gpr=gpr, search_space=search_space,
                                         threshold=threshold)
        with torch.no_grad():
            mean, var = gpr.posterior(running)
        self._running = running
        self._offset = threshold - mean
        self._sigma = var.sqrt().clamp_min(_MIN_SIGMA)
        self._length_scales = torch.from_numpy(gpr.length_scales)
        self._is_categorical = torch.from_numpy(search_space.is_categorical)
        self.lipschitz = lipschitz_constant(gpr, search_space)

    def log_penalty(self, x: torch.Tensor) -> torch.Tensor:
        distance = _scaled_distance(x, self._running, self._length_scales, self._is_categorical)
        z = (self.lipschitz * distance + self._offset) / self._sigma
        return torch.special.log_ndtr(z).sum(-1)

    def eval_acqf(self, x: torch.Tensor) -> torch.Tensor:
        return self._log_ei.eval_acqf(x) + self.log_penalty(x)
