"""YAML spec -> frozen dataclasses. All validation lives here; no I/O beyond reading the file.

Every error is a :class:`~sweeper.errors.SpecError` naming the file, the line (when the YAML
node is known) and the dotted field, so a typo is one clear line and never a traceback.

The modules: ``model`` (the dataclasses, the normalised form and its hash), ``registry``
(pruner and sampler names -> Optuna classes, shared with the trial runner), ``paths``
(relative paths resolve against the spec file's directory), and the private
``_yaml`` (line-tracking loader), ``_primitives``, ``_parameters`` and ``_validate``.
"""

from __future__ import annotations

from sweeper.spec._primitives import command_placeholders, parse_duration
from sweeper.spec._validate import load_spec, parse_spec, parse_spec_dict
from sweeper.spec._yaml import Path_
from sweeper.spec.model import (
    ARTIFACT_STORES,
    DIRECTIONS,
    MAX_INDEXES,
    MAX_NAME_LENGTH,
    METHODS,
    STORAGE_SCHEMES,
    ArtifactsSpec,
    DataSpec,
    KubernetesSpec,
    MetricsSpec,
    Objective,
    Parameter,
    Pruner,
    Resources,
    Scalar,
    StopSpec,
    SweepSpec,
    TrialSpec,
    Volume,
)
from sweeper.spec.registry import PRUNERS

__all__ = [
    "ARTIFACT_STORES",
    "DIRECTIONS",
    "MAX_INDEXES",
    "MAX_NAME_LENGTH",
    "METHODS",
    "PRUNERS",
    "STORAGE_SCHEMES",
    "ArtifactsSpec",
    "DataSpec",
    "KubernetesSpec",
    "MetricsSpec",
    "Objective",
    "Parameter",
    "Path_",
    "Pruner",
    "Resources",
    "Scalar",
    "StopSpec",
    "SweepSpec",
    "TrialSpec",
    "Volume",
    "command_placeholders",
    "load_spec",
    "parse_duration",
    "parse_spec",
    "parse_spec_dict",
]
