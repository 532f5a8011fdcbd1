"""Object store of the fake API server: typed resources, resourceVersions, watch history,
label/field selectors and the `Status` errors a real kube-apiserver returns.

Everything here runs under one lock (`Store.cv`); callers hold it while they read or
mutate objects, and every write goes through `create`/`touch`/`remove` so that watchers
see the same event stream a real server would send.
"""

from __future__ import annotations

import builtins
import copy
import datetime as _dt
import json
import random
import re
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

#: Characters the apiserver uses for generateName suffixes (no vowels, no confusables).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATED_PREFIX = 58
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def now_rfc3339() -> str:
    """Seconds precision, `Z` suffix: the format of every Kubernetes timestamp."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(n: int = 5) -> str:
    return "".join(random.choice(_NAME_ALPHABET) for _ in range(n))


def generate_name(prefix: str) -> str:
    return prefix[:_MAX_GENERATED_PREFIX] + random_suffix()


@dataclass(frozen=True)
class ResourceType:
    plural: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`jobs.batch`, `pods`: how the apiserver names a resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """`Job.batch`, `Pod`: how validation errors name a kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


RESOURCES: dict[tuple[str, str], ResourceType] = {
    (rt.group, rt.plural): rt
    for rt in (
        ResourceType("namespaces", "Namespace", "", "v1", namespaced=False),
        ResourceType("pods", "Pod", "", "v1"),
        ResourceType("secrets", "Secret", "", "v1"),
        ResourceType("configmaps", "ConfigMap", "", "v1"),
        ResourceType("events", "Event", "", "v1"),
        ResourceType("jobs", "Job", "batch", "v1"),
    )
}
JOBS = RESOURCES[("batch", "jobs")]
PODS = RESOURCES[("", "pods")]
SECRETS = RESOURCES[("", "secrets")]
CONFIGMAPS = RESOURCES[("", "configmaps")]
NAMESPACES = RESOURCES[("", "namespaces")]
EVENTS = RESOURCES[("", "events")]


# --------------------------------------------------------------------------- errors


class _Omit:
    """Marks an Invalid error whose value is not shown (field.OmitValueType)."""


OMIT = _Omit()


@dataclass
class FieldError:
    """One entry of `details.causes` of an Invalid status (k8s.io/apimachinery field.Error)."""

    type: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, ...
    field: str
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()

    def message(self) -> str:
        if self.type == "FieldValueRequired":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        if self.type == "FieldValueNotSupported":
            values = ", ".join(json.dumps(v) for v in self.supported)
            return f"Unsupported value: {_fmt(self.value)}: supported values: {values}"
        if self.type == "FieldValueForbidden":
            return "Forbidden" + (f": {self.detail}" if self.detail else "")
        if self.type == "FieldValueDuplicate":
            return f"Duplicate value: {_fmt(self.value)}"
        if self.type == "FieldValueNotFound":
            return f"Not found: {_fmt(self.value)}"
        if self.value is OMIT:
            return f"Invalid value: {self.detail}"
        return f"Invalid value: {_fmt(self.value)}" + (f": {self.detail}" if self.detail else "")

    def cause(self) -> Obj:
        return {"reason": self.type, "message": self.message(), "field": self.field}


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", path, detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, detail, value)


