"""Validation of every section but ``parameters:`` (see ``_parameters``), and the entry points
that read a file, a YAML text or a stored mapping into a :class:`SweepSpec`.

Every error is a :class:`SpecError` naming the file, the line (when the YAML node is known)
and the dotted field, so a typo is one clear line and never a traceback.
"""

from __future__ import annotations

import difflib
import re
import string
import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from sweeper.errors import SpecError
from sweeper.protocol import RESERVED_ENV
from sweeper.spec import registry
from sweeper.spec._parameters import parameters
from sweeper.spec._primitives import (
    ENTRYPOINT_RE,
    ENV_NAME_RE,
    NAME_RE,
    PARAM_RE,
    QUANTITY_RE,
    Checks,
    clip,
    describe_types,
    kind_of,
    name_problem,
    option_ok,
    parse_proxy_address,
)
from sweeper.spec._yaml import Path_, _Doc, _load_yaml
from sweeper.spec.model import (
    ARTIFACT_STORES,
    DIRECTIONS,
    MAX_INDEXES,
    MAX_NAME_LENGTH,
    METHODS,
    STORAGE_SCHEMES,
    ArtifactsSpec,
    KubernetesSpec,
    Objective,
    Parameter,
    Pruner,
    Resources,
    SweepSpec,
    TrialSpec,
)

_TOP_KEYS = ("name", "description", "method", "objective", "trials", "parallelism", "seed",
             "sampler", "pruner", "storage", "trial", "parameters", "kubernetes", "artifacts")
_TRIAL_KEYS = ("entrypoint", "command", "fixed", "retries", "timeout", "resources")
_RESOURCE_KEYS = ("gpu", "cpu", "memory")
_K8S_KEYS = ("image", "image_pull_policy", "namespace", "storage_secret", "storage_secret_key",
             "service_account", "node_selector", "tolerations", "image_pull_secrets", "env",
             "indexes_per_pod", "active_deadline", "ttl_after_finished", "storage_proxy")
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
_ARTIFACT_KEYS = ("store", "path", "bucket", "prefix", "endpoint_url", "region",
                  "credentials_secret")
_CREDENTIAL_KEYS = ("access_key", "secret_key", "access_key_id", "secret_access_key",
                    "aws_access_key_id", "aws_secret_access_key", "session_token",
                    "aws_session_token", "password", "token", "credentials")
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


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


# --------------------------------------------------------------------------- sections


