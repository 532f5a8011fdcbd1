"""YAML spec -> frozen dataclasses. All validation lives here; no I/O beyond reading the file.

Every error is a :class:`SpecError` naming the file, the line (when the YAML node is known)
and the dotted field, so a typo is one clear line and never a traceback.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import yaml

from sweeper.errors import SpecError
from sweeper.protocol import RESERVED_ENV

METHODS = ("grid", "random", "tpe")
DIRECTIONS = ("minimize", "maximize")
PRUNERS = ("none", "median", "percentile", "hyperband", "successive_halving")
STORAGE_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg2")
ARTIFACT_STORES = ("filesystem", "s3")
#: The largest number of indexes one sweep may have: enqueueing is bulk, but a plan
#: of more than this is almost certainly a mistake (and a multi-GB study).
MAX_INDEXES = 100_000
#: Kubernetes names Jobs after the sweep and appends suffixes (``-r3`` for resumes,
#: pod suffixes), so the sweep name must leave room inside a 63-character label.
MAX_NAME_LENGTH = 50
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PARAM_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h|d))+$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MAX_DURATION_S = 365 * 86400.0
_QUANTITY_RE = re.compile(r"^\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Scalar = str | int | float | bool | None
Path_ = tuple[str | int, ...]


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


# --------------------------------------------------------------------------- YAML with lines


class _Doc:
    """A parsed YAML document plus the line of every mapping key, for error messages."""

    def __init__(self, source: str, lines: dict[Path_, int]) -> None:
        self.source = source
        self.lines = lines

    def line(self, path: Path_) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def error(self, path: Path_, message: str) -> SpecError:
        return SpecError(message, source=self.source, line=self.line(path),
                         field=_dotted(path) or None)


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, str) and not (part.isprintable() and part.strip() == part and part):
            part = repr(part)  # keeps the message one readable line
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_MAX_NODES = 200_000
#: What usually causes PyYAML's terser complaints.
_YAML_HINTS = (("<block end>", "check the indentation"),
               ("'\\t'", "indent with spaces, not tabs"),
               ("another document", "a spec is a single YAML document (no ---)"),
               ("mapping values are not allowed", "quote a value that contains ': '"))
#: Optuna stores every parameter value as a float: ints beyond 2**53 would be rounded.
_MAX_EXACT_INT = 2**53
#: Only plain data: a ``!!python/...`` (or any other) tag is refused before anything is built.
_SAFE_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in
                       ("str", "int", "float", "bool", "null", "map", "seq", "timestamp"))


def _load_yaml(text: str, source: str) -> tuple[Any, _Doc]:
    """Safe-load one YAML document, rejecting duplicate keys and recording key lines."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        hints = [h for needle, h in _YAML_HINTS if needle in problem]
        raise SpecError(f"invalid YAML: {problem}" + "".join(f"; {h}" for h in hints[:1]),
                        source=source, line=mark.line + 1 if mark is not None else None) from None
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply", source=source) from None
    lines: dict[Path_, int] = {}
    doc = _Doc(source, lines)
    if node is None:
        raise SpecError("the file is empty; expected a mapping with name, method, objective, "
                        "trial and parameters", source=source)
    lines[()] = node.start_mark.line + 1
    constructor = yaml.SafeLoader("")
    budget = [_MAX_NODES]

    def build(n: yaml.Node, path: Path_, active: frozenset[int]) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise SpecError("YAML document too large (too many nodes or aliases)", source=source)
        if id(n) in active:
            raise doc.error(path, "recursive YAML alias")
        if n.tag not in _SAFE_TAGS:
            tag = n.tag.replace("tag:yaml.org,2002:", "!!")
            raise SpecError(f"YAML tag {tag} is not allowed: a spec is plain data (strings, "
                            "numbers, booleans, null, lists, mappings)", source=source,
                            line=n.start_mark.line + 1, field=_dotted(path) or None)
        if isinstance(n, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in n.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise SpecError("mapping keys must be plain scalars", source=source,
                                    line=key_node.start_mark.line + 1, field=_dotted(path) or None)
                if key_node.tag == "tag:yaml.org,2002:merge" or key_node.value == "<<":
                    raise SpecError("YAML merge keys (<<) are not supported; write the keys out",
                                    source=source, line=key_node.start_mark.line + 1,
                                    field=_dotted(path) or None)
                key = build(key_node, path, active)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise SpecError("mapping keys must be scalars", source=source,
                                    line=key_node.start_mark.line + 1)
                key = str(key) if not isinstance(key, str) else key
                child = (*path, key)
                if key in out:
                    raise SpecError(
                        f"duplicate key {key!r} (first on line {lines.get(child)})",
                        source=source, line=key_node.start_mark.line + 1, field=_dotted(child))
                lines[child] = key_node.start_mark.line + 1
                out[key] = build(value_node, child, active | {id(n)})
            return out
        if isinstance(n, yaml.SequenceNode):
            items = []
            for i, item in enumerate(n.value):
                lines.setdefault((*path, i), item.start_mark.line + 1)
                items.append(build(item, (*path, i), active | {id(n)}))
            return items
        try:
            return constructor.construct_object(n)
        except yaml.MarkedYAMLError as e:
            raise SpecError(f"invalid YAML value: {e.problem or e.context}", source=source,
                            line=n.start_mark.line + 1, field=_dotted(path) or None) from None
        except (yaml.YAMLError, ValueError, OverflowError) as e:
            raise SpecError(f"invalid YAML value: {str(e).splitlines()[0] if str(e) else e!r}",
                            source=source, line=n.start_mark.line + 1,
                            field=_dotted(path) or None) from None

    try:
        return build(node, (), frozenset()), doc
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply", source=source) from None


# --------------------------------------------------------------------------- public API


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a spec file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", source=str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e}", source=str(p)) from None
    return parse_spec(text, source=str(p))


