"""A trial's parameters as the runner sets them: suggested in dependency order (define-by-run),
a planned trial's enqueued values with their distributions, and the provenance every trial
records."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from sweeper._optuna_compat import fixed_params_of
from sweeper.protocol import CODE_ATTR, CODE_VERSION_ATTR, ENV_CODE, SPEC_HASH_ATTR
from sweeper.space import distribution
from sweeper.spec import Parameter, SweepSpec
from sweeper.spec.conditions import dependency_order, is_active
from trial_runner.provenance import process_code_version


def suggest_active(trial: optuna.Trial, params: Sequence[Parameter]) -> dict[str, Any]:
    """Suggest the parameters a trial has, parents before the parameters whose ``when:``
    names them, so Optuna's samplers see a define-by-run space (TPE's ``group`` learns which
    parameters occur together). Planned trials get their enqueued values back."""
    values: dict[str, Any] = {}
    for p in dependency_order(params):
        if is_active(p, values):
            values[p.name] = suggest(trial, p)
    return values


def planned(trial: optuna.Trial, params: Sequence[Parameter]
            ) -> dict[str, tuple[Any, BaseDistribution]]:
    """The values ``suggest_active`` would return for a planned trial (its enqueued ones, for
    the parameters it has), with their distributions: to be written in one go."""
    fixed = fixed_params_of(trial)
    values: dict[str, Any] = {}
    out: dict[str, tuple[Any, BaseDistribution]] = {}
    for p in dependency_order(params):
        if p.name in fixed and is_active(p, values):
            values[p.name] = fixed[p.name]
            out[p.name] = (fixed[p.name], distribution(p))
    return out


def provenance(spec: SweepSpec) -> dict[str, Any]:
    """What every trial records of what ran it: the spec's hash and the code's version."""
    attrs = {SPEC_HASH_ATTR: spec.spec_hash, CODE_VERSION_ATTR: process_code_version()}
    snapshot = os.environ.get(ENV_CODE)
    if snapshot:
        attrs[CODE_ATTR] = snapshot
    return attrs


def suggest(trial: optuna.Trial, p: Parameter) -> Any:
    d = distribution(p)
    if isinstance(d, CategoricalDistribution):
        return trial.suggest_categorical(p.name, d.choices)
    if isinstance(d, IntDistribution):
        return trial.suggest_int(p.name, d.low, d.high, step=d.step, log=d.log)
    assert isinstance(d, FloatDistribution)
    return trial.suggest_float(p.name, d.low, d.high, step=d.step, log=d.log)
