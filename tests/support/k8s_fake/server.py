"""A stateful fake kube-apiserver for tests: HTTP on 127.0.0.1 that the official
`kubernetes` client talks to, a Job controller and a "kubelet" that runs pods as local
processes. Test double only; never a sweeper backend.

    with FakeKubeAPI(workdir=repo) as fake:
        fake.add_namespace("sweeps")
        fake.add_secret("sweeps", "db", {"url": "sqlite:///x.db"})
        kubernetes.config.load_kube_config(config_file=str(fake.write_kubeconfig(tmp / "kc")))
        ... create a Job with the real client ...
        job = fake.wait_for_job("sweeps", "my-job", timeout=30)
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import copy
import json
import os
import select
import shutil
import socket
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from .controller import (
    JobController,
    delete_pod,
    drop_finalizer,
    job_finished,
)
from .kubelet import Kubelet
from .store import (
    JOBS,
    NAMESPACES,
    OMIT,
    PODS,
    RESOURCES,
    SECRETS,
    ApiError,
    FieldError,
    Obj,
    ResourceType,
    Store,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    generate_name,
    invalid,
    invalid_object,
    matches,
    not_found,
    now_rfc3339,
    parse_field_selector,
    parse_label_selector,
    required,
)
from .validation import (
    JOB_NAME_KEY,
    JOB_TRACKING_FINALIZER,
    default_job,
    default_pod_spec,
    prepare_job_for_create,
    validate_job,
    validate_labels,
    validate_name,
    validate_pod_spec,
)

SERVER_VERSION = {
    "major": "1", "minor": "33", "gitVersion": "v1.33.0-fake", "gitCommit": "0" * 40,
    "gitTreeState": "clean", "buildDate": "2025-04-23T00:00:00Z", "goVersion": "go1.24.2",
    "compiler": "gc", "platform": "linux/amd64",
}
DEFAULT_USER = "system:serviceaccount:sweeper:sweeper"
JOB_ORPHAN_WARNING = (
    '299 - "child pods are preserved by default when jobs are deleted; set '
    'propagationPolicy=Background to remove them or set propagationPolicy=Orphan to '
    'suppress this warning"'
)
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
               "deletionGracePeriodSeconds", "generation", "managedFields", "selfLink")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass(frozen=True)
class _Rule:
    verb: str
    resource: str
    namespace: str | None


@dataclass
class _Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


class _Response:
    def __init__(self, code: int, body: Obj | str, headers: dict[str, str] | None = None,
                 stream: Callable[[_Handler], None] | None = None) -> None:
        self.code = code
        self.body = body
        self.headers = headers or {}
        self.stream = stream


class FakeKubeAPI:
    """The fake cluster. All state lives in memory; pods run under a temporary directory."""

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        extra_env: dict[str, str] | None = None,
        poll_interval: float = 0.05,
        *,
        user: str = DEFAULT_USER,
        token: str = "fake-token",
        honour_ttl: bool = False,
        max_grace_seconds: float = 2.0,
        image_entrypoints: dict[str, list[str]] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.workdir = Path(workdir or os.getcwd()).resolve()
        self.poll_interval = poll_interval
        self.user = user
        self.token = token
        self.store = Store()
        self._own_state_dir = state_dir is None
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="k8s-fake-"))
        (self.state_dir / "pods").mkdir(parents=True, exist_ok=True)
        base_env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "HOME", "LANG")
                    if k in os.environ}
        base_env.update(extra_env or {})
        self.kubelet = Kubelet(self.store, self.state_dir, self.workdir, base_env,
                               dict(image_entrypoints or {}), max_grace_seconds)
        self.controller = JobController(self.store, self.kubelet, honour_ttl=honour_ttl)
        self.requests: list[tuple[str, str]] = []
        self.request_log: list[RecordedRequest] = []
        self._rules: list[_Rule] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FakeKubeAPI:
        if self._httpd is not None:
            return self
        handler = type("_BoundHandler", (_Handler,), {"fake": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        for target, name in ((lambda: httpd.serve_forever(poll_interval=0.05), "k8s-fake-http"),
                             (self._loop, "k8s-fake-controllers")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        atexit.register(self.stop)  # never leave pod processes behind a crashed test run
        return self

    def stop(self) -> None:
        """Kill every pod process and shut the server down. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        atexit.unregister(self.stop)
        self._wake.set()
        with self.store.cv:
            self.store.cv.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self._conns_lock:
            for conn in list(self._conns):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(timeout=10)
        with self.store.cv:
            self.kubelet.shutdown()
        if self._own_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def track_connection(self, conn: socket.socket, *, open_: bool) -> None:
        """Remember (``open_``) or forget a client connection, so :meth:`stop` can shut the
        ones still open (a watch would otherwise keep its handler thread alive)."""
        with self._conns_lock:
            if open_:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def __enter__(self) -> FakeKubeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("FakeKubeAPI.start() first")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def write_kubeconfig(
        self, path: str | os.PathLike[str], namespace: str = "default"
    ) -> Path:
        """A kubeconfig whose current context points at this server (plain HTTP, token)."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {
                "cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
            "preferences": {},
        }
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return p

    def _loop(self) -> None:
        while not self._stopping.is_set():
            with self.store.cv:
                try:
                    self.kubelet.sync()
                    self.controller.sync()
                    self.kubelet.sync()  # start the pods just created
                except Exception:  # a bug in the fake must not stop the cluster: show it, go on
                    traceback.print_exc()
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    # ----------------------------------------------------------------- test helpers

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> Obj:
        with self.store.cv:
            return copy.deepcopy(self._create_namespace(
                {"metadata": {"name": name, "labels": dict(labels or {})}}))

    def add_secret(
        self, namespace: str, name: str, data: dict[str, str], type: str = "Opaque"
    ) -> Obj:
        enc = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        obj = {"metadata": {"name": name, "namespace": namespace}, "type": type, "data": enc}
        with self.store.cv:
            return copy.deepcopy(self.store.create(SECRETS, obj))

    def add_configmap(self, namespace: str, name: str, data: dict[str, str]) -> Obj:
        obj = {"metadata": {"name": name, "namespace": namespace}, "data": dict(data)}
        with self.store.cv:
            return copy.deepcopy(self.store.create(RESOURCES[("", "configmaps")], obj))

    def forbid(self, verb: str, resource: str, namespace: str | None = None) -> None:
        """Matching requests get 403 Forbidden (RBAC denial). `*` matches any verb/resource;
        resource is a plural (`jobs`, `pods`), optionally `pods/log` or `jobs.batch`."""
        self._rules.append(_Rule(verb, resource, namespace))

    def allow_all(self) -> None:
        self._rules.clear()

    def disrupt(self, pod_name: str, namespace: str | None = None,
                reason: str = "PreemptionByScheduler") -> None:
        """Preempt a pod: condition DisruptionTarget=True, SIGKILL, pod deleted."""
        with self.store.cv:
            pod = self._find_pod(pod_name, namespace)
            conds = pod.setdefault("status", {}).setdefault("conditions", [])
            conds[:] = [c for c in conds if c.get("type") != "DisruptionTarget"]
            conds.append({"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": now_rfc3339(), "reason": reason,
                          "message": "fake: the pod was disrupted (simulated preemption)"})
            self.store.touch(PODS, pod)
            delete_pod(self.store, self.kubelet, pod, grace=0)
        self.wake()

    def jobs(self, namespace: str) -> list[Obj]:
        with self.store.cv:
            return copy.deepcopy(self.store.list(JOBS, namespace))

    def job(self, namespace: str, name: str) -> Obj | None:
        with self.store.cv:
            return copy.deepcopy(self.store.get(JOBS, namespace, name))

    def pods(self, namespace: str, job: str | None = None) -> list[Obj]:
        """Pods of a namespace (of one Job), oldest first."""
        with self.store.cv:
            pods = [p for p in self.store.list(PODS, namespace)
                    if job is None or (p["metadata"].get("labels") or {}).get(JOB_NAME_KEY) == job]
            pods.sort(key=lambda p: self.store.created_seq.get(p["metadata"]["uid"], 0))
            return copy.deepcopy(pods)

    def pod_log(self, namespace: str, name: str, container: str | None = None) -> str:
        """Combined stdout+stderr; also for pods already deleted from the API."""
        with self.store.cv:
            logs = self.kubelet.logs.get((namespace, name))
        if logs is None:
            raise KeyError(f"no pod {namespace}/{name} was ever started")
        path = logs[container] if container else next(iter(logs.values()))
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        """Block until `predicate()` (evaluated under the store lock) is true."""
        deadline = time.monotonic() + timeout
        with self.store.cv:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("condition not met in time")
                self.store.cv.wait(min(left, 0.2))

    def wait_for_job(self, namespace: str, name: str, timeout: float = 30.0) -> Obj:
        """The Job once it has a Complete or Failed condition."""
        deadline = time.monotonic() + timeout
        with self.store.cv:
            while True:
                job = self.store.get(JOBS, namespace, name)
                if job is not None and job_finished(job):
                    return copy.deepcopy(job)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(self._describe(namespace, name, job))
                self.store.cv.wait(min(left, 0.2))

    def _describe(self, namespace: str, name: str, job: Obj | None) -> str:
        lines = [f"job {namespace}/{name} not finished; status: "
                 + json.dumps(job.get("status") if job else None)]
        for p in self.store.list(PODS, namespace):
            if (p["metadata"].get("labels") or {}).get(JOB_NAME_KEY) != name:
                continue
            st = p.get("status", {})
            states = [cs.get("state") for cs in st.get("containerStatuses") or []]
            lines.append(f"  pod {p['metadata']['name']}: {st.get('phase')} {json.dumps(states)}")
            for path in self.kubelet.logs.get((namespace, p["metadata"]["name"]), {}).values():
                if path.exists():
                    lines.append("    log: " + path.read_text(errors="replace")[-500:])
        return "\n".join(lines)

    # ----------------------------------------------------------------- request handling

    def _record(self, method: str, path: str, query: dict[str, str], body: Any) -> None:
        self.requests.append((method, path))
        self.request_log.append(RecordedRequest(method, path, query, body))

    def _check_forbidden(self, verb: str, route: _Route) -> None:
        rt = route.rt
        names = {rt.plural, rt.qualified}
        if route.subresource:
            names = {f"{n}/{route.subresource}" for n in names}
        for rule in self._rules:
            if rule.verb not in ("*", verb):
                continue
            if rule.resource != "*" and rule.resource not in names:
                continue
            if rule.namespace is not None and rule.namespace != route.namespace:
                continue
            raise forbidden(rt, verb, self.user, route.namespace,
                            route.name, route.subresource)

    def _find_pod(self, name: str, namespace: str | None) -> Obj:
        for pod in self.store.list(PODS, namespace):
            if pod["metadata"]["name"] == name:
                return pod
        raise KeyError(f"no pod named {name!r}")

    def handle(self, method: str, raw_path: str, headers: Any, body: bytes) -> _Response:
        parts = urlsplit(raw_path)
        path = parts.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        parsed_body = _parse_body(body, headers.get("Content-Type", ""))
        self._record(method, path, query, parsed_body)
        static = _static_route(path)
        if static is not None:
            return _Response(200, static)
        route = _route(path)
        verb = _verb(method, route, query)
        self._check_forbidden(verb, route)
        rt = route.rt
        with self.store.cv:
            try:
                if verb == "watch":
                    return self._watch(route, query)
                if verb == "list":
                    return self._list(route, query)
                if verb == "create":
                    return self._create(route, parsed_body, query)
                if verb == "get":
                    return self._get(route, query)
                if verb == "delete":
                    return self._delete(route, parsed_body, query, method)
                if verb in ("update", "patch"):
                    return self._update(route, parsed_body, query, verb,
                                        headers.get("Content-Type", ""))
                if verb == "deletecollection":
                    return self._delete_collection(route, parsed_body, query)
            finally:
                self.wake()
        raise ApiError(405, "MethodNotAllowed",
                       f"the server does not allow this method on the requested resource "
                       f"({rt.plural})")

    # -- reads

    def _get_obj(self, route: _Route) -> Obj:
        assert route.name is not None
        obj = self.store.get(route.rt, route.namespace or "", route.name)
        if obj is None:
            raise not_found(route.rt, route.name)
        return obj

    def _get(self, route: _Route, query: dict[str, str]) -> _Response:
        obj = self._get_obj(route)
        if route.subresource == "log":
            return self._log(obj, query)
        if route.subresource not in (None, "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return _Response(200, copy.deepcopy(obj))

    def _select(self, route: _Route, query: dict[str, str]) -> list[Obj]:
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        return [o for o in self.store.list(route.rt, route.namespace)
                if matches(o, labels, fields)]

    def _list(self, route: _Route, query: dict[str, str]) -> _Response:
        items = self._select(route, query)
        start = 0
        if query.get("continue"):
            try:
                start = int(base64.b64decode(query["continue"]).decode())
            except (ValueError, binascii.Error) as e:
                raise bad_request("invalid continue token") from e
        meta: Obj = {"resourceVersion": str(self.store.rv)}
        limit = int(query.get("limit") or 0)
        page = items[start:]
        if limit and len(page) > limit:
            page = page[:limit]
            meta["continue"] = base64.b64encode(str(start + limit).encode()).decode()
            meta["remainingItemCount"] = len(items) - start - limit
        out = []
        for o in page:
            o = copy.deepcopy(o)
            o.pop("kind", None)
            o.pop("apiVersion", None)
            out.append(o)
        return _Response(200, {"kind": f"{route.rt.kind}List",
                               "apiVersion": route.rt.api_version, "metadata": meta,
                               "items": out})

    def _watch(self, route: _Route, query: dict[str, str]) -> _Response:
        rt, ns = route.rt, route.namespace
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        rv_raw = query.get("resourceVersion") or ""
        initial: list[Obj] = []
        if rv_raw in ("", "0"):
            cursor = self.store.rv
            for obj in self.store.list(rt, ns):
                if matches(obj, labels, fields):
                    initial.append({"type": "ADDED", "object": copy.deepcopy(obj)})
        else:
            try:
                cursor = int(rv_raw)
            except ValueError as e:
                raise bad_request(f"invalid resource version: {rv_raw}") from e
            if cursor < self.store.oldest_rv:
                gone = ApiError(410, "Expired", f"too old resource version: {cursor} "
                                f"({self.store.oldest_rv})").status()
                initial.append({"type": "ERROR", "object": gone})
                timeout = 0

        def stream(handler: _Handler) -> None:
            nonlocal cursor
            deadline = None if timeout is None else time.monotonic() + timeout
            for ev in initial:
                handler.write_chunk(json.dumps(ev).encode() + b"\n")
            while not self._stopping.is_set():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                with self.store.cv:
                    events = self.store.events_since(cursor, rt.plural, ns)
                    if not events:
                        self.store.cv.wait(0.25 if left is None else min(left, 0.25))
                        events = self.store.events_since(cursor, rt.plural, ns)
                    if events:
                        cursor = events[-1].rv
                    chunk = b"".join(
                        json.dumps({"type": e.type, "object": e.object}).encode() + b"\n"
                        for e in events if matches(e.object, labels, fields)
                    )
                if chunk:
                    handler.write_chunk(chunk)
                elif handler.client_gone():
                    return

        return _Response(200, "", {"Content-Type": "application/json"}, stream=stream)

    def _log(self, pod: Obj, query: dict[str, str]) -> _Response:
        name = pod["metadata"]["name"]
        spec = pod["spec"]
        mains = [c["name"] for c in spec.get("containers") or []]
        inits = [c["name"] for c in spec.get("initContainers") or []]
        container = query.get("container")
        if not container:
            if len(mains) != 1:
                msg = (f"a container name must be specified for pod {name}, choose one of: "
                       f"[{' '.join(mains)}]")
                if inits:
                    msg += f" or one of the init containers: [{' '.join(inits)}]"
                raise bad_request(msg)
            container = mains[0]
        if container not in mains + inits:
            raise bad_request(f"container {container} is not valid for pod {name}")
        path = self.kubelet.log_path(pod, container)
        if path is None:
            statuses = (pod.get("status", {}).get("containerStatuses") or []) + (
                pod.get("status", {}).get("initContainerStatuses") or [])
            waiting = next((cs.get("state", {}).get("waiting") for cs in statuses
                            if cs.get("name") == container), None) or {}
            raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                              f"{waiting.get('reason', 'ContainerCreating')}")
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None

        def render(data: bytes) -> bytes:
            if tail is not None:
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-tail:]) if tail > 0 else b""
            if limit is not None:
                data = data[:limit]
            return data

        text = path.read_bytes()
        if not _truthy(query.get("follow")):
            return _Response(200, render(text).decode(errors="replace"),
                             {"Content-Type": "text/plain"})
        uid = pod["metadata"]["uid"]

        def follow(handler: _Handler) -> None:
            sent = render(text)
            offset = len(text)
            if sent:
                handler.write_chunk(sent)
            while not self._stopping.is_set():
                with self.store.cv:
                    rt = self.kubelet.runtimes.get(uid)
                    c = rt.by_name(container) if rt else None
                    done = c is None or c.exit_code is not None
                with path.open("rb") as f:
                    f.seek(offset)
                    more = f.read()
                if more:
                    offset += len(more)
                    handler.write_chunk(more)
                elif done or handler.client_gone():
                    return
                else:
                    time.sleep(0.05)

        return _Response(200, "", {"Content-Type": "text/plain"}, stream=follow)

    # -- writes

    def _create(self, route: _Route, body: Any, query: dict[str, str]) -> _Response:
        rt = route.rt
        if route.name is not None:
            raise ApiError(405, "MethodNotAllowed",
                           "the server does not allow this method on the requested resource")
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format - accepted "
                              "media types include: application/json, application/yaml")
        obj = copy.deepcopy(body)
        if obj.get("kind") not in (None, rt.kind) or obj.get("apiVersion") not in (
                None, rt.api_version):
            raise bad_request(f"the API version in the data ({obj.get('apiVersion')}) does not "
                              f"match the expected API version ({rt.api_version})")
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        for key in _SERVER_SET:
            meta.pop(key, None)
        if rt.namespaced:
            ns = route.namespace or ""
            if meta.get("namespace") not in (None, "", ns):
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            meta["namespace"] = ns
            if self.store.get(NAMESPACES, "", ns) is None:
                raise not_found(NAMESPACES, ns)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generate_name(str(meta["generateName"]))
        dry_run = query.get("dryRun") == "All"
        if rt is JOBS:
            created = self._create_job(obj, dry_run)
        elif rt is PODS:
            created = self._create_pod(obj, dry_run)
        elif rt is NAMESPACES:
            created = self._create_namespace(obj, dry_run)
        else:
            created = self._create_simple(rt, obj, dry_run)
        return _Response(201, copy.deepcopy(created))

    def _store_create(self, rt: ResourceType, obj: Obj, dry_run: bool) -> Obj:
        meta = obj["metadata"]
        if self.store.get(rt, meta.get("namespace", ""), meta["name"]) is not None:
            raise already_exists(rt, meta["name"])
        if dry_run:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta["creationTimestamp"] = now_rfc3339()
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            return obj
        return self.store.create(rt, obj)

    def _create_job(self, job: Obj, dry_run: bool) -> Obj:
        name = job["metadata"].get("name") or ""
        if not isinstance(job.get("spec"), dict):
            raise invalid_object(JOBS, name, [required("spec.template")])
        default_job(job)
        errors = validate_job(job)
        uid = str(uuid.uuid4())
        if not errors:
            errors = prepare_job_for_create(job, uid)
        if errors:
            raise invalid_object(JOBS, name, errors)
        job["metadata"]["uid"] = uid
        job["status"] = {}
        return self._store_create(JOBS, job, dry_run)

    def _create_pod(self, pod: Obj, dry_run: bool) -> Obj:
        name = pod["metadata"].get("name") or ""
        spec = pod.setdefault("spec", {})
        if isinstance(spec, dict):
            default_pod_spec(spec)
        errors = validate_name(name) + validate_labels(
            pod["metadata"].get("labels"), "metadata.labels") + validate_pod_spec(spec, "spec")
        if errors:
            raise invalid_object(PODS, name, errors)
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        return self._store_create(PODS, pod, dry_run)

    def _create_namespace(self, ns: Obj, dry_run: bool = False) -> Obj:
        name = ns["metadata"].get("name") or ""
        errors = validate_name(name, label=True)
        if errors:
            raise invalid_object(NAMESPACES, name, errors)
        labels = ns["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = name
        ns["spec"] = {"finalizers": ["kubernetes"]}
        ns["status"] = {"phase": "Active"}
        return self._store_create(NAMESPACES, ns, dry_run)

    def _create_simple(self, rt: ResourceType, obj: Obj, dry_run: bool) -> Obj:
        name = obj["metadata"].get("name") or ""
        errors: list[FieldError] = validate_name(name)
        if rt is SECRETS:
            data = obj.get("data") or {}
            for k, v in data.items():
                try:
                    base64.b64decode(v, validate=True)
                except (binascii.Error, TypeError) as e:
                    raise bad_request(f"illegal base64 data in data[{k!r}]") from e
            for k, v in (obj.pop("stringData", None) or {}).items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
            obj.setdefault("type", "Opaque")
        if errors:
            raise invalid_object(rt, name, errors)
        return self._store_create(rt, obj, dry_run)

    def _update(self, route: _Route, body: Any, query: dict[str, str], verb: str,
                content_type: str) -> _Response:
        rt = route.rt
        if route.name is None or route.subresource not in (None, "status"):
            raise ApiError(405, "MethodNotAllowed",
                           "the server does not allow this method on the requested resource")
        current = self._get_obj(route)
        if verb == "patch":
            new = _apply_patch(copy.deepcopy(current), body, content_type)
        else:
            if not isinstance(body, dict):
                raise bad_request("the body of the request was in an unknown format")
            new = copy.deepcopy(body)
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"]["resourceVersion"]:
                raise conflict(rt, route.name, "the object has been modified; please apply "
                               "your changes to the latest version and try again")
        meta = new.setdefault("metadata", {})
        for key in _SERVER_SET:
            if key in current["metadata"]:
                meta[key] = current["metadata"][key]
            else:
                meta.pop(key, None)
        if meta.get("name") != route.name:
            raise bad_request("the name of the object does not match the name on the URL")
        if route.subresource == "status":
            merged = copy.deepcopy(current)
            merged["status"] = new.get("status", {})
            new = merged
        elif "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        if rt is JOBS:
            self._validate_job_update(current, new)
        if query.get("dryRun") == "All":
            return _Response(200, new)
        if new.get("spec") != current.get("spec") and "generation" in current["metadata"]:
            meta["generation"] = current["metadata"]["generation"] + 1
        current.clear()
        current.update(new)
        current["apiVersion"], current["kind"] = rt.api_version, rt.kind
        self.store.touch(rt, current)
        return _Response(200, copy.deepcopy(current))

    def _validate_job_update(self, old: Obj, new: Obj) -> None:
        name = old["metadata"]["name"]
        errors: list[FieldError] = []
        ospec, nspec = old["spec"], new.get("spec") or {}
        for key in ("template", "selector", "completionMode", "podFailurePolicy",
                    "backoffLimitPerIndex", "manualSelector"):
            if ospec.get(key) != nspec.get(key):
                errors.append(invalid(f"spec.{key}", OMIT, "field is immutable"))
        if ospec.get("completions") != nspec.get("completions") and not (
                ospec.get("completionMode") == "Indexed"
                and nspec.get("completions") == nspec.get("parallelism")):
            errors.append(invalid("spec.completions", nspec.get("completions"),
                                  "field is immutable"))
        if not errors:
            errors = [e for e in validate_job(new) if not e.field.startswith("spec.template")]
        if errors:
            raise invalid_object(JOBS, name, errors)

    def _delete_options(self, body: Any, query: dict[str, str]) -> Obj:
        opts: Obj = dict(body) if isinstance(body, dict) else {}
        if query.get("propagationPolicy"):
            opts["propagationPolicy"] = query["propagationPolicy"]
        if query.get("gracePeriodSeconds"):
            opts["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        if query.get("dryRun"):
            opts["dryRun"] = [query["dryRun"]]
        if query.get("orphanDependents"):
            opts["orphanDependents"] = _truthy(query["orphanDependents"])
        policy = opts.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: '
                           f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                           f'"Foreground", "Background", "Orphan", "nil"')
        return opts

    def _delete(self, route: _Route, body: Any, query: dict[str, str],
                method: str) -> _Response:
        rt = route.rt
        if route.subresource is not None:
            raise ApiError(405, "MethodNotAllowed",
                           "the server does not allow this method on the requested resource")
        obj = self._get_obj(route)
        opts = self._delete_options(body, query)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
            raise conflict(rt, obj["metadata"]["name"],
                           f"Precondition failed: UID in precondition: {pre['uid']}, "
                           f"UID in object meta: {obj['metadata']['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"][
                "resourceVersion"]:
            raise conflict(rt, obj["metadata"]["name"],
                           "Precondition failed: ResourceVersion in precondition: "
                           f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                           f"{obj['metadata']['resourceVersion']}")
        if "All" in (opts.get("dryRun") or []):
            return _Response(200, copy.deepcopy(obj))
        if rt is PODS:
            delete_pod(self.store, self.kubelet, obj, opts.get("gracePeriodSeconds"))
            return _Response(200, copy.deepcopy(obj))
        if rt is JOBS:
            return self._delete_job(obj, opts)
        if rt is NAMESPACES:
            return self._delete_namespace(obj)
        self.store.remove(rt, obj)
        return _Response(200, _success(rt, obj))

    def _delete_job(self, job: Obj, opts: Obj) -> _Response:
        policy = opts.get("propagationPolicy")
        headers: dict[str, str] = {}
        if policy is None:
            policy = "Orphan" if opts.get("orphanDependents", True) else "Background"
            if "orphanDependents" not in opts:
                headers["Warning"] = JOB_ORPHAN_WARNING
        meta = job["metadata"]
        if policy == "Background":
            self.store.remove(JOBS, job)
            return _Response(200, _success(JOBS, job), headers)
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = 0
        if policy == "Foreground":
            meta["finalizers"] = [*(meta.get("finalizers") or []), "foregroundDeletion"]
            self.store.touch(JOBS, job)
            return _Response(200, copy.deepcopy(job), headers)
        # Orphan: the garbage collector strips the owner references, then the Job goes.
        meta["finalizers"] = [*(meta.get("finalizers") or []), "orphan"]
        self.store.touch(JOBS, job)
        response = copy.deepcopy(job)
        for pod in self.store.list(PODS, meta["namespace"]):
            refs = pod["metadata"].get("ownerReferences") or []
            kept = [r for r in refs if r.get("uid") != meta["uid"]]
            if len(kept) != len(refs):
                if kept:
                    pod["metadata"]["ownerReferences"] = kept
                else:
                    pod["metadata"].pop("ownerReferences", None)
                self.store.touch(PODS, pod)
                if is_done_or_deleting(pod):
                    drop_finalizer(self.store, pod, JOB_TRACKING_FINALIZER)
        meta["finalizers"] = [f for f in meta["finalizers"] if f != "orphan"] or None
        if meta["finalizers"] is None:
            del meta["finalizers"]
        self.store.remove(JOBS, job)
        return _Response(200, response, headers)

    def _delete_namespace(self, ns: Obj) -> _Response:
        name = ns["metadata"]["name"]
        for rt in RESOURCES.values():
            if rt.namespaced:
                for obj in self.store.list(rt, name):
                    self.store.remove(rt, obj)
        ns["metadata"]["deletionTimestamp"] = now_rfc3339()
        ns["status"] = {"phase": "Terminating"}
        response = copy.deepcopy(ns)
        self.store.remove(NAMESPACES, ns)
        return _Response(200, response)

    def _delete_collection(self, route: _Route, body: Any, query: dict[str, str]) -> _Response:
        opts = self._delete_options(body, query)
        items = self._select(route, query)
        for obj in items:
            if route.rt is PODS:
                delete_pod(self.store, self.kubelet, obj, opts.get("gracePeriodSeconds"))
            elif route.rt is JOBS:
                self._delete_job(obj, opts)
            else:
                self.store.remove(route.rt, obj)
        return _Response(200, {"kind": f"{route.rt.kind}List",
                               "apiVersion": route.rt.api_version,
                               "metadata": {"resourceVersion": str(self.store.rv)},
                               "items": copy.deepcopy(items)})


def is_done_or_deleting(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed") or bool(
        pod["metadata"].get("deletionTimestamp"))


def _success(rt: ResourceType, obj: Obj) -> Obj:
    details: Obj = {"name": obj["metadata"]["name"]}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details["uid"] = obj["metadata"]["uid"]
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}


def _parse_body(body: bytes, content_type: str) -> Any:
    if not body:
        return None
    try:
        if "yaml" in content_type:
            return yaml.safe_load(body)
        return json.loads(body)
    except (ValueError, yaml.YAMLError) as e:
        raise bad_request(f"error decoding request body: {e}") from e


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386; used for merge and strategic-merge patches (lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue  # strategic-merge directives
        if v is None:
            target.pop(k, None)
        else:
            target[k] = _merge_patch(target.get(k), v)
    return target


def _pointer(doc: Any, pointer: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    for p in parts[:-1]:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc, parts[-1]


def _json_patch(doc: Any, ops: list[Obj]) -> Any:
    """RFC 6902 add/remove/replace/test."""
    for op in ops:
        parent, key = _pointer(doc, op["path"])
        kind = op["op"]
        if isinstance(parent, list):
            idx = len(parent) if key == "-" else int(key)
            if kind == "add":
                parent.insert(idx, op["value"])
            elif kind == "remove":
                parent.pop(idx)
            elif kind == "replace":
                parent[idx] = op["value"]
            elif kind == "test" and parent[idx] != op["value"]:
                raise ApiError(422, "Invalid", f"the test operation failed at {op['path']}")
        else:
            if kind in ("add", "replace"):
                if kind == "replace" and key not in parent:
                    raise ApiError(422, "Invalid",
                                   f"replace operation does not apply: doc is missing path: "
                                   f"{op['path']}")
                parent[key] = op["value"]
            elif kind == "remove":
                del parent[key]
            elif kind == "test" and parent.get(key) != op["value"]:
                raise ApiError(422, "Invalid", f"the test operation failed at {op['path']}")
    return doc


def _apply_patch(current: Obj, body: Any, content_type: str) -> Obj:
    ct = content_type.split(";")[0].strip()
    try:
        if ct == "application/json-patch+json":
            if not isinstance(body, list):
                raise bad_request("json patch must be a list of operations")
            return _json_patch(current, body)
        if ct in ("application/merge-patch+json", "application/strategic-merge-patch+json",
                  "application/apply-patch+yaml", "application/apply-patch+json"):
            return _merge_patch(current, body)
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise ApiError(422, "Invalid", f"the patch could not be applied: {e!r}") from e
    raise ApiError(415, "UnsupportedMediaType",
                   f'the body of the request was in an unknown format - accepted media types '
                   f'include: application/json-patch+json, application/merge-patch+json, '
                   f'application/apply-patch+yaml (got "{ct}")')


def _static_route(path: str) -> Obj | str | None:
    if path == "/version":
        return SERVER_VERSION
    if path in ("/healthz", "/livez", "/readyz"):
        return "ok"
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
            "name": "batch", "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"}}]}
    for gv, group in (("/api/v1", ""), ("/apis/batch/v1", "batch")):
        if path == gv:
            return {"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": gv.split("/", 2)[-1] if group else "v1",
                    "resources": [
                        {"name": rt.plural, "singularName": rt.kind.lower(),
                         "namespaced": rt.namespaced, "kind": rt.kind,
                         "verbs": ["create", "delete", "deletecollection", "get", "list",
                                   "patch", "update", "watch"]}
                        for rt in RESOURCES.values() if rt.group == group]}
    return None


def _route(path: str) -> _Route:
    parts = [p for p in path.split("/") if p]
    nf = ApiError(404, "NotFound", "the server could not find the requested resource",
                  {})
    if len(parts) >= 2 and parts[0] == "api" and parts[1] == "v1":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis" and (parts[1], parts[2]) == ("batch", "v1"):
        group, rest = "batch", parts[3:]
    else:
        raise nf
    namespaced_plurals = {rt.plural for (g, _), rt in RESOURCES.items()
                          if g == group and rt.namespaced}
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in namespaced_plurals:
        rt = RESOURCES[(group, rest[2])]
        if len(rest) > 5:
            raise nf
        return _Route(rt, rest[1], rest[3] if len(rest) > 3 else None,
                      rest[4] if len(rest) > 4 else None)
    if len(rest) >= 1 and (group, rest[0]) in RESOURCES and len(rest) <= 3:
        rt = RESOURCES[(group, rest[0])]
        if rt.namespaced:
            if len(rest) != 1:
                raise nf
            return _Route(rt, None, None, None)
        return _Route(rt, None, rest[1] if len(rest) > 1 else None,
                      rest[2] if len(rest) > 2 else None)
    raise nf


def _truthy(value: str | None) -> bool:
    """Go's strconv.ParseBool, which the apiserver uses for query flags (`watch=True`)."""
    return value in ("1", "t", "T", "TRUE", "true", "True")


