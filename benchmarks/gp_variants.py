"""Measured and not chosen (issue 29, ``python -m benchmarks.parallel --variants``): other ways
for a GP to account for running trials, against sweeper's choice, local penalisation
(``sweeper._optuna_compat._gp``; docs/parallel.md has the figures).

* ``optuna_qlogei``: Optuna 5's GPSampler as it is. With trials running it maximises the q-batch
  expected improvement (``qLogEI``): Monte Carlo fantasies of the running trials' outcomes.
* ``constant_liar_best`` / ``constant_liar_worst``: the classic constant liar of Ginsbourger et
  al. (2010): the GP is fitted on the finished trials plus the running ones valued at the lie
  (the best value so far, CL-min, or the worst, CL-max), then the plain expected improvement
  (``LogEI``) is maximised.
* ``kriging_believer``: the same, each running trial valued at the posterior mean of the GP of
  the finished trials (Ginsbourger et al.'s Kriging believer).

They live in benchmarks/, not in sweeper, because the measurement chose otherwise. They use
Optuna's private names (GPSampler's ``_sample_relative_impl``, the part of ``sample_relative``
after the trials are read; its model fit; the study's trial reads; the key under which
GPSampler publishes a running trial's params), as sweeper's code may only in
sweeper/_optuna_compat/.
"""
# ruff: noqa: SLF001

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import GPSampler
from optuna.samplers._gp.sampler import _RELATIVE_PARAMS_KEY, _SYSTEM_ATTR_MAX_LENGTH
from optuna.samplers._gp.sampler import _get_params as _running_params
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

LIES = ("best", "worst")


class ConstantLiarGPSampler(GPSampler):
    """GPSampler whose running trials enter the model valued at ``lie`` (single objective)."""

    def __init__(self, *, lie: str = "best", **kwargs: Any) -> None:
        if lie not in LIES:
            raise ValueError(f"lie must be one of {LIES}, not {lie!r}")
        super().__init__(**kwargs)
        self._lie = lie

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if search_space == {} or study._is_multi_objective():
            return super().sample_relative(study, trial, search_space)
        trials = study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                            TrialState.RUNNING),
                                   use_cache=False)
        completed = [t for t in trials if t.state == TrialState.COMPLETE]
        if len(completed) < self._n_startup_trials:
            return {}
        running = [t for t in trials if t.state == TrialState.RUNNING
                   and t.number != trial.number
                   and search_space.keys() <= _running_params(t).keys()]
        import torch

        lies = self.lie_value(study, completed, running, search_space)
        lied = [optuna.trial.create_trial(
            params={k: _running_params(t)[k] for k in search_space},
            distributions=search_space, value=lie) for t, lie in zip(running, lies, strict=True)]

        with torch.device("cpu"):
            params: dict[str, Any] = self._sample_relative_impl(study, completed + lied, [],
                                                                 search_space)
        publish_relative_params(study, trial, params)
        return params

    def lie_value(self, study: optuna.Study, completed: list[FrozenTrial],
                  running: list[FrozenTrial], search_space: dict[str, BaseDistribution]
                  ) -> list[float]:
        """The value each running trial enters the model with."""
        values = [float(t.values[0]) for t in completed]
        best_is_min = study.direction == StudyDirection.MINIMIZE
        lie = min(values) if (self._lie == "best") == best_is_min else max(values)
        return [lie] * len(running)


class KrigingBelieverGPSampler(ConstantLiarGPSampler):
    """The constant liar whose lie for each running trial is the posterior mean there of the
    GP fitted on the finished trials (single objective)."""

    def lie_value(self, study: optuna.Study, completed: list[FrozenTrial],
                  running: list[FrozenTrial], search_space: dict[str, BaseDistribution]
                  ) -> list[float]:
        import torch
        from optuna._gp import gp
        from optuna._gp.search_space import SearchSpace
        from optuna.samplers._gp.sampler import _standardize_values

        if not running:
            return []
        space = SearchSpace(search_space)
        sign = -1.0 if study.direction == StudyDirection.MINIMIZE else 1.0
        scores, mean, std = _standardize_values(
            sign * np.array([[float(t.values[0])] for t in completed]))
        gpr = gp.fit_kernel_params(
            X=space.get_normalized_params(completed), Y=scores[:, 0],
            is_categorical=space.is_categorical, log_prior=self._log_prior,
            minimum_noise=self._minimum_noise, gpr_cache=None,
            deterministic_objective=self._deterministic)
        at = space.get_normalized_params(running, [_running_params(t) for t in running])
        with torch.no_grad():
            posterior_mean, _ = gpr.posterior(torch.from_numpy(at))
        return [float(sign * (m * std[0] + mean[0])) for m in posterior_mean.numpy()]


#: Variant name -> the sampler a runner of that variant builds from its seed.
VARIANTS: dict[str, Callable[[int], GPSampler]] = {
    "optuna_qlogei": lambda seed: GPSampler(seed=seed),
    "constant_liar_best": lambda seed: ConstantLiarGPSampler(seed=seed, lie="best"),
    "constant_liar_worst": lambda seed: ConstantLiarGPSampler(seed=seed, lie="worst"),
    "kriging_believer": lambda seed: KrigingBelieverGPSampler(seed=seed),
}


def publish_relative_params(study: optuna.Study, trial: FrozenTrial,
                            params: dict[str, Any]) -> None:
    """What GPSampler writes so that other workers see this trial's params while it runs."""
    if not params:
        return
    text = json.dumps(params)
    for i in range(0, len(text), _SYSTEM_ATTR_MAX_LENGTH):
        study._storage.set_trial_system_attr(
            trial._trial_id, f"{_RELATIVE_PARAMS_KEY}:{i // _SYSTEM_ATTR_MAX_LENGTH}",
            text[i:i + _SYSTEM_ATTR_MAX_LENGTH])
