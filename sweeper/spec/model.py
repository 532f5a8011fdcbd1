"""The spec as frozen dataclasses, and its normalised form (the sweep record) and hash.

Pure data: no YAML, no validation (see ``_validate``) and no Optuna; every other module of
sweeper reads these classes. The ``kubernetes:`` section's classes live in ``k8s_model``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sweeper.spec.k8s_model import KubernetesSpec
from sweeper.spec.pbt_model import PbtOptions

METHODS = ("grid", "random", "tpe", "gp", "cmaes", "qmc", "nsga2", "nsga3")
#: Methods whose sets are a pure function of (spec, index), enqueued up front; the others are
#: adaptive: each runner asks the sampler when it starts.
PLANNED_METHODS = ("grid", "random", "qmc")
Method = Literal["grid", "random", "tpe", "gp", "cmaes", "qmc", "nsga2", "nsga3"]
DIRECTIONS = ("minimize", "maximize")
STORAGE_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg2", "grpc")
ARTIFACT_STORES = ("filesystem", "s3")
#: The largest number of indexes one sweep may have: enqueueing is bulk, but a plan
#: of more than this is almost certainly a mistake (and a multi-GB study).
MAX_INDEXES = 100_000
#: Kubernetes names Jobs after the sweep and appends suffixes (``-r3`` for resumes,
#: pod suffixes), so the sweep name must leave room inside a 63-character label.
MAX_NAME_LENGTH = 50
#: The version of the normalised form (the sweep record), stored in it under ``SCHEMA_KEY``; a
#: record without the key (written before it was stamped) is version 1. Raise it when a record
#: changes so that an older runner would misread it (``sweeper.spec.stored`` refuses newer).
STORED_SCHEMA = 1
SCHEMA_KEY = "schema_version"

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
    #: ``when:``: (other parameter, the values it must take) pairs, all of which must hold
    #: (and each other parameter be active itself) for this one to exist in a trial.
    when: tuple[tuple[str, tuple[Scalar, ...]], ...] = ()

    @property
    def is_finite(self) -> bool:
        return (
            self.values is not None
            or self.choices is not None
            or self.type == "int"
            or self.step is not None
        )


@dataclass(frozen=True)
class StopSpec:
    """When the sweep starts no new index (any subset; the first rule to fire stops it).

    ``value``: a complete trial reached it (single objective, in its direction); ``patience``:
    that many trials finished since the best one without beating it; ``max_failed_trials``:
    that many indexes failed for good, and also how many failed attempts with none complete
    stop a sweep at its start (default 5: the brake; 0 turns both off); ``max_duration``:
    seconds since the sweep's first launch. Not part of the spec hash: a sweep may be given
    other rules when it is run again.
    """

    value: float | None = None
    patience: int | None = None
    max_failed_trials: int | None = None
    max_duration: float | None = None

    @property
    def any(self) -> bool:
        """Whether a rule is set (``max_failed_trials: 0`` only turns the brake off)."""
        return replace(self, max_failed_trials=self.max_failed_trials or None) != StopSpec()


BUDGET_UNITS = ("gpu_hours", "cpu_hours", "steps", "cost")
ON_EXHAUSTED = ("finish", "stop")


@dataclass(frozen=True)
class CostSpec:
    """``cost:``: the price of a GPU-hour and of a CPU-hour (of a CPU trial), which turns the
    sweep's accounting into money wherever it is shown, and lets ``budget.cost`` be spent."""

    per_gpu_hour: float = 0.0
    per_cpu_hour: float = 0.0
    currency: str = "USD"


