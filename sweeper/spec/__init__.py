"""YAML spec -> frozen dataclasses. All validation lives here; no I/O beyond reading the file.

Every error is a :class:`~sweeper.errors.SpecError` naming the file, the line (when the YAML
node is known) and the dotted field, so a typo is one clear line and never a traceback.

The modules: ``model`` and ``k8s_model`` (the dataclasses, the normalised form and its hash),
``stored`` (a stored normalised form read back without validating it again), ``registry``
(pruner and sampler names -> Optuna classes, shared with the trial runner), ``grid`` and
``seeds`` (a grid's points and size, the seed of index i), ``paths`` (relative paths resolve
against the spec file's directory), ``yamldoc`` (the line-tracking loader), ``checks`` (the
validation building blocks), ``k8s_section`` (the ``kubernetes`` section's validation), all
three also used by the importers, and the private ``_parameters``, ``_validate`` and a module
per other section.
"""

from __future__ import annotations

from collections.abc import Mapping

from sweeper.spec._artifacts import ARTIFACT_KEYS
from sweeper.spec._budget import BUDGET_KEYS, COST_KEYS
from sweeper.spec._data import DATA_KEYS
from sweeper.spec._metrics import METRICS_KEYS
from sweeper.spec._parameters import PARAM_KEYS
from sweeper.spec._scheduler import SCHEDULER_KEYS, durable_checkpoints_error
from sweeper.spec._stop import STOP_KEYS
from sweeper.spec._validate import (
    RESOURCE_KEYS,
    TOP_KEYS,
    TRIAL_KEYS,
    field_error,
    load_spec,
    parse_spec,
    parse_spec_dict,
)
from sweeper.spec.checks import command_placeholders, parse_duration
from sweeper.spec.k8s_model import KubernetesSpec, Volume
from sweeper.spec.k8s_section import K8S_KEYS, TOLERATION_KEYS, VOLUME_KEYS
from sweeper.spec.model import (
    ARTIFACT_STORES,
    BUDGET_UNITS,
    DIRECTIONS,
    MAX_INDEXES,
    MAX_NAME_LENGTH,
    METHODS,
    STORAGE_SCHEMES,
    ArtifactsSpec,
    BudgetSpec,
    CostSpec,
    DataSpec,
    MetricsSpec,
    Objective,
    Parameter,
    Pruner,
    Resources,
    Scalar,
    SchedulerSpec,
    StopSpec,
    SweepSpec,
    TrialSpec,
)
from sweeper.spec.registry import PRUNERS
from sweeper.spec.stored import load_stored
from sweeper.spec.yamldoc import Path_

#: Every key a spec accepts, by section: a dotted path ("" the top level, ``NAME`` a
#: parameter's name, ``[]`` the items of a list). The validator checks these; the
#: documentation's spec reference lists them (docs/gen_reference.py).
SPEC_KEYS: Mapping[str, tuple[str, ...]] = {
    "": TOP_KEYS,
    "trial": TRIAL_KEYS,
    "trial.resources": RESOURCE_KEYS,
    "trial.metrics": METRICS_KEYS,
    "parameters.NAME": PARAM_KEYS,
    "stop": STOP_KEYS,
    "scheduler": SCHEDULER_KEYS,
    "budget": BUDGET_KEYS,
    "cost": COST_KEYS,
    "artifacts": ARTIFACT_KEYS,
    "data": DATA_KEYS,
    "kubernetes": K8S_KEYS,
    "kubernetes.volumes[]": VOLUME_KEYS,
    "kubernetes.tolerations[]": TOLERATION_KEYS,
}

__all__ = [
    "ARTIFACT_STORES",
    "BUDGET_UNITS",
    "DIRECTIONS",
    "MAX_INDEXES",
    "MAX_NAME_LENGTH",
    "METHODS",
    "PRUNERS",
    "SPEC_KEYS",
    "STORAGE_SCHEMES",
    "ArtifactsSpec",
    "BudgetSpec",
    "CostSpec",
    "DataSpec",
    "KubernetesSpec",
    "MetricsSpec",
    "Objective",
    "Parameter",
    "Path_",
    "Pruner",
    "Resources",
    "Scalar",
    "SchedulerSpec",
    "StopSpec",
    "SweepSpec",
    "TrialSpec",
    "Volume",
    "command_placeholders",
    "durable_checkpoints_error",
    "field_error",
    "load_spec",
    "load_stored",
    "parse_duration",
    "parse_spec",
    "parse_spec_dict",
]
