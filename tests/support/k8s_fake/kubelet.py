"""The fake node: "runs" each Pod by starting its containers' command + args as local
processes, with the environment the manifest declares (downward API, Secrets, ConfigMaps),
and reports their state in the Pod status the way a kubelet does. Volumes are local
directories: emptyDir, Secret, ConfigMap and downward API per pod; a PVC per claim and an NFS
volume per server and export, shared by every pod (paths in env and argv that start with a
mount path are rewritten to the directory).

Not simulated: images (argv[0] `python`/`python3` becomes this interpreter; a container
without `command` uses `image_entrypoints[image]` or else its `args` as argv), resource
limits, probes, networking, restart back-off, `workingDir` outside a volume.
"""

from __future__ import annotations

import base64
import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from .store import CONFIGMAPS, PODS, SECRETS, Obj, Store, now_rfc3339

NODE_NAME = "fake-node"
NODE_IP = "127.0.0.1"
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_FIELD_MAP = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                       "PodScheduled")


class ContainerConfigError(Exception):
    """The container cannot be created yet (missing Secret/ConfigMap key): the Pod stays
    Pending with this waiting reason and the kubelet retries, as the real one does."""

    def __init__(self, message: str, reason: str = "CreateContainerConfigError") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class ContainerRun:
    name: str
    spec: Obj
    init: bool
    sidecar: bool
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    term_reason: str | None = None
    term_message: str | None = None
    restart_count: int = 0
    waiting_reason: str | None = "ContainerCreating"
    waiting_message: str | None = None
    last_state: Obj = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.exit_code is None

    @property
    def terminated(self) -> bool:
        return self.exit_code is not None


@dataclass
class PodRuntime:
    uid: str
    dir: Path
    containers: list[ContainerRun]
    volumes: dict[str, Path] | None = None
    started: bool = False
    term_sent: float | None = None
    kill_at: float | None = None
    finished: bool = False
    log_files: list[IO[bytes]] = field(default_factory=list)

    def by_name(self, name: str) -> ContainerRun | None:
        return next((c for c in self.containers if c.name == name), None)


