"""The spec as frozen dataclasses, and its normalised form (the sweep record) and hash.

Pure data: no YAML, no validation (see ``_validate``) and no Optuna; every other module of
sweeper reads these classes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

METHODS = ("grid", "random", "tpe")
DIRECTIONS = ("minimize", "maximize")
STORAGE_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg2", "grpc")
ARTIFACT_STORES = ("filesystem", "s3")
#: The largest number of indexes one sweep may have: enqueueing is bulk, but a plan
#: of more than this is almost certainly a mistake (and a multi-GB study).
MAX_INDEXES = 100_000
#: Kubernetes names Jobs after the sweep and appends suffixes (``-r3`` for resumes,
#: pod suffixes), so the sweep name must leave room inside a 63-character label.
MAX_NAME_LENGTH = 50

Scalar = str | int | float | bool | None


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: Literal["minimize", "maximize"]


@dataclass(frozen=True)
class Parameter:
    """One search dimension. ``values`` (if set) makes it a finite list, sampled as categorical."""

    name: str
    type: Literal["float", "int", "categorical"]
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: tuple[Scalar, ...] | None = None
    values: tuple[Scalar, ...] | None = None

    @property
    def is_finite(self) -> bool:
        return (
            self.values is not None
            or self.choices is not None
            or self.type == "int"
            or self.step is not None
        )


@dataclass(frozen=True)
class Pruner:
    type: str = "none"
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Resources:
    gpu: int = 0
    cpu: str | None = None
    memory: str | None = None


@dataclass(frozen=True)
class TrialSpec:
    entrypoint: str | None = None
    command: tuple[str, ...] | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    retries: int = 1
    timeout: float | None = None
    resources: Resources = field(default_factory=Resources)


@dataclass(frozen=True)
class KubernetesSpec:
    image: str = "sweeper-trial-runner:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    namespace: str = "sweeper"
    storage_secret: str = "sweeper-db"
    storage_secret_key: str = "url"
    service_account: str = "sweeper-trial"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    indexes_per_pod: int = 1
    active_deadline: float | None = None
    ttl_after_finished: float = 86400.0
    #: host:port of a `sweeper proxy` the pods use instead of the database (no Secret then).
    storage_proxy: str | None = None


@dataclass(frozen=True)
class ArtifactsSpec:
    """Where trials' files (checkpoints, final models) go, as Optuna artifacts.

    ``filesystem`` with no ``path`` is the default store next to the study (see
    ``sweeper.artifacts.default_artifact_dir``). Credentials never live here: S3 reads
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` from the environment (in Kubernetes from the
    Secret named by ``credentials_secret``). Not part of the spec hash: moving artifacts does
    not change what the trials are."""

    store: Literal["filesystem", "s3"] = "filesystem"
    path: str | None = None
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    credentials_secret: str | None = None


@dataclass(frozen=True)
class SweepSpec:
    name: str
    method: Literal["grid", "random", "tpe"]
    objectives: tuple[Objective, ...]
    trials: int
    parameters: tuple[Parameter, ...]
    trial: TrialSpec
    parallelism: int = 1
    seed: int = 0
    sampler: Mapping[str, Any] = field(default_factory=dict)
    pruner: Pruner = field(default_factory=Pruner)
    storage: str | None = None
    description: str | None = None
    kubernetes: KubernetesSpec = field(default_factory=KubernetesSpec)
    artifacts: ArtifactsSpec = field(default_factory=ArtifactsSpec)
    #: Where the spec came from (a path or "<study NAME>"), for messages; not part of the sweep.
    source: str = field(default="<spec>", compare=False)

    @property
    def is_adaptive(self) -> bool:
        """Adaptive methods ask the sampler at runner start; nothing is enqueued."""
        return self.method == "tpe"

    @property
    def is_multi_objective(self) -> bool:
        return len(self.objectives) > 1

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec: every default filled in; ``parse_spec_dict`` reads it back."""
        return _spec_to_dict(self)

    @property
    def spec_hash(self) -> str:
        """Hash of what defines the trials. Parallelism, storage, retries, timeout, resources and
        Kubernetes placement may change between runs of the same sweep; nothing else may."""
        d = self.to_dict()
        identity = {k: d[k] for k in ("name", "method", "objective", "trials", "seed", "sampler",
                                      "pruner", "parameters")}
        identity["trial"] = {k: d["trial"].get(k) for k in ("entrypoint", "command", "fixed")}
        # sort_keys below loses the YAML order, which decides grid point i and random set i.
        identity["parameter_order"] = list(d["parameters"])
        blob = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def with_overrides(self, **changes: Any) -> SweepSpec:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})



# --------------------------------------------------------------------------- normalised form


def _spec_to_dict(s: SweepSpec) -> dict[str, Any]:
    def param(p: Parameter) -> dict[str, Any]:
        if p.values is not None:
            return {"type": p.type, "values": list(p.values)}
        if p.choices is not None:
            return {"type": "categorical", "choices": list(p.choices)}
        d: dict[str, Any] = {"type": p.type, "low": p.low, "high": p.high, "log": p.log}
        if p.step is not None:
            d["step"] = p.step
        return d

    t = s.trial
    trial: dict[str, Any] = {"entrypoint": t.entrypoint,
                             "command": list(t.command) if t.command else None,
                             "fixed": dict(t.fixed), "retries": t.retries, "timeout": t.timeout,
                             "resources": {"gpu": t.resources.gpu, "cpu": t.resources.cpu,
                                           "memory": t.resources.memory}}
    k = s.kubernetes
    kube = {"image": k.image, "image_pull_policy": k.image_pull_policy, "namespace": k.namespace,
            "storage_secret": k.storage_secret, "storage_secret_key": k.storage_secret_key,
            "service_account": k.service_account, "node_selector": dict(k.node_selector),
            "tolerations": [dict(x) for x in k.tolerations],
            "image_pull_secrets": list(k.image_pull_secrets), "env": dict(k.env),
            "indexes_per_pod": k.indexes_per_pod, "active_deadline": k.active_deadline,
            "ttl_after_finished": k.ttl_after_finished, "storage_proxy": k.storage_proxy}
    objective: Any = [{"metric": o.metric, "direction": o.direction} for o in s.objectives]
    return {
        "name": s.name, "description": s.description, "method": s.method,
        "objective": objective[0] if len(objective) == 1 else objective,
        "trials": s.trials, "parallelism": s.parallelism, "seed": s.seed,
        "sampler": dict(s.sampler),
        "pruner": {"type": s.pruner.type, **dict(s.pruner.options)},
        # fixed is user data: a null in it is a value to pass on, not a default to drop.
        "storage": None, "trial": {**_drop_none(trial), "fixed": dict(t.fixed)},
        "parameters": {p.name: param(p) for p in s.parameters},
        "kubernetes": _drop_none(kube),
        "artifacts": _artifacts_to_dict(s.artifacts),
    }


def _artifacts_to_dict(a: ArtifactsSpec) -> dict[str, Any]:
    if a.store == "filesystem":
        return _drop_none({"store": a.store, "path": a.path})
    return _drop_none({"store": a.store, "bucket": a.bucket, "prefix": a.prefix or None,
                       "endpoint_url": a.endpoint_url, "region": a.region,
                       "credentials_secret": a.credentials_secret})


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _drop_none(v)
        if v is not None:
            out[k] = v
    return out
