"""The stored spec (the sweep record ``SweepSpec.to_dict`` wrote) -> a :class:`SweepSpec`,
without validating it again.

The record was validated when it was written, so a runner reads it as data: no user-facing
checks, no sampler built to check ``sampler:``, no grid counted for ``trials``. What is checked
is its shape (every required key there, each value of the type the form stores), so a damaged
or foreign record is one SpecError naming the field, never a traceback, and its schema version
(``model.STORED_SCHEMA``): a record a newer sweeper wrote is refused, not misread.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from sweeper.errors import SpecError
from sweeper.spec.checks import kind_of
from sweeper.spec.k8s_model import VOLUME_KINDS, KubernetesSpec, Volume
from sweeper.spec.model import (
    ARTIFACT_STORES,
    BUDGET_UNITS,
    DIRECTIONS,
    LAUNCHERS,
    METHODS,
    ON_EXHAUSTED,
    SCHEDULER_MODES,
    SCHEDULER_TYPES,
    SCHEMA_KEY,
    STORED_SCHEMA,
    ArtifactsSpec,
    BudgetSpec,
    CostSpec,
    DataSpec,
    MetricsSpec,
    Objective,
    Parameter,
    Pruner,
    Resources,
    SchedulerSpec,
    StopSpec,
    SweepSpec,
    TrialSpec,
)
from sweeper.spec.pbt_model import PBT_KEYS, PbtOptions
from sweeper.spec.registry import PRUNERS
from sweeper.spec.yamldoc import Doc, Path_

_TYPES: Mapping[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda x: isinstance(x, str)),
    "int": ("an integer", lambda x: isinstance(x, int) and not isinstance(x, bool)),
    "number": ("a number", lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)),
    "bool": ("true or false", lambda x: isinstance(x, bool)),
    "list": ("a list", lambda x: isinstance(x, list)),
    "dict": ("a mapping", lambda x: isinstance(x, dict)),
}
_REQUIRED: Any = object()
_PARAM_TYPES = ("float", "int", "categorical")
_S3_URL_RE = re.compile(r"^s3://([^/]+)(?:/(.*))?$")
#: The kubernetes keys whose stored value is not the field's value as it is.
_K8S_CONVERT: Mapping[str, tuple[str, Callable[[Any], Any]]] = {
    "tolerations": ("list", lambda x: tuple(dict(t) for t in x)),
    "image_pull_secrets": ("list", tuple),
    "node_selector": ("dict", dict),
    "env": ("dict", dict),
    "labels": ("dict", dict),
    "annotations": ("dict", dict),
    "indexes_per_pod": ("int", int),
    "cpu_limit": ("bool", bool),
    "active_deadline": ("number", float),
    "ttl_after_finished": ("number", float),
    "termination_grace_period": ("number", float),
    "affinity": ("dict", dict),
    "pod_template": ("dict", dict),
}


def stored_schema(record: Mapping[str, Any], source: str = "<spec>") -> int:
    """The record's schema version (1 for a record written before versions were stamped);
    a SpecError for one this sweeper cannot read."""
    version = record.get(SCHEMA_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SpecError(f"expected a schema version (a positive integer), got "
                        f"{kind_of(version)}", source=source, field=SCHEMA_KEY)
    if version > STORED_SCHEMA:
        raise SpecError(f"stored by a newer sweeper (schema {version}, this one reads up to "
                        f"{STORED_SCHEMA}): upgrade the runner image", source=source)
    return version


def load_stored(record: Mapping[str, Any], source: str = "<spec>") -> SweepSpec:
    """The spec a record holds, as ``SweepSpec.to_dict`` wrote it (``source`` names it in
    errors, e.g. ``<study NAME>``). Raises SpecError for a newer schema or a damaged record."""
    if not isinstance(record, Mapping):
        raise SpecError(f"the stored spec must be a mapping, got {kind_of(record)}",
                        source=source)
    stored_schema(record, source)
    return _Reader(source).spec({k: v for k, v in record.items() if k != SCHEMA_KEY})


class _Reader:
    """Reads one record; every problem is a SpecError at the dotted field."""

    def __init__(self, source: str) -> None:
        self.doc = Doc(source, {})

    def err(self, path: Path_, message: str) -> SpecError:
        return self.doc.error(path, message)

    def mapping(self, value: Any, path: Path_, keys: tuple[str, ...] | None = None
                ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.err(path, f"expected a mapping, got {kind_of(value)}")
        unknown = [k for k in value if keys is not None and k not in keys]
        if unknown:
            raise self.err((*path, unknown[0]), "unknown key in the stored record (written by "
                                                "another version of sweeper?)")
        return value

    def get(self, m: Mapping[str, Any], key: str, path: Path_, kind: str,
            default: Any = _REQUIRED) -> Any:
        """``m[key]``, of ``kind`` (see ``_TYPES``); ``default`` when absent or null, and an
        error when there is no default."""
        value = m.get(key)
        if value is None:
            if default is _REQUIRED:
                raise self.err((*path, key), f"missing required key {key!r} in the stored "
                                             "record")
            return default
        word, ok = _TYPES[kind]
        if not ok(value):
            raise self.err((*path, key), f"expected {word}, got {kind_of(value)}")
        return value

    def choice(self, m: Mapping[str, Any], key: str, path: Path_, options: tuple[str, ...],
               default: Any = _REQUIRED) -> Any:
        value = self.get(m, key, path, "str", default)
        if value not in options:
            raise self.err((*path, key), f"must be one of {', '.join(options)}, got {value!r}")
        return value

    # ---- sections

    def spec(self, m: dict[str, Any]) -> SweepSpec:
        self.mapping(m, (), ("name", "description", "method", "objective", "trials",
                             "parallelism", "seed", "sampler", "pruner", "storage", "trial",
                             "parameters", "kubernetes", "artifacts", "data", "stop",
                             "scheduler", "budget", "cost", "open_ended"))
        pruner = dict(self.get(m, "pruner", (), "dict", {}))
        return SweepSpec(
            name=self.get(m, "name", (), "str"), method=self.choice(m, "method", (), METHODS),
            objectives=self.objectives(m), trials=self.get(m, "trials", (), "int"),
            parameters=self.parameters(self.get(m, "parameters", (), "dict")),
            trial=self.trial(self.get(m, "trial", (), "dict")),
            parallelism=self.get(m, "parallelism", (), "int", 1),
            seed=self.get(m, "seed", (), "int", 0),
            sampler=dict(self.get(m, "sampler", (), "dict", {})),
            pruner=Pruner(self.choice(pruner, "type", ("pruner",), PRUNERS, "none"),
                          {k: v for k, v in pruner.items() if k != "type"}),
            storage=self.get(m, "storage", (), "str", None),
            description=self.get(m, "description", (), "str", None),
            kubernetes=self.kubernetes(self.get(m, "kubernetes", (), "dict", {})),
            artifacts=self.artifacts(self.get(m, "artifacts", (), "dict", {})),
            data=self.data(self.get(m, "data", (), "dict", {})),
            stop=self.stop(self.get(m, "stop", (), "dict", {})),
            scheduler=self.scheduler(self.get(m, "scheduler", (), "dict", {})),
            budget=self.budget(self.get(m, "budget", (), "dict", {})),
            cost=self.cost(self.get(m, "cost", (), "dict", None)),
            open_ended=self.get(m, "open_ended", (), "bool", False),
            source=self.doc.source)

    def objectives(self, m: Mapping[str, Any]) -> tuple[Objective, ...]:
        value = m.get("objective")
        items = value if isinstance(value, list) else [self.get(m, "objective", (), "dict")]
        out = []
        for i, item in enumerate(items):
            path: Path_ = ("objective", i) if isinstance(value, list) else ("objective",)
            om = self.mapping(item, path, ("metric", "direction"))
            out.append(Objective(self.get(om, "metric", path, "str"),
                                 self.choice(om, "direction", path, DIRECTIONS)))
        if not out:
            raise self.err(("objective",), "no objective in the stored record")
        return tuple(out)

    def parameters(self, m: Mapping[str, Any]) -> tuple[Parameter, ...]:
        if not m:
            raise self.err(("parameters",), "no parameter in the stored record")
        return tuple(self.parameter(str(name), self.mapping(p, ("parameters", name)))
                     for name, p in m.items())

    def parameter(self, name: str, m: dict[str, Any]) -> Parameter:
        path: Path_ = ("parameters", name)
        self.mapping(m, path, ("type", "low", "high", "step", "log", "choices", "values",
                               "when"))
        ptype = self.choice(m, "type", path, _PARAM_TYPES)
        when = tuple((str(parent), tuple(allowed if isinstance(allowed, list) else [allowed]))
                     for parent, allowed in self.get(m, "when", path, "dict", {}).items())
        if m.get("values") is not None:
            return Parameter(name, ptype, values=tuple(self.get(m, "values", path, "list")),
                             when=when)
        if m.get("choices") is not None:
            return Parameter(name, ptype, choices=tuple(self.get(m, "choices", path, "list")),
                             when=when)
        number = "int" if ptype == "int" else "number"
        return Parameter(name, ptype, low=self.get(m, "low", path, number),
                         high=self.get(m, "high", path, number),
                         step=self.get(m, "step", path, number, None),
                         log=self.get(m, "log", path, "bool", False), when=when)

    def trial(self, m: dict[str, Any]) -> TrialSpec:
        path: Path_ = ("trial",)
        self.mapping(m, path, ("entrypoint", "command", "fixed", "retries", "timeout",
                               "resources", "launcher", "nproc", "nodes", "metrics", "code"))
        entrypoint = self.get(m, "entrypoint", path, "str", None)
        command = self.get(m, "command", path, "list", None)
        if (entrypoint is None) == (command is None):
            raise self.err(path, "the stored record needs exactly one of entrypoint and command")
        res = self.mapping(self.get(m, "resources", path, "dict", {}), (*path, "resources"),
                           ("gpu", "cpu", "memory"))
        rpath: Path_ = (*path, "resources")
        metrics = self.mapping(self.get(m, "metrics", path, "dict", {}), (*path, "metrics"),
                               ("format", "file", "wandb"))
        wandb = self.get(metrics, "wandb", (*path, "metrics"), "dict", None)
        return TrialSpec(
            entrypoint=entrypoint, command=tuple(str(a) for a in command) if command else None,
            fixed=dict(self.get(m, "fixed", path, "dict", {})),
            retries=self.get(m, "retries", path, "int", 1),
            timeout=_float(self.get(m, "timeout", path, "number", None)),
            resources=Resources(gpu=self.get(res, "gpu", rpath, "number", 0),
                                cpu=self.get(res, "cpu", rpath, "str", None),
                                memory=self.get(res, "memory", rpath, "str", None)),
            launcher=self.choice(m, "launcher", path, LAUNCHERS, "process"),
            nproc=self.get(m, "nproc", path, "int", None),
            metrics=MetricsSpec(format=self.get(metrics, "format", (*path, "metrics"), "str",
                                                None),
                                file=self.get(metrics, "file", (*path, "metrics"), "str", None),
                                wandb=tuple((str(k), str(v)) for k, v in wandb.items())
                                if wandb is not None else None),
            nodes=self.get(m, "nodes", path, "int", 1),
            code=self.get(m, "code", path, "str", None) if "code" in m else ".")

    def kubernetes(self, m: dict[str, Any]) -> KubernetesSpec:
        path: Path_ = ("kubernetes",)
        self.mapping(m, path, (*KubernetesSpec().to_dict(), "affinity", "pod_template"))
        kw: dict[str, Any] = {}
        for key, value in m.items():
            if value is None:
                continue  # unset: the default (to_dict leaves such keys out)
            if key == "volumes":
                kw[key] = tuple(self.volume(v, (*path, key, i))
                                for i, v in enumerate(self.get(m, key, path, "list")))
            elif key in _K8S_CONVERT:
                kind, convert = _K8S_CONVERT[key]
                kw[key] = convert(self.get(m, key, path, kind))
            else:
                kw[key] = self.get(m, key, path, "str")
        return KubernetesSpec(**kw)

    def volume(self, value: Any, path: Path_) -> Volume:
        m = self.mapping(value, path, ("name", "mount_path", "read_only", *VOLUME_KINDS))
        kinds = [k for k in VOLUME_KINDS if k in m]
        if len(kinds) != 1:
            raise self.err(path, f"a stored volume has exactly one of {', '.join(VOLUME_KINDS)}")
        kind = kinds[0]
        common: dict[str, Any] = {"kind": kind, "name": self.get(m, "name", path, "str"),
                  "mount_path": self.get(m, "mount_path", path, "str"),
                  "read_only": self.get(m, "read_only", path, "bool", False)}
        if kind == "nfs":
            nfs = self.mapping(m[kind], (*path, kind), ("server", "path"))
            return Volume(**common, server=self.get(nfs, "server", (*path, kind), "str"),
                          path=self.get(nfs, "path", (*path, kind), "str"))
        if kind == "empty_dir":
            ed = self.mapping(m[kind] or {}, (*path, kind), ("size_limit",))
            limit = self.get(ed, "size_limit", (*path, kind), "str", None)
            return Volume(**common, size_limit=limit)
        return Volume(**common, source=self.get(m, kind, path, "str"))

    def artifacts(self, m: dict[str, Any]) -> ArtifactsSpec:
        path: Path_ = ("artifacts",)
        self.mapping(m, path, ("store", "path", "bucket", "prefix", "endpoint_url", "region",
                               "credentials_secret"))
        store = self.choice(m, "store", path, ARTIFACT_STORES, "filesystem")
        return ArtifactsSpec(store=store, path=self.get(m, "path", path, "str", None),
                             bucket=self.get(m, "bucket", path, "str", None),
                             prefix=self.get(m, "prefix", path, "str", ""),
                             **self.s3_access(m, path))

    def data(self, m: dict[str, Any]) -> DataSpec:
        path: Path_ = ("data",)
        self.mapping(m, path, ("path", "s3", "endpoint_url", "region", "credentials_secret"))
        if m.get("path") is not None:
            return DataSpec(path=self.get(m, "path", path, "str"))
        if m.get("s3") is None:
            return DataSpec()
        match = _S3_URL_RE.match(self.get(m, "s3", path, "str"))
        if not match:
            raise self.err((*path, "s3"), f"expected s3://bucket/prefix, got {m['s3']!r}")
        return DataSpec(bucket=match.group(1), prefix=match.group(2) or "",
                        **self.s3_access(m, path))

    def s3_access(self, m: Mapping[str, Any], path: Path_) -> dict[str, str | None]:
        return {key: self.get(m, key, path, "str", None)
                for key in ("endpoint_url", "region", "credentials_secret")}

    def stop(self, m: dict[str, Any]) -> StopSpec:
        path: Path_ = ("stop",)
        self.mapping(m, path, ("value", "patience", "max_failed_trials", "max_duration"))
        return StopSpec(value=_float(self.get(m, "value", path, "number", None)),
                        patience=self.get(m, "patience", path, "int", None),
                        max_failed_trials=self.get(m, "max_failed_trials", path, "int", None),
                        max_duration=_float(self.get(m, "max_duration", path, "number", None)))

    def budget(self, m: dict[str, Any]) -> BudgetSpec:
        path: Path_ = ("budget",)
        self.mapping(m, path, (*BUDGET_UNITS, "on_exhausted"))
        if not m:
            return BudgetSpec()
        steps = self.get(m, "steps", path, "int", None)
        return BudgetSpec(gpu_hours=_float(self.get(m, "gpu_hours", path, "number", None)),
                          cpu_hours=_float(self.get(m, "cpu_hours", path, "number", None)),
                          steps=steps, cost=_float(self.get(m, "cost", path, "number", None)),
                          on_exhausted=self.choice(m, "on_exhausted", path, ON_EXHAUSTED,
                                                   "finish"))

    def cost(self, m: dict[str, Any] | None) -> CostSpec | None:
        if m is None:
            return None
        path: Path_ = ("cost",)
        self.mapping(m, path, ("per_gpu_hour", "per_cpu_hour", "currency"))
        return CostSpec(per_gpu_hour=float(self.get(m, "per_gpu_hour", path, "number", 0)),
                        per_cpu_hour=float(self.get(m, "per_cpu_hour", path, "number", 0)),
                        currency=self.get(m, "currency", path, "str", "USD"))

    def scheduler(self, m: dict[str, Any]) -> SchedulerSpec:
        if not m:
            return SchedulerSpec()
        path: Path_ = ("scheduler",)
        if m.get("type") == "pbt":
            return self.pbt(m, path)
        self.mapping(m, path, ("type", "mode", "min_resource", "max_resource",
                               "reduction_factor"))
        return SchedulerSpec(type=self.choice(m, "type", path, SCHEDULER_TYPES),
                             mode=self.choice(m, "mode", path, SCHEDULER_MODES),
                             min_resource=self.get(m, "min_resource", path, "int"),
                             max_resource=self.get(m, "max_resource", path, "int"),
                             reduction_factor=self.get(m, "reduction_factor", path, "int"))

    def pbt(self, m: dict[str, Any], path: Path_) -> SchedulerSpec:
        self.mapping(m, path, ("type", "max_resource", *PBT_KEYS))
        factors = self.get(m, "perturbation_factors", path, "list")
        if len(factors) != 2 or not all(isinstance(f, int | float) for f in factors):
            raise self.err((*path, "perturbation_factors"), "expected two numbers")
        return SchedulerSpec(type="pbt", max_resource=self.get(m, "max_resource", path, "int"),
                             pbt=PbtOptions(
            perturbation_interval=self.get(m, "perturbation_interval", path, "int"),
            quantile_fraction=float(self.get(m, "quantile_fraction", path, "number")),
            resample_probability=float(self.get(m, "resample_probability", path, "number")),
            perturbation_factors=(float(factors[0]), float(factors[1]))))


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)