def parse_quantity(q: Any) -> Decimal:
    s = str(q).strip()
    suffixes: dict[str, Decimal | int] = {
        "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
        "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3,
        "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    }
    for suf in sorted(suffixes, key=len, reverse=True):
        if s.endswith(suf):
            return Decimal(s[: -len(suf)]) * Decimal(suffixes[suf])
    return Decimal(s)


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: `$$` escapes, unknown references stay as written."""
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "$" and i + 1 < len(value):
            nxt = value[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                j = value.find(")", i + 2)
                if j != -1:
                    name = value[i + 2 : j]
                    out.append(env[name] if name in env else value[i : j + 1])
                    i = j + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def rewrite_path(value: str, mounts: list[tuple[str, str]]) -> str:
    """`/scratch/ckpt` -> `<pod tmp>/scratch-xxxx/ckpt` for a volume mounted at /scratch;
    also the value part of `--flag=/scratch/x`."""
    for mount_path, host in mounts:
        mp = mount_path.rstrip("/") or "/"
        if value == mp or value.startswith(mp + "/"):
            return host + value[len(mp):]
    if value.startswith("-") and "=" in value:
        flag, rest = value.split("=", 1)
        new = rewrite_path(rest, mounts)
        if new != rest:
            return f"{flag}={new}"
    return value


def _decode(b64: str) -> str:
    return base64.b64decode(b64).decode("utf-8", errors="surrogateescape")


class Kubelet:
    def __init__(
        self,
        store: Store,
        root: Path,
        workdir: Path,
        base_env: dict[str, str],
        image_entrypoints: dict[str, list[str]],
        max_grace_seconds: float,
    ) -> None:
        self.store = store
        self.root = root
        self.workdir = workdir
        self.base_env = base_env
        self.image_entrypoints = image_entrypoints
        self.max_grace_seconds = max_grace_seconds
        self.runtimes: dict[str, PodRuntime] = {}
        #: (namespace, pod name) -> {container: log file}; outlives the Pod object.
        self.logs: dict[tuple[str, str], dict[str, Path]] = {}

    # ----------------------------------------------------------------- public (lock held)

    def sync(self) -> None:
        live: set[str] = set()
        for pod in self.store.list(PODS):
            live.add(pod["metadata"]["uid"])
            try:
                self._sync_pod(pod)
            except Exception as e:  # one broken pod must not stop the node
                print(f"k8s_fake kubelet: pod {pod['metadata']['name']}: {e!r}", file=sys.stderr)
        for uid in list(self.runtimes):
            if uid not in live:
                self._kill(self.runtimes[uid], signal.SIGKILL)
                self._close(self.runtimes.pop(uid))

    def log_path(self, pod: Obj, container: str) -> Path | None:
        rt = self.runtimes.get(pod["metadata"]["uid"])
        if rt is None:
            return None
        c = rt.by_name(container)
        return c.log_path if c is not None and c.log_path.exists() else None

    def kill_now(self, pod: Obj) -> None:
        """SIGKILL every container of the pod (preemption, force delete)."""
        rt = self.runtimes.get(pod["metadata"]["uid"])
        if rt is not None:
            self._kill(rt, signal.SIGKILL)
            rt.term_sent = rt.kill_at = time.monotonic()

    def shutdown(self) -> None:
        for rt in self.runtimes.values():
            self._kill(rt, signal.SIGKILL)
        deadline = time.monotonic() + 5
        for rt in self.runtimes.values():
            for c in rt.containers:
                if c.proc is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        c.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            self._close(rt)
        self.runtimes.clear()

    # ----------------------------------------------------------------- pod state machine

    def _sync_pod(self, pod: Obj) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        status = pod.setdefault("status", {})
        uid = meta["uid"]
        phase = status.get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            rt = self.runtimes.get(uid)
            if rt is not None and not rt.finished:
                self._kill(rt, signal.SIGKILL)
                rt.finished = True
                self._close(rt)
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                self.store.remove(PODS, pod)
            return
        before = repr(status)
        rt = self.runtimes.get(uid)
        if rt is None:
            rt = self._new_runtime(pod)
            self.runtimes[uid] = rt
        if not spec.get("nodeName"):
            spec["nodeName"] = NODE_NAME
            status.setdefault("startTime", now_rfc3339())
        deleting = bool(meta.get("deletionTimestamp"))
        if deleting:
            self._terminate(pod, rt)
        else:
            self._advance(pod, rt)
        self._poll(pod, rt, deleting)
        self._write_status(pod, rt, deleting)
        if repr(status) != before:
            self.store.touch(PODS, pod)
        if status.get("phase") in ("Succeeded", "Failed"):
            self._close(rt)
            rt.finished = True
            if deleting and not meta.get("finalizers"):
                self.store.remove(PODS, pod)

    def _new_runtime(self, pod: Obj) -> PodRuntime:
        meta = pod["metadata"]
        d = Path(tempfile.mkdtemp(
            prefix=f"{meta.get('namespace', '')}_{meta['name']}_", dir=self.root / "pods"
        ))
        (d / "logs").mkdir()
        (d / "volumes").mkdir()
        containers = []
        for c in pod["spec"].get("initContainers") or []:
            containers.append(ContainerRun(
                c["name"], c, True, c.get("restartPolicy") == "Always",
                d / "logs" / f"{c['name']}.log",
            ))
        for c in pod["spec"].get("containers") or []:
            containers.append(ContainerRun(c["name"], c, False, False,
                                           d / "logs" / f"{c['name']}.log"))
        # main containers first: the default of FakeKubeAPI.pod_log is the first one
        self.logs[(meta.get("namespace", ""), meta["name"])] = {
            c.name: c.log_path for c in sorted(containers, key=lambda c: c.init)}
        return PodRuntime(meta["uid"], d, containers)

    def _terminate(self, pod: Obj, rt: PodRuntime) -> None:
        now = time.monotonic()
        if not any(c.running for c in rt.containers):
            for c in rt.containers:
                if not c.terminated and not c.init:
                    c.exit_code = 137
                    c.term_reason = "ContainerStatusUnknown"
                    c.term_message = ("The container could not be located when the pod was "
                                      "deleted.  The container used to be Running")
                    c.finished_at = now_rfc3339()
            return
        if rt.term_sent is None:
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            grace = min(float(grace), self.max_grace_seconds)
            rt.term_sent = now
            rt.kill_at = now + grace
            self._kill(rt, signal.SIGKILL if grace <= 0 else signal.SIGTERM)
        elif rt.kill_at is not None and now >= rt.kill_at:
            self._kill(rt, signal.SIGKILL)
            rt.kill_at = now + 3600  # sent once

    def _advance(self, pod: Obj, rt: PodRuntime) -> None:
        if rt.volumes is None:
            try:
                rt.volumes = self._prepare_volumes(pod, rt)
            except ContainerConfigError as e:
                for c in rt.containers:
                    c.waiting_reason, c.waiting_message = "ContainerCreating", e.message
                return
        for c in rt.containers:
            if not c.init:
                continue
            if c.sidecar:
                if c.proc is None and c.exit_code is None and not self._start(pod, rt, c):
                    return
                continue
            if c.exit_code == 0:
                continue
            if c.proc is None and c.exit_code is None:
                self._start(pod, rt, c)
            return  # running, or failed (the pod fails or _poll restarts it)
        for c in rt.containers:
            if not c.init and c.proc is None and c.exit_code is None:
                self._start(pod, rt, c)
        rt.started = True

    def _poll(self, pod: Obj, rt: PodRuntime, deleting: bool) -> None:
        restart_policy = pod["spec"].get("restartPolicy", "Always")
        for c in rt.containers:
            if c.proc is None or c.exit_code is not None:
                continue
            rc = c.proc.poll()
            if rc is None:
                continue
            # PID 1 of a container exiting takes the rest of the container with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, signal.SIGKILL)
            code = 128 - rc if rc < 0 else rc
            c.exit_code = code
            c.finished_at = now_rfc3339()
            c.term_reason = "Completed" if code == 0 else "Error"
            restart = not deleting and not c.init and (
                restart_policy == "Always" or (restart_policy == "OnFailure" and code != 0)
            )
            if c.init and not c.sidecar and code != 0 and restart_policy == "OnFailure":
                restart = not deleting
            if restart:
                c.last_state = {"terminated": self._terminated(c)}
                c.restart_count += 1
                c.proc = None
                c.exit_code = None
                self._start(pod, rt, c)

    # ----------------------------------------------------------------- status

    def _terminated(self, c: ContainerRun) -> Obj:
        t: Obj = {"exitCode": c.exit_code, "reason": c.term_reason}
        if c.term_message:
            t["message"] = c.term_message
        if c.started_at:
            t["startedAt"] = c.started_at
        t["finishedAt"] = c.finished_at
        if c.proc is not None:
            t["containerID"] = f"fake://{c.proc.pid}"
        return t

    def _container_status(self, c: ContainerRun) -> Obj:
        if c.exit_code is not None:
            state: Obj = {"terminated": self._terminated(c)}
        elif c.proc is not None:
            state = {"running": {"startedAt": c.started_at}}
        else:
            w: Obj = {"reason": c.waiting_reason or "PodInitializing"}
            if c.waiting_message:
                w["message"] = c.waiting_message
            state = {"waiting": w}
        out: Obj = {
            "name": c.name,
            "state": state,
            "lastState": c.last_state,
            "ready": c.running,
            "restartCount": c.restart_count,
            "image": c.spec.get("image", ""),
            "imageID": "",
            "started": c.running,
        }
        if c.proc is not None:
            out["containerID"] = f"fake://{c.proc.pid}"
        return out

    def _write_status(self, pod: Obj, rt: PodRuntime, deleting: bool) -> None:
        status = pod["status"]
        inits = [c for c in rt.containers if c.init]
        mains = [c for c in rt.containers if not c.init]
        restart_policy = pod["spec"].get("restartPolicy", "Always")
        init_failed = any(
            c.terminated and c.exit_code != 0 and not c.sidecar for c in inits
        ) and restart_policy == "Never"
        all_done = all(c.terminated for c in mains) and bool(mains)
        phase = status.get("phase", "Pending")
        if init_failed or (deleting and not any(c.running for c in rt.containers)):
            phase = "Failed" if init_failed or not all_done or any(
                c.exit_code != 0 for c in mains) else "Succeeded"
        elif all_done:
            phase = "Succeeded" if all(c.exit_code == 0 for c in mains) else "Failed"
        elif any(c.proc is not None for c in mains):
            phase = "Running"
        if phase in ("Succeeded", "Failed"):
            # sidecars and any straggler die with the pod
            self._kill(rt, signal.SIGKILL)
            for c in rt.containers:
                if c.proc is not None and c.exit_code is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        c.proc.wait(timeout=1)
                    rc = c.proc.returncode
                    c.exit_code = 137 if rc is None else (128 - rc if rc < 0 else rc)
                    c.term_reason = "Completed" if c.exit_code == 0 else "Error"
                    c.finished_at = now_rfc3339()
        status["phase"] = phase
        status["hostIP"] = NODE_IP
        status["hostIPs"] = [{"ip": NODE_IP}]
        if rt.volumes is not None:
            status["podIP"] = NODE_IP
            status["podIPs"] = [{"ip": NODE_IP}]
        status.setdefault("startTime", now_rfc3339())
        if inits:
            status["initContainerStatuses"] = [self._container_status(c) for c in inits]
        status["containerStatuses"] = [self._container_status(c) for c in mains]
        status["qosClass"] = _qos_class(pod["spec"])
        terminal = phase in ("Succeeded", "Failed")
        initialized = all((c.terminated and c.exit_code == 0) or (c.sidecar and c.proc is not None)
                          for c in inits)
        ready = not terminal and bool(mains) and all(c.running for c in mains)
        conds = status.setdefault("conditions", [])
        _set_condition(conds, "PodReadyToStartContainers",
                       rt.volumes is not None and not terminal)
        _set_condition(conds, "Initialized", initialized or terminal)
        not_ready = "PodCompleted" if terminal else "ContainersNotReady"
        _set_condition(conds, "Ready", ready, None if ready else not_ready)
        _set_condition(conds, "ContainersReady", ready, None if ready else not_ready)
        _set_condition(conds, "PodScheduled", True)
        order = {t: i for i, t in enumerate(_KUBELET_CONDITIONS)}
        conds.sort(key=lambda c: order.get(c["type"], -1))

    # ----------------------------------------------------------------- processes

    def _start(self, pod: Obj, rt: PodRuntime, c: ContainerRun) -> bool:
        assert rt.volumes is not None
        mounts = []
        for vm in c.spec.get("volumeMounts") or []:
            host = rt.volumes.get(vm.get("name", ""))
            if host is None:
                continue
            if vm.get("subPath"):
                host = host / vm["subPath"]
                host.mkdir(parents=True, exist_ok=True)
            mounts.append((str(vm["mountPath"]), str(host)))
        mounts.sort(key=lambda m: len(m[0]), reverse=True)
        try:
            declared = self._resolve_env(pod, c.spec)
            argv = self._argv(c.spec, declared)
        except ContainerConfigError as e:
            c.waiting_reason, c.waiting_message = e.reason, e.message
            return False
        declared = {k: rewrite_path(v, mounts) for k, v in declared.items()}
        argv = [argv[0]] + [rewrite_path(a, mounts) for a in argv[1:]]
        env = dict(self.base_env)
        env["HOSTNAME"] = pod["spec"].get("hostname") or pod["metadata"]["name"]
        env.update(declared)
        cwd = str(self.workdir)
        wd = c.spec.get("workingDir")
        if wd and rewrite_path(wd, mounts) != wd:
            cwd = rewrite_path(wd, mounts)
        log = open(c.log_path, "ab")  # noqa: SIM115 - the child owns it; closed in _close
        rt.log_files.append(log)
        c.started_at = now_rfc3339()
        c.waiting_reason = c.waiting_message = None
        try:
            c.proc = subprocess.Popen(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as e:
            log.write(f"exec {argv[0]!r} failed: {e}\n".encode())
            log.flush()
            c.proc = None
            c.exit_code = 128
            c.term_reason = "StartError"
            c.term_message = (f'failed to create containerd task: exec: "{argv[0]}": '
                              f"{e.strerror or e}")
            c.finished_at = now_rfc3339()
            # A failed start is a terminated container: keep a placeholder process-less run.
            return False
        return True

    def _argv(self, spec: Obj, env: dict[str, str]) -> list[str]:
        command = spec.get("command")
        args = spec.get("args") or []
        if command:
            argv = list(command) + list(args)
        else:
            image = str(spec.get("image") or "")
            entry = self.image_entrypoints.get(image, self.image_entrypoints.get("*"))
            if entry is not None:
                argv = list(entry) + list(args)
            elif args:
                argv = list(args)
            else:
                raise ContainerConfigError(
                    f"fake kubelet: container {spec.get('name')!r} has no command and image "
                    f"{image!r} has no entrypoint registered (FakeKubeAPI(image_entrypoints=...))",
                    "CreateContainerError",
                )
        argv = [expand(a, env) for a in argv]
        if _PYTHON.match(os.path.basename(argv[0])):
            argv[0] = sys.executable
        return argv

    def _kill(self, rt: PodRuntime, sig: int) -> None:
        for c in rt.containers:
            if c.proc is not None and (c.exit_code is None or sig == signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.proc.pid, sig)

    def _close(self, rt: PodRuntime) -> None:
        for c in rt.containers:
            if c.proc is not None and c.exit_code is not None:
                c.proc.poll()
        for f in rt.log_files:
            with contextlib.suppress(OSError):
                f.close()
        rt.log_files.clear()

    # ----------------------------------------------------------------- env and volumes

    def _source_data(self, kind: str, ns: str, name: str) -> dict[str, str] | None:
        if kind == "Secret":
            obj = self.store.get(SECRETS, ns, name)
            if obj is None:
                return None
            return {k: _decode(v) for k, v in (obj.get("data") or {}).items()}
        obj = self.store.get(CONFIGMAPS, ns, name)
        if obj is None:
            return None
        return dict(obj.get("data") or {})

    def _key_ref(self, kind: str, ns: str, ref: Obj) -> str | None:
        name, key, optional = ref.get("name", ""), ref.get("key", ""), ref.get("optional", False)
        data = self._source_data(kind, ns, name)
        if data is None:
            if optional:
                return None
            raise ContainerConfigError(f'{kind.lower()} "{name}" not found')
        if key not in data:
            if optional:
                return None
            raise ContainerConfigError(f"couldn't find key {key} in {kind} {ns}/{name}")
        return data[key]

    def _field_ref(self, pod: Obj, path: str) -> str:
        meta, spec = pod["metadata"], pod["spec"]
        m = _FIELD_MAP.match(path)
        if m:
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        simple = {
            "metadata.name": meta.get("name"),
            "metadata.namespace": meta.get("namespace"),
            "metadata.uid": meta.get("uid"),
            "spec.nodeName": spec.get("nodeName") or NODE_NAME,
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.hostIP": NODE_IP,
            "status.hostIPs": NODE_IP,
            "status.podIP": NODE_IP,
            "status.podIPs": NODE_IP,
        }
        if path not in simple:
            raise ContainerConfigError(f"unsupported fieldPath: {path}")
        return str(simple[path] or "")

    def _resource_ref(self, pod: Obj, spec: Obj, ref: Obj) -> str:
        cname = ref.get("containerName") or spec.get("name")
        container = next((c for c in pod["spec"].get("containers") or []
                          if c.get("name") == cname), spec)
        kind, _, res = str(ref.get("resource", "")).partition(".")
        resources = container.get("resources") or {}
        value = (resources.get(kind) or {}).get(res)
        if value is None and kind == "requests":
            value = (resources.get("limits") or {}).get(res)
        if value is None:  # node allocatable
            value = str(os.cpu_count() or 1) if res == "cpu" else str(64 * 2**30)
        divisor = parse_quantity(ref.get("divisor") or "1")
        return str(math.ceil(parse_quantity(value) / divisor))

    def _resolve_env(self, pod: Obj, spec: Obj) -> dict[str, str]:
        ns = pod["metadata"].get("namespace", "")
        env: dict[str, str] = {}
        for src in spec.get("envFrom") or []:
            prefix = src.get("prefix", "")
            for kind, key in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                ref = src.get(key)
                if not ref:
                    continue
                data = self._source_data(kind, ns, ref.get("name", ""))
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise ContainerConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
                for k, v in data.items():
                    env[prefix + k] = v
        for e in spec.get("env") or []:
            name = e["name"]
            vf = e.get("valueFrom")
            if vf is None:
                env[name] = expand(str(e.get("value", "")), env)
                continue
            if vf.get("fieldRef"):
                env[name] = self._field_ref(pod, vf["fieldRef"]["fieldPath"])
            elif vf.get("secretKeyRef"):
                val = self._key_ref("Secret", ns, vf["secretKeyRef"])
                if val is not None:
                    env[name] = val
            elif vf.get("configMapKeyRef"):
                val = self._key_ref("ConfigMap", ns, vf["configMapKeyRef"])
                if val is not None:
                    env[name] = val
            elif vf.get("resourceFieldRef"):
                env[name] = self._resource_ref(pod, spec, vf["resourceFieldRef"])
        return env

    def _prepare_volumes(self, pod: Obj, rt: PodRuntime) -> dict[str, Path]:
        ns = pod["metadata"].get("namespace", "")
        out: dict[str, Path] = {}
        for vol in pod["spec"].get("volumes") or []:
            name = vol["name"]
            if "persistentVolumeClaim" in vol:
                claim = vol["persistentVolumeClaim"].get("claimName", name)
                d = self.root / "pvc" / ns / claim
                d.mkdir(parents=True, exist_ok=True)
                out[name] = d
                continue
            if "nfs" in vol:  # one directory per export, shared by every pod (as NFS is)
                nfs = vol["nfs"]
                d = self.root / "nfs" / nfs.get("server", "") / nfs.get("path", "").lstrip("/")
                d.mkdir(parents=True, exist_ok=True)
                out[name] = d
                continue
            d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=rt.dir / "volumes"))
            out[name] = d
            for kind, key, ref_name in (("Secret", "secret", "secretName"),
                                        ("ConfigMap", "configMap", "name")):
                src = vol.get(key)
                if src is None:
                    continue
                data = self._source_data(kind, ns, src.get(ref_name, ""))
                if data is None:
                    if src.get("optional"):
                        continue
                    shutil.rmtree(d, ignore_errors=True)
                    raise ContainerConfigError(
                        f'MountVolume.SetUp failed for volume "{name}" : '
                        f'{kind.lower()} "{src.get(ref_name)}" not found')
                items = src.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    if item["key"] in data:
                        p = d / item["path"]
                        p.parent.mkdir(parents=True, exist_ok=True)
                        p.write_text(data[item["key"]], errors="surrogateescape")
            if "downwardAPI" in vol:
                for item in vol["downwardAPI"].get("items") or []:
                    if item.get("fieldRef"):
                        p = d / item["path"]
                        p.parent.mkdir(parents=True, exist_ok=True)
                        p.write_text(self._field_ref(pod, item["fieldRef"]["fieldPath"]))
        return out


def _set_condition(
    conds: list[Obj], ctype: str, ok: bool, reason: str | None = None
) -> None:
    status = "True" if ok else "False"
    for c in conds:
        if c["type"] == ctype:
            if c["status"] != status:
                c["status"] = status
                c["lastTransitionTime"] = now_rfc3339()
            if reason:
                c["reason"] = reason
            else:
                c.pop("reason", None)
            return
    c = {"type": ctype, "status": status, "lastProbeTime": None,
         "lastTransitionTime": now_rfc3339()}
    if reason:
        c["reason"] = reason
    conds.append(c)


def _qos_class(spec: Obj) -> str:
    any_set = False
    guaranteed = True
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        lim, req = res.get("limits") or {}, res.get("requests") or {}
        if lim or req:
            any_set = True
        if not lim.get("cpu") or not lim.get("memory"):
            guaranteed = False
        for k, v in req.items():
            if k in ("cpu", "memory") and str(lim.get(k)) != str(v):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