def _verb(method: str, route: _Route, query: dict[str, str]) -> str:
    if method == "GET":
        if route.name is None:
            return "watch" if _truthy(query.get("watch")) else "list"
        return "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name is not None else "deletecollection"
    raise ApiError(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeKubeAPI
    server_version = "k8s-fake"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.fake.track_connection(self.connection, open_=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.fake.track_connection(self.connection, open_=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            resp = self.fake.handle(method, self.path, self.headers, body)
        except ApiError as e:
            resp = _Response(e.code, e.status())
        except Exception as e:  # a bug in the fake: answer 500 as an apiserver would
            traceback.print_exc()
            resp = _Response(500, ApiError(500, "InternalError",
                                           f"Internal error occurred: fake: {e!r}").status())
        try:
            if resp.stream is not None:
                self._send_stream(resp)
            else:
                self._send(resp)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _send(self, resp: _Response) -> None:
        if isinstance(resp.body, str):
            data = resp.body.encode()
            ctype = resp.headers.get("Content-Type", "text/plain; charset=utf-8")
        else:
            data = json.dumps(resp.body).encode()
            ctype = "application/json"
        self.send_response(resp.code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for k, v in resp.headers.items():
            if k != "Content-Type":
                self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, resp: _Response) -> None:
        assert resp.stream is not None
        self.send_response(resp.code)
        self.send_header("Content-Type", resp.headers.get("Content-Type", "application/json"))
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            resp.stream(self)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def client_gone(self) -> bool:
        """True once the client closed its end (Watch.stop(), a dropped connection)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