def parse_spec(text: str, source: str = "<spec>") -> SweepSpec:
    data, doc = _load_yaml(text, source)
    return _Validator(doc).spec(data)


def parse_spec_dict(data: Mapping[str, Any], source: str = "<spec>") -> SweepSpec:
    """Validate an already-parsed mapping (the sweep record stored on the study)."""
    return _Validator(_Doc(source, {})).spec(data)


def parse_duration(value: Any) -> float:
    """``90``, ``"90s"``, ``"30m"``, ``"1h30m"``, ``"2d"`` -> seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30m, 2h or a number of seconds")
    try:
        if isinstance(value, (int, float)):
            seconds = float(value)
        elif isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value.strip()):
            seconds = float(value)  # "90" quoted is still a number of seconds
        elif isinstance(value, str) and _DURATION_RE.match(value.strip()):
            seconds = sum(float(n) * _DURATION_UNITS[u]
                          for n, u in _DURATION_PART_RE.findall(value.strip()))
        else:
            raise ValueError("expected a duration like 30m, 2h, 1h30m or a number of seconds")
    except OverflowError:
        seconds = math.inf
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError("a duration must be positive")
    if seconds > _MAX_DURATION_S:
        raise ValueError("a duration must be at most 365d")
    return seconds


def command_placeholders(command: Iterable[str]) -> list[str]:
    """Field names of ``{name}`` placeholders in a command argv (``{{`` escapes)."""
    names = []
    for arg in command:
        for _, name, _, _ in string.Formatter().parse(arg):
            if name is not None:
                names.append(name)
    return names


# --------------------------------------------------------------------------- validation


_TOP_KEYS = ("name", "description", "method", "objective", "trials", "parallelism", "seed",
             "sampler", "pruner", "storage", "trial", "parameters", "kubernetes", "artifacts")
_TRIAL_KEYS = ("entrypoint", "command", "fixed", "retries", "timeout", "resources")
_PARAM_KEYS = ("type", "low", "high", "step", "log", "choices", "values")
_RESOURCE_KEYS = ("gpu", "cpu", "memory")
_K8S_KEYS = ("image", "image_pull_policy", "namespace", "storage_secret", "storage_secret_key",
             "service_account", "node_selector", "tolerations", "image_pull_secrets", "env",
             "indexes_per_pod", "active_deadline", "ttl_after_finished")
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
_ARTIFACT_KEYS = ("store", "path", "bucket", "prefix", "endpoint_url", "region",
                  "credentials_secret")
_CREDENTIAL_KEYS = ("access_key", "secret_key", "access_key_id", "secret_access_key",
                    "aws_access_key_id", "aws_secret_access_key", "session_token",
                    "aws_session_token", "password", "token", "credentials")
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class _Validator:
    def __init__(self, doc: _Doc) -> None:
        self.doc = doc

    def err(self, path: Path_, message: str) -> SpecError:
        return self.doc.error(path, message)

    # ---- primitives

    def mapping(self, value: Any, path: Path_, allowed: Iterable[str] | None = None
                ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.err(path, f"expected a mapping, got {_kind(value)}")
        if allowed is not None:
            allowed = tuple(allowed)
            for key in value:
                if key not in allowed:
                    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                    hint = f"; did you mean {close[0]!r}?" if close else \
                        f"; allowed: {', '.join(allowed)}"
                    raise self.err((*path, key), f"unknown key {key!r}{hint}")
        return value

    def require(self, m: Mapping[str, Any], key: str, path: Path_) -> Any:
        if key not in m or m[key] is None:
            raise self.err(path, f"missing required key {key!r}")
        return m[key]

    def string(self, value: Any, path: Path_) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.err(path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def integer(self, value: Any, path: Path_, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(path, f"expected an integer, got {_kind(value)}")
        if minimum is not None and value < minimum:
            raise self.err(path, f"must be >= {minimum}, got {value}")
        return value

    def number(self, value: Any, path: Path_) -> float | int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(path, f"expected a number, got {_kind(value)}")
        try:
            finite = math.isfinite(value)
        except OverflowError:
            raise self.err(path, "number too large (beyond the float range)") from None
        if not finite:
            raise self.err(path, f"must be finite, got {value}")
        return value

    def boolean(self, value: Any, path: Path_) -> bool:
        if not isinstance(value, bool):
            raise self.err(path, f"expected true or false, got {_kind(value)}")
        return value

    def choice(self, value: Any, path: Path_, options: Iterable[str]) -> str:
        options = tuple(options)
        if not isinstance(value, str):
            raise self.err(path, f"must be one of {', '.join(options)}, got {_kind(value)}")
        if value not in options:
            close = ([o for o in options if o.lower() == value.lower()]
                     or [o for o in options if value and o.startswith(value)]
                     or difflib.get_close_matches(value, options, n=1, cutoff=0.6))
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.err(path, f"must be one of {', '.join(options)}, got {value!r}{hint}")
        return value

    def duration(self, value: Any, path: Path_) -> float:
        try:
            return parse_duration(value)
        except ValueError as e:
            raise self.err(path, f"{e}, got {value!r}") from None

    def plain(self, value: Any, path: Path_) -> Any:
        """JSON-able data only (the spec is stored on the study as JSON)."""
        if value is None or isinstance(value, (str, bool, int)):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.err(path, f"must be finite, got {value}")
            return value
        if isinstance(value, list):
            return [self.plain(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self.plain(v, (*path, str(k))) for k, v in value.items()}
        raise self.err(path, f"unsupported value {_kind(value)}; use strings, numbers, lists "
                             "and mappings")

    # ---- sections

    def spec(self, data: Any) -> SweepSpec:
        m = self.mapping(data, (), _TOP_KEYS)
        name = self.string(self.require(m, "name", ()), ("name",))
        problem = _name_problem(name)
        if problem:
            fixed = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:MAX_NAME_LENGTH]
            fixed = fixed.rstrip("-")
            hint = f"; e.g. {fixed!r}" if fixed and fixed != name else ""
            if len(name) > MAX_NAME_LENGTH:
                raise self.err(("name",), f"sweep name {_clip(name)} {problem} (it names "
                               "Kubernetes objects, which add suffixes)")
            raise self.err(("name",), f"sweep name {_clip(name)} {problem}: use lowercase "
                           f"letters, digits and '-', starting and ending with a letter or "
                           f"digit (it names Kubernetes objects){hint}")
        method = self.choice(self.require(m, "method", ()), ("method",), METHODS)
        objectives = self.objectives(self.require(m, "objective", ()), ("objective",))
        params = self.parameters(self.require(m, "parameters", ()), ("parameters",), method)
        trial = self.trial(self.require(m, "trial", ()), ("trial",), params)

        if method == "grid":
            size = grid_size_of(params)
            if size > MAX_INDEXES:
                raise self.err(("parameters",), f"the grid has {size:,} points; the limit is "
                                                f"{MAX_INDEXES:,} (use method: random or tpe)")
            trials = self.integer(m.get("trials", size), ("trials",), 1)
            if trials > size:
                raise self.err(("trials",), f"{trials} trials exceeds the grid size {size}")
        else:
            trials = self.integer(self.require(m, "trials", ()), ("trials",), 1)
            if trials > MAX_INDEXES:
                raise self.err(("trials",), f"{trials:,} trials exceeds the limit of "
                                            f"{MAX_INDEXES:,} indexes per sweep")

        parallelism = self.integer(m.get("parallelism", 1), ("parallelism",), 1)
        seed = self.integer(m.get("seed", 0), ("seed",), 0)
        sampler = self.sampler(m.get("sampler"), ("sampler",), method)
        pruner = self.pruner(m.get("pruner"), ("pruner",))
        if pruner.type != "none" and len(objectives) > 1:
            raise self.err(("pruner",), "pruning is not supported for multi-objective sweeps")
        storage = m.get("storage")
        if storage is not None:
            storage = self.storage_url(storage, ("storage",))
        description = m.get("description")
        if description is not None:
            description = self.string(description, ("description",))
        kube = self.kubernetes(m.get("kubernetes"), ("kubernetes",))
        artifacts = self.artifacts(m.get("artifacts"), ("artifacts",))
        return SweepSpec(
            name=name, method=method, objectives=objectives,  # type: ignore[arg-type]
            trials=trials, parameters=params, trial=trial, parallelism=parallelism, seed=seed,
            sampler=sampler, pruner=pruner, storage=storage, description=description,
            kubernetes=kube, artifacts=artifacts, source=self.doc.source)

    def objectives(self, value: Any, path: Path_) -> tuple[Objective, ...]:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise self.err(path, "expected at least one {metric, direction}")
        out = []
        for i, item in enumerate(items):
            p = (*path, i) if isinstance(value, list) else path
            om = self.mapping(item, p, ("metric", "direction"))
            metric = self.string(self.require(om, "metric", p), (*p, "metric"))
            if not _PARAM_RE.match(metric):
                raise self.err((*p, "metric"), f"metric name {metric!r} must be an identifier "
                                               "(letters, digits, _)")
            direction = self.choice(self.require(om, "direction", p), (*p, "direction"),
                                    DIRECTIONS)
            out.append(Objective(metric, direction))  # type: ignore[arg-type]
        names = [o.metric for o in out]
        if len(set(names)) != len(names):
            raise self.err(path, "each objective must name a different metric")
        return tuple(out)

    def parameters(self, value: Any, path: Path_, method: str) -> tuple[Parameter, ...]:
        m = self.mapping(value, path)
        if not m:
            raise self.err(path, "at least one parameter is required")
        out = []
        for name, spec in m.items():
            p = (*path, name)
            if not _PARAM_RE.match(name):
                raise self.err(p, f"parameter name {name!r} must be an identifier "
                                  "(letters, digits, _; not starting with a digit)")
            param = self.parameter(name, spec, p)
            if method == "grid" and not param.is_finite:
                raise self.err(p, "grid needs a finite parameter: give a float a step or "
                                  "explicit values: [...]")
            out.append(param)
        return tuple(out)

    def parameter(self, name: str, value: Any, path: Path_) -> Parameter:
        m = self.mapping(value, path, _PARAM_KEYS)
        values = m.get("values")
        if values is not None:
            extra = [k for k in ("low", "high", "step", "log", "choices") if k in m]
            if extra:
                raise self.err((*path, extra[0]), f"{extra[0]!r} cannot be combined with values")
            vals = self.value_list(values, (*path, "values"))
            ptype = m.get("type", "categorical")
            self.choice(ptype, (*path, "type"), ("float", "int", "categorical"))
            for i, v in enumerate(vals):
                if ptype == "float" and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise self.err((*path, "values", i), f"expected a number, got {_kind(v)}")
                if ptype == "int" and (isinstance(v, bool) or not isinstance(v, int)):
                    raise self.err((*path, "values", i), f"expected an integer, got {_kind(v)}")
            return Parameter(name, ptype, values=vals)

        ptype = self.choice(self.require(m, "type", path), (*path, "type"),
                            ("float", "int", "categorical"))
        if ptype == "categorical":
            extra = [k for k in ("low", "high", "step", "log") if k in m]
            if extra:
                raise self.err((*path, extra[0]), f"{extra[0]!r} does not apply to categorical")
            choices = self.value_list(self.require(m, "choices", path), (*path, "choices"))
            return Parameter(name, "categorical", choices=choices)
        if "choices" in m:
            raise self.err((*path, "choices"), f"choices does not apply to type {ptype}; "
                                               "use type: categorical")
        low = self.number(self.require(m, "low", path), (*path, "low"))
        high = self.number(self.require(m, "high", path), (*path, "high"))
        log = self.boolean(m.get("log", False), (*path, "log"))
        step = m.get("step")
        if ptype == "int":
            low = self.integer(low, (*path, "low"))
            high = self.integer(high, (*path, "high"))
        if low >= high:
            raise self.err((*path, "low"), f"low ({low}) must be less than high ({high})")
        if log and low <= 0:
            raise self.err((*path, "low"), f"log scale needs low > 0, got {low}")
        if ptype == "int" and max(abs(low), abs(high)) > _MAX_EXACT_INT:
            raise self.err((*path, "high" if abs(high) > _MAX_EXACT_INT else "low"),
                           f"int bounds must be within +-{_MAX_EXACT_INT} (Optuna stores "
                           "parameter values as floats)")
        if ptype == "float" and not math.isfinite(float(high) - float(low)):
            raise self.err((*path, "high"), f"the range [{low}, {high}] is too wide: high - low "
                                            "overflows a float")
        if step is not None:
            if ptype == "int":
                step = self.integer(step, (*path, "step"), 1)
                if log and step != 1:
                    raise self.err((*path, "step"), "an int on a log scale needs step 1")
                if (high - low) % step:
                    raise self.err((*path, "step"), f"step {step} does not fit the range "
                                                    f"[{low}, {high}]: high - low must be a "
                                                    "multiple of step")
            else:
                step = self.number(step, (*path, "step"))
                if step <= 0:
                    raise self.err((*path, "step"), f"step must be > 0, got {step}")
                if log:
                    raise self.err((*path, "step"), "step and log: true cannot be combined "
                                                    "for a float")
                if step > high - low:
                    raise self.err((*path, "step"), f"step {step} is larger than the range "
                                                    f"[{low}, {high}]")
                try:  # exact decimal arithmetic, as Optuna's FloatDistribution checks a step
                    rest = (Decimal(str(high)) - Decimal(str(low))) % Decimal(str(step))
                except InvalidOperation:
                    raise self.err((*path, "step"), f"step {step} is too small for the range "
                                                    f"[{low}, {high}]") from None
                if rest != 0:
                    raise self.err((*path, "step"), f"step {step} does not fit the range "
                                                    f"[{low}, {high}]: high - low must be a "
                                                    "multiple of step")
        elif ptype == "int":
            step = 1
        if ptype == "float":
            low, high = float(low), float(high)
            step = float(step) if step is not None else None
        return Parameter(name, ptype, low=low, high=high, step=step, log=log)  # type: ignore

    def value_list(self, value: Any, path: Path_) -> tuple[Scalar, ...]:
        if not isinstance(value, list):
            raise self.err(path, f"expected a non-empty list, got {_kind(value)}")
        if not value:
            raise self.err(path, "expected a non-empty list, got an empty list")
        out: list[Scalar] = []
        for i, v in enumerate(value):
            if v is not None and not isinstance(v, (str, int, float, bool)):
                raise self.err((*path, i), f"each entry must be a string, number, boolean or "
                                           f"null, got {_kind(v)}")
            if isinstance(v, float) and not math.isfinite(v):
                raise self.err((*path, i), f"must be finite, got {v}")
            same = [o for o in out if v == o]  # Optuna finds a choice by ==: 1, 1.0, true clash
            if same:
                also = f" (equal to {same[0]!r})" if type(same[0]) is not type(v) else ""
                raise self.err((*path, i), f"duplicate value {_clip(v)}{also}")
            out.append(v)
        return tuple(out)

    def trial(self, value: Any, path: Path_, params: tuple[Parameter, ...]) -> TrialSpec:
        m = self.mapping(value, path, _TRIAL_KEYS)
        entrypoint = m.get("entrypoint")
        command = m.get("command")
        if entrypoint is not None and command is not None:
            raise self.err((*path, "command"), "give entrypoint (module:function) or command "
                                               "(argv list), not both")
        if entrypoint is None and command is None:
            raise self.err(path, "missing entrypoint (module:function) or command (argv list)")
        fixed = self.plain({} if m.get("fixed") is None else m["fixed"], (*path, "fixed"))
        if not isinstance(fixed, dict):
            raise self.err((*path, "fixed"), f"expected a mapping, got {_kind(fixed)}")
        names = {p.name for p in params}
        for k in fixed:
            if k in names:
                raise self.err((*path, "fixed", k), f"{k!r} is both a parameter and fixed")
        if entrypoint is not None:
            entrypoint = self.string(entrypoint, (*path, "entrypoint"))
            if not _ENTRYPOINT_RE.match(entrypoint):
                raise self.err((*path, "entrypoint"), f"expected module:function, got "
                                                      f"{entrypoint!r}")
        cmd: tuple[str, ...] | None = None
        if command is not None:
            if not isinstance(command, list) or not command:
                raise self.err((*path, "command"), "expected a non-empty list of strings "
                                                   f"(argv; no shell is used), got "
                                                   f"{_kind(command) if command else 'nothing'}")
            for i, arg in enumerate(command):
                if not isinstance(arg, (str, int, float)) or isinstance(arg, bool):
                    raise self.err((*path, "command", i), f"expected a string, got {_kind(arg)}")
            cmd = tuple(str(a) for a in command)
            known = names | set(fixed) | {"index", "trial_number"}
            for i, arg in enumerate(cmd):
                self.placeholders(arg, (*path, "command", i), known)
        retries = self.integer(m.get("retries", 1), (*path, "retries"), 0)
        timeout = m.get("timeout")
        timeout_s = self.duration(timeout, (*path, "timeout")) if timeout is not None else None
        resources = self.resources(m.get("resources"), (*path, "resources"))
        return TrialSpec(entrypoint=entrypoint, command=cmd, fixed=fixed, retries=retries,
                         timeout=timeout_s, resources=resources)

    def placeholders(self, arg: str, path: Path_, known: set[str]) -> None:
        """Every ``{name}`` in one argv element must name a parameter, a fixed value, index or
        trial_number, exactly as ``str.format_map`` will fill it in."""
        literal = "write {{ and }} for literal braces"
        try:
            parsed = list(string.Formatter().parse(arg))
        except ValueError as e:
            raise self.err(path, f"bad placeholder in {_clip(arg)}: {e}; {literal}") from None
        for _, ph, spec, conversion in parsed:
            if ph is None:
                continue
            if not _PARAM_RE.match(ph):
                raise self.err(path, f"placeholder {{{_clip(ph)[1:-1]}}} is not a parameter "
                                     f"name: use {{name}}; {literal}")
            if ph not in known:
                close = difflib.get_close_matches(ph, sorted(known), n=1, cutoff=0.6)
                hint = (f"; did you mean {{{close[0]}}}?" if close else
                        f"; known: {', '.join(sorted(known))}")
                raise self.err(path, f"placeholder {{{ph}}} names no parameter{hint}")
            if conversion not in (None, "r", "s", "a"):
                raise self.err(path, f"placeholder {{{ph}!{conversion}}}: unknown conversion "
                                     f"{conversion!r} (use !r, !s or !a)")
            if spec and "{" in spec:
                self.placeholders(spec, path, known)

    def resources(self, value: Any, path: Path_) -> Resources:
        if value is None:
            return Resources()
        m = self.mapping(value, path, _RESOURCE_KEYS)
        gpu = self.integer(m.get("gpu", 0), (*path, "gpu"), 0)
        cpu = self.quantity(m.get("cpu"), (*path, "cpu"))
        memory = self.quantity(m.get("memory"), (*path, "memory"))
        return Resources(gpu=gpu, cpu=cpu, memory=memory)

    def quantity(self, value: Any, path: Path_) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.err(path, f"expected a quantity like 2, 500m or 4Gi, got {_kind(value)}")
        text = str(value)
        if not _QUANTITY_RE.match(text) or float(re.sub(r"[A-Za-z]+$", "", text)) <= 0:
            raise self.err(path, f"expected a positive quantity like 2, 500m or 4Gi, got {text!r}")
        return text

    def sampler(self, value: Any, path: Path_, method: str) -> dict[str, Any]:
        if value is None:
            return {}
        m = self.plain(self.mapping(value, path), path)
        if m and method != "tpe":
            raise self.err(path, f"sampler options apply to method tpe only; {method} sets are "
                                 "fixed by (seed, index)")
        if m:
            from optuna.samplers import TPESampler  # lazy: optuna is slow to import

            allowed = _kwargs_of(TPESampler) - {"seed", "gamma", "weights",
                                                "categorical_distance_func", "constraints_func"}
            self.mapping(m, path, sorted(allowed))
            self.options(m, path, TPESampler)
            if m.get("n_ei_candidates", 1) < 1:
                raise self.err((*path, "n_ei_candidates"), f"must be >= 1, got "
                                                           f"{m['n_ei_candidates']}")
            import warnings

            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    TPESampler(**m)
            except (TypeError, ValueError) as e:
                raise self.err(path, f"invalid tpe sampler options: {e}") from None
        return m

    def pruner(self, value: Any, path: Path_) -> Pruner:
        if value is None:
            return Pruner()
        m = self.plain(self.mapping(value, path), path)
        ptype = self.choice(self.require(m, "type", path), (*path, "type"), PRUNERS)
        options = {k: v for k, v in m.items() if k != "type"}
        if options and ptype == "none":
            raise self.err((*path, next(iter(options))), "pruner type none takes no options")
        if ptype != "none":
            cls = _pruner_class(ptype)
            allowed = sorted(_kwargs_of(cls))
            self.mapping(options, path, ["type", *allowed])
            self.options(options, path, cls)
            for name, (_, required) in _option_types(cls).items():
                if required and name not in options:
                    raise self.err(path, f"the {ptype} pruner needs option {name!r}")
            try:
                cls(**options)
            except (TypeError, ValueError) as e:
                raise self.err(path, f"invalid {ptype} pruner options: {e}") from None
        return Pruner(ptype, options)

    def toleration(self, value: Any, path: Path_) -> dict[str, Any]:
        t = self.plain(self.mapping(value, path, _TOLERATION_KEYS), path)
        for key in ("key", "value"):
            if key in t:
                self.string(t[key], (*path, key))
        operator = self.choice(t.get("operator", "Equal"), (*path, "operator"),
                               ("Equal", "Exists"))
        if operator == "Exists" and t.get("value"):
            raise self.err((*path, "value"), "a toleration with operator Exists takes no value")
        if "effect" in t:
            self.choice(t["effect"], (*path, "effect"),
                        ("NoSchedule", "PreferNoSchedule", "NoExecute"))
        if "tolerationSeconds" in t:
            self.integer(t["tolerationSeconds"], (*path, "tolerationSeconds"))
            if t.get("effect") != "NoExecute":
                raise self.err((*path, "tolerationSeconds"), "tolerationSeconds applies to "
                                                              "effect NoExecute only")
        return t

    def options(self, m: Mapping[str, Any], path: Path_, cls: type) -> None:
        """Check keyword options against the types an Optuna class declares (a string where
        an int belongs would otherwise only fail inside a running trial)."""
        types = _option_types(cls)
        for k, v in m.items():
            want = types[k][0] if k in types else frozenset()
            if not _option_ok(v, want):
                raise self.err((*path, k), f"expected {_describe_types(want)}, got {_kind(v)}")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise self.err((*path, k), f"must be >= 0, got {v}")

    def storage_url(self, value: Any, path: Path_) -> str:
        url = self.string(value, path)
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in STORAGE_SCHEMES:
            raise self.err(path, f"unsupported storage URL scheme {scheme or url!r}; use "
                                 "sqlite:///path.db or postgresql://user:password@host/db")
        return url

    def kubernetes(self, value: Any, path: Path_) -> KubernetesSpec:
        if value is None:
            return KubernetesSpec()
        m = self.mapping(value, path, _K8S_KEYS)
        d = KubernetesSpec()
        kw: dict[str, Any] = {}
        for key in ("image", "image_pull_policy", "namespace", "storage_secret",
                    "storage_secret_key", "service_account"):
            if key in m:
                kw[key] = self.string(m[key], (*path, key))
        if "image_pull_policy" in kw:
            self.choice(kw["image_pull_policy"], (*path, "image_pull_policy"),
                        ("Always", "IfNotPresent", "Never"))
        for key in ("namespace", "storage_secret", "service_account"):
            if key in kw and not _NAME_RE.match(kw[key]):
                raise self.err((*path, key), f"{kw[key]!r} is not a valid Kubernetes name")
        if "node_selector" in m:
            ns = self.mapping(m["node_selector"], (*path, "node_selector"))
            kw["node_selector"] = {str(k): self.string(str(v) if isinstance(v, (int, float))
                                                       else v, (*path, "node_selector", k))
                                   for k, v in ns.items()}
        if "tolerations" in m:
            tols = m["tolerations"]
            if not isinstance(tols, list):
                raise self.err((*path, "tolerations"), f"expected a list, got {_kind(tols)}")
            kw["tolerations"] = tuple(self.toleration(t, (*path, "tolerations", i))
                                      for i, t in enumerate(tols))
        if "image_pull_secrets" in m:
            ips = m["image_pull_secrets"]
            if not isinstance(ips, list):
                raise self.err((*path, "image_pull_secrets"), "expected a list of secret names, "
                                                              f"got {_kind(ips)}")
            kw["image_pull_secrets"] = tuple(self.string(s, (*path, "image_pull_secrets", i))
                                             for i, s in enumerate(ips))
        if "env" in m:
            env = self.mapping(m["env"], (*path, "env"))
            out = {}
            for k, v in env.items():
                if not _ENV_NAME_RE.match(k):
                    raise self.err((*path, "env", k), f"{k!r} is not a valid env var name")
                if k in RESERVED_ENV:
                    raise self.err((*path, "env", k), f"{k} is set by sweeper itself")
                if isinstance(v, (dict, list)) or v is None:
                    raise self.err((*path, "env", k), f"expected a string, got {_kind(v)}")
                out[k] = str(v).lower() if isinstance(v, bool) else str(v)
            kw["env"] = out
        if "indexes_per_pod" in m:
            kw["indexes_per_pod"] = self.integer(m["indexes_per_pod"], (*path, "indexes_per_pod"),
                                                 1)
        if "active_deadline" in m:
            kw["active_deadline"] = self.duration(m["active_deadline"],
                                                  (*path, "active_deadline"))
        if "ttl_after_finished" in m:
            kw["ttl_after_finished"] = self.duration(m["ttl_after_finished"],
                                                     (*path, "ttl_after_finished"))
        return replace(d, **kw)

    def artifacts(self, value: Any, path: Path_) -> ArtifactsSpec:
        if value is None:
            return ArtifactsSpec()
        if isinstance(value, dict):
            for key in value:
                if str(key).lower() in _CREDENTIAL_KEYS:
                    raise self.err((*path, key), "credentials never go in the spec: set "
                                   "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
                                   "environment (in Kubernetes, a Secret named by "
                                   "artifacts.credentials_secret)")
        m = self.mapping(value, path, _ARTIFACT_KEYS)
        store = self.choice(m.get("store", "filesystem"), (*path, "store"), ARTIFACT_STORES)
        only = {"filesystem": ("store", "path"),
                "s3": ("store", "bucket", "prefix", "endpoint_url", "region",
                       "credentials_secret")}[store]
        for key in m:
            if key not in only:
                other = "s3" if store == "filesystem" else "filesystem"
                raise self.err((*path, key), f"{key!r} applies to store: {other}, not {store}")
        if store == "filesystem":
            fs_path = self.string(m["path"], (*path, "path")) if m.get("path") is not None \
                else None
            return ArtifactsSpec(store="filesystem", path=fs_path)
        bucket = self.string(self.require(m, "bucket", path), (*path, "bucket"))
        if not _BUCKET_RE.match(bucket) or ".." in bucket:
            raise self.err((*path, "bucket"), f"{bucket!r} is not a valid bucket name (3-63 "
                                              "lowercase letters, digits, '.' and '-')")
        prefix = m.get("prefix")
        prefix = self.string(prefix, (*path, "prefix")).strip("/") if prefix is not None else ""
        endpoint = m.get("endpoint_url")
        if endpoint is not None:
            endpoint = self.string(endpoint, (*path, "endpoint_url"))
            if not re.match(r"^https?://[^/\s]+", endpoint):
                raise self.err((*path, "endpoint_url"), f"expected http(s)://host[:port], got "
                                                        f"{endpoint!r}")
            if "@" in endpoint.split("://", 1)[1].split("/", 1)[0]:
                raise self.err((*path, "endpoint_url"), "credentials never go in the spec: "
                               "remove user:password@ and set AWS_ACCESS_KEY_ID and "
                               "AWS_SECRET_ACCESS_KEY in the environment")
        region = m.get("region")
        if region is not None:
            region = self.string(region, (*path, "region"))
        secret = m.get("credentials_secret")
        if secret is not None:
            secret = self.string(secret, (*path, "credentials_secret"))
            if not _NAME_RE.match(secret):
                raise self.err((*path, "credentials_secret"),
                               f"{secret!r} is not a valid Kubernetes name")
        return ArtifactsSpec(store="s3", bucket=bucket, prefix=prefix, endpoint_url=endpoint,
                             region=region, credentials_secret=secret)


def _name_problem(name: str) -> str | None:
    """Why Kubernetes would reject ``name`` as a sweep name (None: it would not)."""
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}"
    if _NAME_RE.match(name):
        return None
    if any(c.isupper() for c in name):
        return "has uppercase letters"
    bad = sorted({c for c in name if not (c.isascii() and (c.islower() or c.isdigit()))} - {"-"})
    if bad:
        return "contains " + ", ".join(repr(c) for c in bad[:3])
    return "must start and end with a letter or digit"


def _clip(value: Any, limit: int = 60) -> str:
    """``repr`` shortened for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {value}".lower()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"string {value!r}"
    return f"{type(value).__name__} {value!r}"


_OPTION_WORDS = {"bool": "true/false", "int": "an integer", "float": "a number",
                 "str": "a string", "None": "null"}


def _option_types(cls: type) -> dict[str, tuple[frozenset[str], bool]]:
    """name -> (scalar type names its annotation allows, required) for ``cls``'s keywords."""
    import inspect

    out = {}
    for n, p in inspect.signature(cls).parameters.items():
        if n == "self" or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        ann = p.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
        out[n] = (frozenset(t.strip() for t in text.split("|")), p.default is p.empty)
    return out


def _option_ok(value: Any, types: frozenset[str]) -> bool:
    if value is None:
        return "None" in types
    if isinstance(value, bool):
        return "bool" in types
    if isinstance(value, int):
        return bool({"int", "float"} & types)
    if isinstance(value, float):
        return "float" in types
    if isinstance(value, str):
        return "str" in types
    return False


def _describe_types(types: frozenset[str]) -> str:
    words = [w for t, w in _OPTION_WORDS.items() if t in types]
    return " or ".join(words) if words else "a scalar"


def _kwargs_of(cls: type) -> set[str]:
    import inspect

    return {n for n, p in inspect.signature(cls).parameters.items()
            if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _pruner_class(ptype: str) -> type:
    import optuna.pruners as p

    return {"median": p.MedianPruner, "percentile": p.PercentilePruner,
            "hyperband": p.HyperbandPruner, "successive_halving": p.SuccessiveHalvingPruner,
            "none": p.NopPruner}[ptype]


def grid_size_of(params: Iterable[Parameter]) -> int:
    """Number of grid points (exact Python int; may be astronomically large)."""
    size = 1
    for p in params:
        if p.values is not None:
            size *= len(p.values)
        elif p.choices is not None:
            size *= len(p.choices)
        elif p.type == "int":
            assert p.low is not None and p.high is not None and p.step is not None
            size *= (int(p.high) - int(p.low)) // int(p.step) + 1
        elif p.step is not None:
            assert p.low is not None and p.high is not None
            size *= round((p.high - p.low) / p.step) + 1
        else:
            return 0
    return size


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
            "ttl_after_finished": k.ttl_after_finished}
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