class _Validator(Checks):
    def spec(self, data: Any) -> SweepSpec:
        m = self.mapping(data, (), _TOP_KEYS)
        name = self.name(self.require(m, "name", ()), ("name",))
        method = self.choice(self.require(m, "method", ()), ("method",), METHODS)
        objectives = self.objectives(self.require(m, "objective", ()), ("objective",))
        params = parameters(self, self.require(m, "parameters", ()), ("parameters",), method)
        trial = self.trial(self.require(m, "trial", ()), ("trial",), params)
        trials = self.trials(m, method, params)
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

    def trials(self, m: Mapping[str, Any], method: str, params: tuple[Parameter, ...]) -> int:
        """A grid defaults to all its points; other methods must say how many."""
        if method == "grid":
            from sweeper.space import grid_size_of  # lazy: sweeper.space imports this package

            size = grid_size_of(params)
            if size > MAX_INDEXES:
                raise self.err(("parameters",), f"the grid has {size:,} points; the limit is "
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
            metric = self.string(self.require(om, "metric", p), (*p, "metric"))
            if not PARAM_RE.match(metric):
                raise self.err((*p, "metric"), f"metric name {metric!r} must be an identifier "
                                               "(letters, digits, _)")
            direction = self.choice(self.require(om, "direction", p), (*p, "direction"),
                                    DIRECTIONS)
            out.append(Objective(metric, direction))  # type: ignore[arg-type]
        names = [o.metric for o in out]
        if len(set(names)) != len(names):
            raise self.err(path, "each objective must name a different metric")
        return tuple(out)

    # ---- trial

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
            known = names | set(fixed) | {"index", "trial_number"}
            cmd = self.command(command, (*path, "command"), known)
        retries = self.integer(m.get("retries", 1), (*path, "retries"), 0)
        timeout = m.get("timeout")
        timeout_s = self.duration(timeout, (*path, "timeout")) if timeout is not None else None
        resources = self.resources(m.get("resources"), (*path, "resources"))
        return TrialSpec(entrypoint=entrypoint, command=cmd, fixed=fixed, retries=retries,
                         timeout=timeout_s, resources=resources)

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
        """Every ``{name}`` in one argv element must name a parameter, a fixed value, index or
        trial_number, exactly as ``str.format_map`` will fill it in."""
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
        m = self.mapping(value, path, _RESOURCE_KEYS)
        gpu = self.integer(m.get("gpu", 0), (*path, "gpu"), 0)
        cpu = self.quantity(m.get("cpu"), (*path, "cpu"))
        memory = self.quantity(m.get("memory"), (*path, "memory"))
        return Resources(gpu=gpu, cpu=cpu, memory=memory)

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

    # ---- sampler and pruner: checked by building them, through the runner's registry

    def sampler(self, value: Any, path: Path_, method: str) -> dict[str, Any]:
        if value is None:
            return {}
        m = self.plain(self.mapping(value, path), path)
        if m and method != "tpe":
            raise self.err(path, f"sampler options apply to method tpe only; {method} sets are "
                                 "fixed by (seed, index)")
        if m:
            cls = registry.sampler_class("tpe")
            allowed = registry.keyword_names(cls) - registry.TPE_RESERVED
            self.mapping(m, path, sorted(allowed))
            self.options(m, path, cls)
            if m.get("n_ei_candidates", 1) < 1:
                raise self.err((*path, "n_ei_candidates"), f"must be >= 1, got "
                                                           f"{m['n_ei_candidates']}")
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    registry.build_sampler("tpe", m, seed=None)
            except (TypeError, ValueError) as e:
                raise self.err(path, f"invalid tpe sampler options: {e}") from None
        return m

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
            self.options(options, path, cls)
            for name, (_, required) in registry.option_types(cls).items():
                if required and name not in options:
                    raise self.err(path, f"the {ptype} pruner needs option {name!r}")
            try:
                registry.build_pruner(ptype, options)
            except (TypeError, ValueError) as e:
                raise self.err(path, f"invalid {ptype} pruner options: {e}") from None
        return Pruner(ptype, options)

    def options(self, m: Mapping[str, Any], path: Path_, cls: type) -> None:
        """Check keyword options against the types an Optuna class declares (a string where
        an int belongs would otherwise only fail inside a running trial)."""
        types = registry.option_types(cls)
        for k, v in m.items():
            want = types[k][0] if k in types else frozenset()
            if not option_ok(v, want):
                raise self.err((*path, k), f"expected {describe_types(want)}, got {kind_of(v)}")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
                raise self.err((*path, k), f"must be >= 0, got {v}")

    def storage_url(self, value: Any, path: Path_) -> str:
        url = self.string(value, path)
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme not in STORAGE_SCHEMES:
            raise self.err(path, f"unsupported storage URL scheme {scheme or url!r}; use "
                                 "sqlite:///path.db or postgresql://user:password@host/db "
                                 "(or a sweeper proxy's grpc://host:port)")
        return url

    # ---- kubernetes

    def kubernetes(self, value: Any, path: Path_) -> KubernetesSpec:
        if value is None:
            return KubernetesSpec()
        m = self.mapping(value, path, _K8S_KEYS)
        kw = self.k8s_names(m, path)
        if "node_selector" in m:
            ns = self.mapping(m["node_selector"], (*path, "node_selector"))
            kw["node_selector"] = {str(k): self.string(str(v) if isinstance(v, (int, float))
                                                       else v, (*path, "node_selector", k))
                                   for k, v in ns.items()}
        if "tolerations" in m:
            tols = m["tolerations"]
            if not isinstance(tols, list):
                raise self.err((*path, "tolerations"), f"expected a list, got {kind_of(tols)}")
            kw["tolerations"] = tuple(self.toleration(t, (*path, "tolerations", i))
                                      for i, t in enumerate(tols))
        if "image_pull_secrets" in m:
            ips = m["image_pull_secrets"]
            if not isinstance(ips, list):
                raise self.err((*path, "image_pull_secrets"), "expected a list of secret names, "
                                                              f"got {kind_of(ips)}")
            kw["image_pull_secrets"] = tuple(self.string(s, (*path, "image_pull_secrets", i))
                                             for i, s in enumerate(ips))
        if "env" in m:
            kw["env"] = self.env(m["env"], (*path, "env"))
        if "indexes_per_pod" in m:
            kw["indexes_per_pod"] = self.integer(m["indexes_per_pod"], (*path, "indexes_per_pod"),
                                                 1)
        for key in ("active_deadline", "ttl_after_finished"):
            if key in m:
                kw[key] = self.duration(m[key], (*path, key))
        if "storage_proxy" in m:
            try:
                kw["storage_proxy"] = parse_proxy_address(
                    self.string(m["storage_proxy"], (*path, "storage_proxy")))
            except ValueError as e:
                raise self.err((*path, "storage_proxy"), str(e)) from None
        return replace(KubernetesSpec(), **kw)

    def k8s_names(self, m: Mapping[str, Any], path: Path_) -> dict[str, Any]:
        """The string settings: image, pull policy and the names of Kubernetes objects."""
        kw: dict[str, Any] = {}
        for key in ("image", "image_pull_policy", "namespace", "storage_secret",
                    "storage_secret_key", "service_account"):
            if key in m:
                kw[key] = self.string(m[key], (*path, key))
        if "image_pull_policy" in kw:
            self.choice(kw["image_pull_policy"], (*path, "image_pull_policy"),
                        ("Always", "IfNotPresent", "Never"))
        for key in ("namespace", "storage_secret", "service_account"):
            if key in kw and not NAME_RE.match(kw[key]):
                raise self.err((*path, key), f"{kw[key]!r} is not a valid Kubernetes name")
        return kw

    def env(self, value: Any, path: Path_) -> dict[str, str]:
        env = self.mapping(value, path)
        out = {}
        for k, v in env.items():
            if not ENV_NAME_RE.match(k):
                raise self.err((*path, k), f"{k!r} is not a valid env var name")
            if k in RESERVED_ENV:
                raise self.err((*path, k), f"{k} is set by sweeper itself")
            if isinstance(v, (dict, list)) or v is None:
                raise self.err((*path, k), f"expected a string, got {kind_of(v)}")
            out[k] = str(v).lower() if isinstance(v, bool) else str(v)
        return out

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

    # ---- artifacts

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
        return self.s3(m, path)

    def s3(self, m: Mapping[str, Any], path: Path_) -> ArtifactsSpec:
        bucket = self.string(self.require(m, "bucket", path), (*path, "bucket"))
        if not _BUCKET_RE.match(bucket) or ".." in bucket:
            raise self.err((*path, "bucket"), f"{bucket!r} is not a valid bucket name (3-63 "
                                              "lowercase letters, digits, '.' and '-')")
        prefix = m.get("prefix")
        prefix = self.string(prefix, (*path, "prefix")).strip("/") if prefix is not None else ""
        endpoint = m.get("endpoint_url")
        if endpoint is not None:
            endpoint = self.endpoint_url(endpoint, (*path, "endpoint_url"))
        region = m.get("region")
        if region is not None:
            region = self.string(region, (*path, "region"))
        secret = m.get("credentials_secret")
        if secret is not None:
            secret = self.string(secret, (*path, "credentials_secret"))
            if not NAME_RE.match(secret):
                raise self.err((*path, "credentials_secret"),
                               f"{secret!r} is not a valid Kubernetes name")
        return ArtifactsSpec(store="s3", bucket=bucket, prefix=prefix, endpoint_url=endpoint,
                             region=region, credentials_secret=secret)

    def endpoint_url(self, value: Any, path: Path_) -> str:
        endpoint = self.string(value, path)
        if not re.match(r"^https?://[^/\s]+", endpoint):
            raise self.err(path, f"expected http(s)://host[:port], got {endpoint!r}")
        if "@" in endpoint.split("://", 1)[1].split("/", 1)[0]:
            raise self.err(path, "credentials never go in the spec: remove user:password@ and "
                                 "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
                                 "environment")
        return endpoint

