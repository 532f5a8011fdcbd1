"""Measured and not chosen (issue 29, ``python -m benchmarks.parallel --variants``): a
constant-liar GP, Optuna 5's GPSampler with its running trials entered into the model as
finished ones, each with a lie for a value (issue 29's option (a), measured against Optuna's own
pending-point handling, ``qLogEI``).

Optuna 5's GPSampler already accounts for running trials: with any running, it maximises the
q-batch expected improvement (``qLogEI``) over the pending points by Monte Carlo. This sampler
instead fits the GP on the finished trials plus the running ones valued at the lie and
maximises the plain expected improvement (``LogEI``): the classic constant liar of Ginsbourger
et al. (2010). ``lie="best"`` (the best value so far, CL-min) or ``"worst"`` (CL-max).

It lives in benchmarks/, not in sweeper, because the measurement chose Optuna's own handling
(docs/parallel.md). It uses Optuna's private names (GPSampler's ``_sample_relative_impl``, the
part of ``sample_relative`` after the trials are read; the study's trial reads; the key under
which GPSampler publishes a running trial's params), as sweeper's code may only in
sweeper/_optuna_compat/.
"""
# ruff: noqa: SLF001

from __future__ import annotations

import json
from typing import Any

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
        lied = [optuna.trial.create_trial(
            params={k: _running_params(t)[k] for k in search_space},
            distributions=search_space, value=self.lie_value(study, completed))
            for t in running]
        import torch

        with torch.device("cpu"):
            params: dict[str, Any] = self._sample_relative_impl(study, completed + lied, [],
                                                                 search_space)
        publish_relative_params(study, trial, params)
        return params

    def lie_value(self, study: optuna.Study, completed: list[FrozenTrial]) -> float:
        values = [float(t.values[0]) for t in completed]
        best_is_min = study.direction == StudyDirection.MINIMIZE
        return min(values) if (self._lie == "best") == best_is_min else max(values)


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
