"""Validation of the top level, ``trial:`` and ``pruner:`` (the other sections have modules of
their own: ``_parameters``, ``_sampler``, ``_artifacts``, ``_data``, ``k8s_section``, ``_stop``),
and the entry points that read a file, a YAML text or a user's mapping into a
:class:`SweepSpec`.

Every error is a :class:`SpecError` naming the file, the line (when the YAML node is known)
and the dotted field, so a typo is one clear line and never a traceback.
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import SpecError
from sweeper.spec import registry
from sweeper.spec._artifacts import artifacts_section
from sweeper.spec._budget import budget_spec, budget_with_trials, cost_spec
from sweeper.spec._data import data_section
from sweeper.spec._launcher import launcher_fields
from sweeper.spec._metrics import metric_name, metrics_spec
from sweeper.spec._parameters import parameters
from sweeper.spec._sampler import (
    class_options,
    grid_warnings,
    method_fits,
    sampler_options,
    sampler_warnings,
)
from sweeper.spec._scheduler import scheduler_spec
from sweeper.spec._stop import stop_spec
from sweeper.spec.checks import (
    ENTRYPOINT_RE,
    PARAM_RE,
    QUANTITY_RE,
    Checks,
    clip,
    kind_of,
    name_problem,
)
from sweeper.spec.grid import grid_size_of
from sweeper.spec.k8s_section import kubernetes
from sweeper.spec.model import (
    DIRECTIONS,
    MAX_INDEXES,
    MAX_NAME_LENGTH,
    METHODS,
    PLANNED_METHODS,
    SCHEMA_KEY,
    STORAGE_SCHEMES,
    TRIAL_VALUES,
    KubernetesSpec,
    Objective,
    Parameter,
    Pruner,
    Resources,
    SweepSpec,
    TrialSpec,
)
from sweeper.spec.overrides import apply_overrides, parse_overrides
from sweeper.spec.stored import stored_schema
from sweeper.spec.yamldoc import Doc, Path_, load_yaml, read_text

TOP_KEYS = ("name", "description", "method", "objective", "trials", "parallelism", "seed",
             "sampler", "pruner", "storage", "trial", "parameters", "kubernetes", "artifacts",
             "data", "stop", "scheduler", "budget", "cost")
TRIAL_KEYS = ("entrypoint", "command", "fixed", "retries", "timeout", "resources", "launcher",
               "nproc", "nodes", "metrics", "code")
RESOURCE_KEYS = ("gpu", "cpu", "memory")


# --------------------------------------------------------------------------- public API


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> SweepSpec:
    """Read and validate a spec file, with ``--set KEY=VALUE`` overrides applied first; its
    relative paths resolve against its directory (see :mod:`sweeper.spec.paths`)."""
    from sweeper.spec.paths import anchored

    p = Path(path)
    text = read_text(p)
    return anchored(parse_spec(text, source=str(p), overrides=overrides), p)


def field_error(path: str | Path, field: Path_, message: str,
                overrides: Sequence[str] = ()) -> SpecError:
    """The error at ``field`` of the spec file ``path`` (its line, or ``--set FIELD`` when an
    override wrote it), for a check made after validation: one that reads the trial's
    program."""
    p = Path(path)
    _, doc = load_yaml(read_text(p), str(p))
    if overrides:
        doc.overridden.update(o.path for o in parse_overrides(overrides, str(p)))
    return doc.error(field, message)


def parse_spec(text: str, source: str = "<spec>", overrides: Sequence[str] = ()) -> SweepSpec:
    data, doc = load_yaml(text, source)
    data = _unstamped(data, source)
    if overrides:
        sets = parse_overrides(overrides, source)
        data = apply_overrides(data, sets, source)
        doc.overridden.update(o.path for o in sets)
    return _Validator(doc, deep=True).spec(data)


def parse_spec_dict(data: Mapping[str, Any], source: str = "<spec>") -> SweepSpec:
    """Validate an already-parsed mapping that did not come from this sweeper's own storage: a
    spec a client sent, an importer's draft. (A record this sweeper stored is read by
    :func:`sweeper.spec.stored.load_stored`, without validating it again.) A normalised spec's
    schema version is checked (see ``_unstamped``). Pass-through Kubernetes objects are not checked
    against the client's models here: the trial runner never imports the kubernetes client."""
    return _Validator(Doc(source, {}), deep=False).spec(_unstamped(data, source))


def _unstamped(data: Any, source: str) -> Any:
    """A normalised spec (``SweepSpec.to_dict``) is a valid spec: its schema version is checked
    (one a newer sweeper wrote is refused), then left out."""
    if isinstance(data, Mapping) and SCHEMA_KEY in data:
        stored_schema(data, source)
        return {k: v for k, v in data.items() if k != SCHEMA_KEY}
    return data