def not_supported(path: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    return FieldError("FieldValueNotSupported", path, value=value, supported=supported)


def forbidden_field(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, detail)


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class ApiError(Exception):
    """Raised anywhere in request handling; becomes a `Status` response."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> Obj:
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _details(rt: ResourceType, name: str | None) -> Obj:
    d: Obj = {}
    if name:
        d["name"] = name
    if rt.group:
        d["group"] = rt.group
    d["kind"] = rt.plural
    return d


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        _details(rt, name),
    )


def invalid_object(rt: ResourceType, name: str, errors: list[FieldError]) -> ApiError:
    parts = [f"{e.field}: {e.message()}" for e in errors]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: Obj = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = [e.cause() for e in errors]
    return ApiError(422, "Invalid", f'{rt.qualified_kind} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(
    rt: ResourceType, verb: str, user: str, namespace: str | None, name: str | None,
    subresource: str | None,
) -> ApiError:
    resource = rt.plural + (f"/{subresource}" if subresource else "")
    who = f'{rt.qualified} "{name}"' if name else rt.qualified
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    msg = (
        f'{who} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{rt.group}" {where}'
    )
    return ApiError(403, "Forbidden", msg, _details(rt, name))


# --------------------------------------------------------------------------- selectors

_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


def parse_label_selector(selector: str | None) -> list[Requirement]:
    """Equality- and set-based selectors, as `kubectl -l` and the apiserver accept them."""
    if not selector:
        return []
    reqs: list[Requirement] = []
    for term in _split_terms(selector):
        m = _SET_RE.match(term)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(m.group(1), m.group(2), values))
        elif "!=" in term:
            k, v = term.split("!=", 1)
            reqs.append(Requirement(k.strip(), "!=", (v.strip(),)))
        elif "==" in term:
            k, v = term.split("==", 1)
            reqs.append(Requirement(k.strip(), "=", (v.strip(),)))
        elif "=" in term:
            k, v = term.split("=", 1)
            reqs.append(Requirement(k.strip(), "=", (v.strip(),)))
        elif term.startswith("!"):
            reqs.append(Requirement(term[1:].strip(), "!"))
        else:
            reqs.append(Requirement(term, "exists"))
    for r in reqs:
        if not r.key or any(c in r.key for c in " ()=!"):
            raise bad_request(f"unable to parse requirement: invalid label key {r.key!r}")
    return reqs


def parse_field_selector(selector: str | None) -> list[tuple[str, str, str]]:
    if not selector:
        return []
    out = []
    for term in _split_terms(selector):
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "==" in term or "=" in term:
            k, v = term.split("==", 1) if "==" in term else term.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        else:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
    return out


def field_value(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def matches(obj: Obj, labels: list[Requirement], fields: list[tuple[str, str, str]]) -> bool:
    obj_labels = obj.get("metadata", {}).get("labels") or {}
    if not all(r.matches(obj_labels) for r in labels):
        return False
    for path, op, value in fields:
        actual = field_value(obj, path)
        if (actual == value) != (op == "="):
            return False
    return True


# --------------------------------------------------------------------------- store


@dataclass
class WatchEvent:
    rv: int
    resource: str
    namespace: str
    type: str
    object: Obj


@dataclass
class Store:
    """All objects by resource plural, keyed by (namespace, name); cluster scope uses ns ""."""

    history_size: int = 20000
    cv: threading.Condition = field(default_factory=lambda: threading.Condition(threading.RLock()))
    objects: dict[str, dict[tuple[str, str], Obj]] = field(default_factory=dict)
    rv: int = 0
    history: deque[WatchEvent] = field(default_factory=deque)
    #: Watches from a resourceVersion below this one get 410 Gone.
    oldest_rv: int = 0
    #: uid -> resourceVersion at creation, to order objects created in the same second.
    created_seq: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rt in RESOURCES.values():
            self.objects.setdefault(rt.plural, {})

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self.objects[rt.plural].get((namespace if rt.namespaced else "", name))

    def list(self, rt: ResourceType, namespace: str | None = None) -> list[Obj]:
        items = [
            o for (ns, _), o in self.objects[rt.plural].items()
            if namespace is None or not rt.namespaced or ns == namespace
        ]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return items

    def _record(self, rt: ResourceType, etype: str, obj: Obj) -> None:
        full = copy.deepcopy(obj)
        full["apiVersion"] = rt.api_version
        full["kind"] = rt.kind
        ev = WatchEvent(self.rv, rt.plural, obj["metadata"].get("namespace", ""), etype, full)
        self.history.append(ev)
        while len(self.history) > self.history_size:
            self.oldest_rv = self.history.popleft().rv
        self.cv.notify_all()

    def create(self, rt: ResourceType, obj: Obj) -> Obj:
        """Stores `obj` (already named and validated), filling server-set metadata."""
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        if key in self.objects[rt.plural]:
            raise already_exists(rt, meta["name"])
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["creationTimestamp"] = now_rfc3339()
        meta["resourceVersion"] = str(self.next_rv())
        self.created_seq[meta["uid"]] = self.rv
        if rt.plural in ("jobs",):
            meta["generation"] = 1
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        self.objects[rt.plural][key] = obj
        self._record(rt, "ADDED", obj)
        return obj

    def touch(self, rt: ResourceType, obj: Obj) -> None:
        """Call after mutating a stored object in place: new resourceVersion, MODIFIED event."""
        obj["metadata"]["resourceVersion"] = str(self.next_rv())
        self._record(rt, "MODIFIED", obj)

    def remove(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        if self.objects[rt.plural].get(key) is not obj:
            return
        del self.objects[rt.plural][key]
        meta["resourceVersion"] = str(self.next_rv())
        self._record(rt, "DELETED", obj)

    def events_since(
        self, rv: int, resource: str, namespace: str | None
    ) -> builtins.list[WatchEvent]:
        return [
            e for e in self.history
            if e.rv > rv and e.resource == resource
            and (namespace is None or e.namespace == namespace)
        ]