@dataclass(frozen=True)
class BudgetSpec:
    """``budget:``: what the sweep may spend, in one unit (``gpu_hours``, ``cpu_hours``,
    ``steps``, or ``cost`` with ``cost:`` set). New work starts only while what was spent plus
    what the running trials have committed stays within it; once it is spent the running
    trials finish (``on_exhausted: finish``) or stop at their next report, resumable
    (``stop``). Not part of the spec hash: a sweep run again with a larger budget goes on."""

    gpu_hours: float | None = None
    cpu_hours: float | None = None
    steps: int | None = None
    cost: float | None = None
    on_exhausted: Literal["finish", "stop"] = "finish"

    @property
    def unit(self) -> str | None:
        """The unit the budget is given in (None: no budget)."""
        for unit in BUDGET_UNITS:
            if getattr(self, unit) is not None:
                return unit
        return None

    @property
    def limit(self) -> float | None:
        """How much may be spent, in :attr:`unit` (None: no budget)."""
        unit = self.unit
        return None if unit is None else float(getattr(self, unit))

    @property
    def enabled(self) -> bool:
        return self.unit is not None

    def to_dict(self) -> dict[str, Any]:
        """The normalised form: the unit, its amount and what happens once it is spent."""
        unit = self.unit
        return {} if unit is None else {unit: getattr(self, unit),
                                        "on_exhausted": self.on_exhausted}


@dataclass(frozen=True)
class Pruner:
    type: str = "none"
    options: Mapping[str, Any] = field(default_factory=dict)


SCHEDULER_TYPES = ("asha", "pbt")
SCHEDULER_MODES = ("promotion",)


@dataclass(frozen=True)
class SchedulerSpec:
    """``scheduler:``: promotion ASHA (a trial pauses at a rung with its checkpoint, resumed
    when it ranks in the top 1/eta there), or PBT (``pbt``); ``type`` none: no scheduler."""

    type: str = "none"
    mode: str = "promotion"
    min_resource: int = 1
    max_resource: int = 1
    reduction_factor: int = 3
    pbt: PbtOptions = field(default_factory=PbtOptions)

    @property
    def enabled(self) -> bool:
        return self.type != "none"

    @property
    def rung_steps(self) -> tuple[int, ...]:
        """The step that ends each rung: min_resource * eta**k below max_resource."""
        out: list[int] = []
        step = self.min_resource
        while self.type == "asha" and step < self.max_resource:
            out.append(step)
            step *= self.reduction_factor
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "pbt", "max_resource": self.max_resource, **self.pbt.to_dict()} \
            if self.type == "pbt" else {"type": self.type, "mode": self.mode,
            "min_resource": self.min_resource, "max_resource": self.max_resource,
            "reduction_factor": self.reduction_factor}


LAUNCHERS = ("process", "torchrun")


@dataclass(frozen=True)
class Resources:
    #: GPUs per trial: a whole number, or (local backend only) a fraction 1/k: k workers a GPU.
    gpu: int | float = 0
    cpu: str | None = None
    memory: str | None = None


#: The per-trial values a ``trial.command`` argv (and ``trial.metrics.file``) may name besides
#: parameters and fixed values: the index, the Optuna trial number, the index's checkpoint
#: directory.
TRIAL_VALUES = ("index", "trial_number", "checkpoint_dir")