# --------------------------------------------------------------------------- sections


class _Validator(Checks):
    def __init__(self, doc: Doc, *, deep: bool) -> None:
        super().__init__(doc)
        #: Check pass-through Kubernetes objects against the client's models.
        self.deep = deep

    def spec(self, data: Any) -> SweepSpec:
        m = self.mapping(data, (), TOP_KEYS)
        name = self.name(self.require(m, "name", ()), ("name",))
        method = self.choice(self.require(m, "method", ()), ("method",), METHODS)
        objectives = self.objectives(self.require(m, "objective", ()), ("objective",))
        params = parameters(self, self.require(m, "parameters", ()), ("parameters",), method)
        trial = self.trial(self.require(m, "trial", ()), ("trial",), params)
        open_ended = self.open_ended(m, method)
        trials = self.trials(m, method, params, open_ended=open_ended)
        parallelism = self.integer(m.get("parallelism", 1), ("parallelism",), 1)
        seed = self.integer(m.get("seed", 0), ("seed",), 0)
        method_fits(self, method, objectives)
        sampler = sampler_options(self, m.get("sampler"), ("sampler",), method,
                                  any(p.when for p in params))
        warned = tuple(sampler_warnings(self, method, sampler, params, trials)
                       + (grid_warnings(self, params, trials) if method == "grid" else []))
        pruner = self.pruner(m.get("pruner"), ("pruner",))
        if pruner.type != "none" and len(objectives) > 1:
            raise self.err(("pruner",), "pruning is not supported for multi-objective sweeps")
        storage = m.get("storage")
        if storage is not None:
            storage = self.storage_url(storage, ("storage",))
        description = m.get("description")
        if description is not None:
            description = self.string(description, ("description",))
        kube = kubernetes(self, m.get("kubernetes"), ("kubernetes",), deep=self.deep)
        if trial.nodes > 1 and kube.indexes_per_pod > 1:
            raise self.err(("kubernetes", "indexes_per_pod"), "a multi-node sweep's gangs run "
                                                              "their indexes in turn already: "
                                                              "leave indexes_per_pod out")
        if kube.runner_image is not None and (trial.command is None
                                              or trial.launcher != "process"):
            raise self.err(("kubernetes", "runner_image"),
                           "runs sweeper's runner beside a trial.command program in any image; "
                           + ("an entrypoint trial runs in kubernetes.image, which has sweeper"
                              if trial.command is None else
                              f"a {trial.launcher} launcher runs in kubernetes.image with "
                              "sweeper: leave runner_image out"))
        artifacts = artifacts_section(self, m.get("artifacts"), ("artifacts",))
        dataset = data_section(self, m.get("data"), ("data",), artifacts)
        stop = stop_spec(self, m.get("stop"), ("stop",), objectives)
        if open_ended:
            self.open_ended_fits(m, kube)
        scheduler = scheduler_spec(self, m.get("scheduler"), ("scheduler",), pruner, objectives,
                                   trial.nodes, population=(trials, parallelism))

        cost = cost_spec(self, m.get("cost"), ("cost",))
        budget = budget_spec(self, m.get("budget"), ("budget",), cost=cost, trial=trial)
        budget_with_trials(self, budget, trials, parallelism)  # open-ended: the ceiling
        return SweepSpec(
            name=name, method=method, objectives=objectives,  # type: ignore[arg-type]
            trials=trials, parameters=params, trial=trial, parallelism=parallelism, seed=seed,
            sampler=sampler, pruner=pruner, storage=storage, description=description,
            kubernetes=kube, artifacts=artifacts, data=dataset, source=self.doc.source,
            warnings=warned, stop=stop, scheduler=scheduler, budget=budget, cost=cost,
            open_ended=open_ended)

    def open_ended(self, m: Mapping[str, Any], method: str) -> bool:
        """``trials`` left out beside a ``budget:``: an adaptive method starts configurations
        until the budget is spent; a planned one (its sets are made up front) needs a count."""
        if m.get("trials") is not None or m.get("budget") is None or method == "grid":
            return False
        if method in PLANNED_METHODS:
            raise self.err(("trials",), f"missing required key 'trials': {method} sets are "
                                        "planned up front, so even with a budget the sweep needs "
                                        "a count (the budget stops it early, in index order); "
                                        "or use an adaptive method (tpe, ...) to search until "
                                        "the budget is spent")
        return True

    def open_ended_fits(self, m: Mapping[str, Any], kube: KubernetesSpec) -> None:
        """What an open-ended sweep cannot have: a PBT population (``trials`` members), several
        indexes per pod (its pods run index after index already)."""
        scheduler = m.get("scheduler")
        if isinstance(scheduler, dict) and scheduler.get("type") == "pbt":
            raise self.err(("trials",), "PBT trains a population of `trials` members at once: "
                                        "give trials (the budget still bounds the sweep)")
        if kube.indexes_per_pod > 1:
            raise self.err(("kubernetes", "indexes_per_pod"), "an open-ended sweep's pods run "
                                                              "index after index already: "
                                                              "leave indexes_per_pod out")

    def name(self, value: Any, path: Path_) -> str:
        name = self.string(value, path)
        problem = name_problem(name)
        if problem:
            fixed = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:MAX_NAME_LENGTH]
            fixed = fixed.rstrip("-")
            hint = f"; e.g. {fixed!r}" if fixed and fixed != name else ""
            if len(name) > MAX_NAME_LENGTH:
                raise self.err(path, f"sweep name {clip(name)} {problem} (it names "
                               "Kubernetes objects, which add suffixes)")
            raise self.err(path, f"sweep name {clip(name)} {problem}: use lowercase "
                           f"letters, digits and '-', starting and ending with a letter or "
                           f"digit (it names Kubernetes objects){hint}")
        return name

    def trials(self, m: Mapping[str, Any], method: str, params: tuple[Parameter, ...], *,
               open_ended: bool = False) -> int:
        """A grid defaults to all its points; other methods must say how many, unless the
        sweep is open-ended (its ceiling then)."""
        if open_ended:
            return MAX_INDEXES
        if method == "grid":
            size = grid_size_of(params, cap=MAX_INDEXES)
            if size > MAX_INDEXES:
                many = f"{size:,}" if not any(p.when for p in params) else \
                    f"more than {MAX_INDEXES:,} valid"
                raise self.err(("parameters",), f"the grid has {many} points; the limit is "
                                                f"{MAX_INDEXES:,} (use method: random or tpe)")
            trials = self.integer(m.get("trials", size), ("trials",), 1)
            if trials > size:
                raise self.err(("trials",), f"{trials} trials exceeds the grid size {size}")
            return trials
        trials = self.integer(self.require(m, "trials", ()), ("trials",), 1)
        if trials > MAX_INDEXES:
            raise self.err(("trials",), f"{trials:,} trials exceeds the limit of "
                                        f"{MAX_INDEXES:,} indexes per sweep")
        return trials

    def objectives(self, value: Any, path: Path_) -> tuple[Objective, ...]:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise self.err(path, "expected at least one {metric, direction}")
        out = []
        for i, item in enumerate(items):
            p = (*path, i) if isinstance(value, list) else path
            om = self.mapping(item, p, ("metric", "direction"))
            metric = metric_name(self, self.require(om, "metric", p), (*p, "metric"))
            direction = self.choice(self.require(om, "direction", p), (*p, "direction"),
                                    DIRECTIONS)
            out.append(Objective(metric, direction))  # type: ignore[arg-type]
        names = [o.metric for o in out]
        if len(set(names)) != len(names):
            raise self.err(path, "each objective must name a different metric")
        return tuple(out)

    # ---- trial

    def trial(self, value: Any, path: Path_, params: tuple[Parameter, ...]) -> TrialSpec:
        m = self.mapping(value, path, TRIAL_KEYS)
        entrypoint = m.get("entrypoint")
        command = m.get("command")
        if entrypoint is not None and command is not None:
            raise self.err((*path, "command"), "give entrypoint (module:function) or command "
                                               "(argv list), not both")
        if entrypoint is None and command is None:
            raise self.err(path, "missing entrypoint (module:function) or command (argv list)")
        fixed = self.plain({} if m.get("fixed") is None else m["fixed"], (*path, "fixed"))
        if not isinstance(fixed, dict):
            raise self.err((*path, "fixed"), f"expected a mapping, got {kind_of(fixed)}")
        names = {p.name for p in params}
        for k in fixed:
            if k in names:
                raise self.err((*path, "fixed", k), f"{k!r} is both a parameter and fixed")
        if entrypoint is not None:
            entrypoint = self.string(entrypoint, (*path, "entrypoint"))
            if not ENTRYPOINT_RE.match(entrypoint):
                raise self.err((*path, "entrypoint"), f"expected module:function, got "
                                                      f"{entrypoint!r}")
        cmd = None
        if command is not None:
            known = names | set(fixed) | set(TRIAL_VALUES)
            cmd = self.command(command, (*path, "command"), known)
        retries = self.integer(m.get("retries", 1), (*path, "retries"), 0)
        timeout = m.get("timeout")
        timeout_s = self.duration(timeout, (*path, "timeout")) if timeout is not None else None
        resources = self.resources(m.get("resources"), (*path, "resources"))
        launcher, nproc, nodes = launcher_fields(self, m, path, resources, cmd is not None)
        known = names | set(fixed) | set(TRIAL_VALUES)
        metrics = metrics_spec(self, m.get("metrics"), (*path, "metrics"), cmd is not None,
                               lambda text, p: self.placeholders(text, p, known),
                               names | set(fixed))
        code = m.get("code", ".")
        if code is not None:
            code = self.string(code, (*path, "code"))
        return TrialSpec(entrypoint=entrypoint, command=cmd, fixed=fixed, retries=retries,
                         launcher=launcher, nproc=nproc, nodes=nodes,  # type: ignore[arg-type]
                         timeout=timeout_s, resources=resources, metrics=metrics, code=code)

    def command(self, command: Any, path: Path_, known: set[str]) -> tuple[str, ...]:
        if not isinstance(command, list) or not command:
            raise self.err(path, "expected a non-empty list of strings (argv; no shell is "
                                 f"used), got {kind_of(command) if command else 'nothing'}")
        for i, arg in enumerate(command):
            if not isinstance(arg, (str, int, float)) or isinstance(arg, bool):
                raise self.err((*path, i), f"expected a string, got {kind_of(arg)}")
        cmd = tuple(str(a) for a in command)
        for i, arg in enumerate(cmd):
            self.placeholders(arg, (*path, i), known)
        return cmd

    def placeholders(self, arg: str, path: Path_, known: set[str]) -> None:
        """Every ``{name}`` in one argv element must name a parameter, a fixed value or one of
        :data:`TRIAL_VALUES` (index, trial_number, checkpoint_dir), exactly as
        ``str.format_map`` will fill it in."""
        literal = "write {{ and }} for literal braces"
        try:
            parsed = list(string.Formatter().parse(arg))
        except ValueError as e:
            raise self.err(path, f"bad placeholder in {clip(arg)}: {e}; {literal}") from None
        for _, ph, spec, conversion in parsed:
            if ph is None:
                continue
            if not PARAM_RE.match(ph):
                raise self.err(path, f"placeholder {{{clip(ph)[1:-1]}}} is not a parameter "
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
        m = self.mapping(value, path, RESOURCE_KEYS)
        gpu = self.gpu(m.get("gpu", 0), (*path, "gpu"))
        cpu = self.quantity(m.get("cpu"), (*path, "cpu"))
        memory = self.quantity(m.get("memory"), (*path, "memory"))
        return Resources(gpu=gpu, cpu=cpu, memory=memory)

    def gpu(self, value: Any, path: Path_) -> int | float:
        """A whole number of GPUs, or a fraction 1/k (k trials share a GPU, locally)."""
        gpu = self.number(value, path)
        if gpu < 0:
            raise self.err(path, f"must be >= 0, got {gpu}")
        if gpu == int(gpu):
            return int(gpu)
        share = 1 / gpu
        if gpu > 1 or abs(share - round(share)) > 1e-6:
            raise self.err(path, f"expected a whole number of GPUs or a fraction 1/k like 0.5 "
                                 f"or 0.25 (k trials per GPU), got {gpu}")
        return gpu

    def quantity(self, value: Any, path: Path_) -> str | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.err(path, f"expected a quantity like 2, 500m or 4Gi, got "
                                 f"{kind_of(value)}")
        text = str(value)
        if not QUANTITY_RE.match(text) or float(re.sub(r"[A-Za-z]+$", "", text)) <= 0:
            raise self.err(path, f"expected a positive quantity like 2, 500m or 4Gi, got {text!r}")
        return text

    # ---- pruner: checked by building it, through the runner's registry (sampler: _sampler)

    def pruner(self, value: Any, path: Path_) -> Pruner:
        if value is None:
            return Pruner()
        m = self.plain(self.mapping(value, path), path)
        ptype = self.choice(self.require(m, "type", path), (*path, "type"), registry.PRUNERS)
        options = {k: v for k, v in m.items() if k != "type"}
        if options and ptype == "none":
            raise self.err((*path, next(iter(options))), "pruner type none takes no options")
        if ptype != "none":
            cls = registry.pruner_class(ptype)
            self.mapping(options, path, ["type", *sorted(registry.keyword_names(cls))])
            class_options(self, options, path, cls)
            for name, (_, required) in registry.option_types(cls).items():
                if required and name not in options:
                    raise self.err(path, f"the {ptype} pruner needs option {name!r}")
            try:
                registry.build_pruner(ptype, options)
            except (TypeError, ValueError) as e:
                raise self.err(path, f"invalid {ptype} pruner options: {e}") from None
        return Pruner(ptype, options)

    def storage_url(self, value: Any, path: Path_) -> str:
        url = self.string(value, path)
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in STORAGE_SCHEMES:
            raise self.err(path, f"unsupported storage URL scheme {scheme or url!r}; use "
                                 "sqlite:///path.db or postgresql://user:password@host/db "
                                 "(or a sweeper proxy's grpc://host:port)")
        return url