@dataclass(frozen=True)
class MetricsSpec:
    """How a ``trial.command`` program's metrics are read. Default (all None): ``name=value``
    and ``name: value`` pairs on its stdout. ``format``: a regex with named groups ``name`` and
    ``value``, matched against each stdout line instead. ``file``: JSON lines the program
    appends to (``{"step": 3, "val/loss": 0.4}``), instead of stdout; with ``format`` too, a
    text file whose lines are read with the regex. ``wandb``: the program is a W&B program;
    its ``wandb.log`` calls are the reports and its ``wandb.config`` holds the parameters, each
    under the W&B key paired with it here (a parameter or fixed value not named keeps its own
    name; a dot in a key nests, as W&B's nested sweep parameters do)."""

    format: str | None = None
    file: str | None = None
    wandb: tuple[tuple[str, str], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The normalised form; ``wandb`` only when set (earlier sweeps keep their hash)."""
        out: dict[str, Any] = {"format": self.format, "file": self.file}
        if self.wandb is not None:
            out["wandb"] = dict(self.wandb)
        return out


@dataclass(frozen=True)
class TrialSpec:
    entrypoint: str | None = None
    command: tuple[str, ...] | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    retries: int = 1
    timeout: float | None = None
    resources: Resources = field(default_factory=Resources)
    #: ``process``: the entrypoint runs in the runner (a command as one process);
    #: ``torchrun``: ``torchrun --standalone --nproc_per_node N`` runs it on every rank.
    launcher: Literal["process", "torchrun"] = "process"
    #: Ranks for ``torchrun``: one per GPU (``resources.gpu``) unless given (CPU runs).
    nproc: int | None = None
    metrics: MetricsSpec = field(default_factory=MetricsSpec)
    #: Pods one trial spans (``torchrun`` only): its ranks rendezvous across them.
    nodes: int = 1
    #: The trial's code directory (relative to the spec file's), packed into a snapshot that
    #: pods fetch and run in (``sweeper.code``); None: the image holds the code. Not part of
    #: the spec hash: the snapshot's own hash is recorded (``protocol.CODE_ATTR``).
    code: str | None = "."

    @property
    def ranks(self) -> int:
        """How many processes the trial runs as on each of its nodes (1 unless torchrun)."""
        if self.launcher != "torchrun":
            return 1
        return self.nproc or max(1, int(self.resources.gpu) // self.nodes)


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
class DataSpec:
    """The dataset every trial reads, as ``ctx.data_dir`` (``$SWEEPER_DATA_DIR``): a directory
    (``path``; on Kubernetes inside a read-only volume of ``kubernetes.volumes``), or an S3 /
    MinIO prefix synced once per pod (once per machine locally) into a cache directory.
    Endpoint, region and credentials work as for artifacts (and default to theirs). Not part
    of the spec hash: where the data lives does not change what the trials are."""

    path: str | None = None
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    credentials_secret: str | None = None

    @property
    def configured(self) -> bool:
        return self.path is not None or self.bucket is not None

    @property
    def url(self) -> str | None:
        """``s3://bucket/prefix`` (None for a path)."""
        if self.bucket is None:
            return None
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    method: Method
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
    data: DataSpec = field(default_factory=DataSpec)
    stop: StopSpec = field(default_factory=StopSpec)
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    #: ``cost:`` (None: figures are shown in hours and steps only).
    cost: CostSpec | None = None
    #: ``trials`` left out beside a budget (adaptive methods): the sweep starts configuration
    #: after configuration until the budget is spent; ``trials`` is then the ceiling
    #: :data:`MAX_INDEXES`, and the indexes are those started so far (:attr:`index_count`).
    open_ended: bool = False
    #: Where the spec came from (a path or "<study NAME>"), for messages; not part of the sweep.
    source: str = field(default="<spec>", compare=False)
    #: The spec file's directory (absolute), against which relative paths in the spec resolve
    #: (see ``sweeper.spec.paths``); None for a spec that is not a file. Not part of the
    #: sweep: where the file lives changes neither the record nor the hash.
    base_dir: str | None = field(default=None, compare=False)
    #: What the validator warns about (``file:line: field: message``, one line each): the spec
    #: is valid, but Optuna would quietly do less than the method promises. Not part of the sweep.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def is_adaptive(self) -> bool:
        """Adaptive methods ask the sampler at runner start; nothing is enqueued."""
        return self.method not in PLANNED_METHODS

    @property
    def index_count(self) -> int | None:
        """How many indexes the sweep has; None when it is open-ended (as many as its budget
        pays for): its index table then lists the indexes started so far."""
        return None if self.open_ended else self.trials

    @property
    def is_conditional(self) -> bool:
        """Some parameter exists only when a ``when:`` condition holds."""
        return any(p.when for p in self.parameters)

    @property
    def is_multi_objective(self) -> bool:
        return len(self.objectives) > 1

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec (the sweep record), every default filled in and its schema
        version stamped; ``sweeper.spec.load_stored`` reads it back."""
        return _spec_to_dict(self)

    @functools.cached_property
    def spec_hash(self) -> str:
        """Hash of what defines the trials. Parallelism, storage, retries, timeout, resources and
        Kubernetes placement may change between runs of the same sweep; nothing else may.
        Computed once per spec (a runner stamps it on every trial); the spec is frozen."""
        d = self.to_dict()
        identity = {k: d[k] for k in ("name", "method", "objective", "trials", "seed", "sampler",
                                      "pruner", "parameters")}
        identity["trial"] = {k: d["trial"].get(k) for k in ("entrypoint", "command", "fixed")}
        # sort_keys below loses the YAML order, which decides grid point i and random set i.
        identity["parameter_order"] = list(d["parameters"])
        if "scheduler" in d:  # only when set: earlier sweeps keep their hash
            identity["scheduler"] = d["scheduler"]
        if d.get("open_ended"):  # only when set, likewise
            identity["open_ended"] = True
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

    def param_when(p: Parameter) -> dict[str, Any]:
        # Only when set: an unconditional spec keeps the record (and hash) it always had.
        d = param(p)
        if p.when:
            d["when"] = {parent: list(allowed) for parent, allowed in p.when}
        return d

    t = s.trial
    trial: dict[str, Any] = {"entrypoint": t.entrypoint,
                             "command": list(t.command) if t.command else None,
                             "fixed": dict(t.fixed), "retries": t.retries, "timeout": t.timeout,
                             "resources": {"gpu": t.resources.gpu, "cpu": t.resources.cpu,
                                           "memory": t.resources.memory},
                             "launcher": t.launcher, "nproc": t.nproc,
                             "metrics": t.metrics.to_dict() if t.metrics != MetricsSpec()
                             else None}
    if t.nodes != 1:  # absent when 1: the stored specs of earlier sweeps keep their hash
        trial["nodes"] = t.nodes
    # Absent when the default (earlier records stay as they were); a null (the image holds
    # the code) is kept, not dropped with the other nulls.
    code = {"code": t.code} if t.code != "." else {}
    kube = s.kubernetes.to_dict()
    # Pass-through Kubernetes objects: kept exactly as written (a null in them means something).
    passed = {key: _plain_copy(kube.pop(key)) for key in ("affinity", "pod_template")
              if key in kube}
    objective: Any = [{"metric": o.metric, "direction": o.direction} for o in s.objectives]
    # Only when set: the records (and hashes) of sweeps without one stay as they were.
    scheduler = {"scheduler": s.scheduler.to_dict()} if s.scheduler.enabled else {}
    # Budget and price only when set: earlier records stay as they were (neither is hashed).
    budget = {"budget": s.budget.to_dict()} if s.budget.enabled else {}
    cost = {"cost": {"per_gpu_hour": s.cost.per_gpu_hour, "per_cpu_hour": s.cost.per_cpu_hour,
                     "currency": s.cost.currency}} if s.cost is not None else {}
    return {
        # Outside spec_hash's keys: stamping the version changed no sweep's hash.
        SCHEMA_KEY: STORED_SCHEMA,
        "name": s.name, "description": s.description, "method": s.method,
        "objective": objective[0] if len(objective) == 1 else objective,
        "trials": s.trials, "parallelism": s.parallelism, "seed": s.seed,
        "sampler": dict(s.sampler),
        "pruner": {"type": s.pruner.type, **dict(s.pruner.options)},
        # fixed is user data: a null in it is a value to pass on, not a default to drop.
        "storage": None, "trial": {**_drop_none(trial), "fixed": dict(t.fixed), **code},
        "parameters": {p.name: param_when(p) for p in s.parameters},
        "kubernetes": {**_drop_none(kube), **passed},
        "artifacts": _artifacts_to_dict(s.artifacts),
        "data": _data_to_dict(s.data),
        "stop": _drop_none({"value": s.stop.value, "patience": s.stop.patience,
                            "max_failed_trials": s.stop.max_failed_trials,
                            "max_duration": s.stop.max_duration}),
        **scheduler, **budget, **cost,
        # Only when set: the records (and hashes) of sweeps with a trial count stay as they were.
        **({"open_ended": True} if s.open_ended else {}),
    }


def _artifacts_to_dict(a: ArtifactsSpec) -> dict[str, Any]:
    if a.store == "filesystem":
        return _drop_none({"store": a.store, "path": a.path})
    return _drop_none({"store": a.store, "bucket": a.bucket, "prefix": a.prefix or None,
                       "endpoint_url": a.endpoint_url, "region": a.region,
                       "credentials_secret": a.credentials_secret})


def _data_to_dict(d: DataSpec) -> dict[str, Any]:
    if d.path is not None:
        return {"path": d.path}
    if d.bucket is None:
        return {}
    return _drop_none({"s3": d.url, "endpoint_url": d.endpoint_url, "region": d.region,
                       "credentials_secret": d.credentials_secret})


def _plain_copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _drop_none(v)
        if v is not None:
            out[k] = v
    return out
