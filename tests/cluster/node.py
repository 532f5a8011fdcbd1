"""The process node: the one emulated part of the local cluster. It stands in for the kubelet:
registers a Node (CPU, memory and ``nvidia.com/gpu`` capacity from this machine), keeps its
Lease and Ready condition fresh, watches the pods the real scheduler binds to it, runs each
container's command as a local process in the project's environment (the image is ignored,
with one line in this node's log), writes the pod status the kubelet would, honours deletion
(SIGTERM, the grace period, SIGKILL, the terminal status, then the pod's removal) and serves
container logs on the kubelet's endpoint, so ``kubectl logs`` works through the apiserver.

    python -m tests.cluster.node --kubeconfig .cluster/kubeconfig --root .cluster/run/node

Not emulated: images, cgroup limits, probes, networking (every pod shares this machine's
network; Service names, and pod names under a headless Service, are rewritten to 127.0.0.1
in env and argv), GPUs (advertised, not isolated).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from .logserver import LogServer
from .podenv import NODE_IP, Obj, PodEnv, decode_secret
from .pods import PodRuntime, Runner, new_runtime
from .status import now_rfc3339
from .tokens import ProjectedTokens

KUBELET_VERSION = "v1.36.3"
HEARTBEAT_SECONDS = 5.0
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def machine_capacity(gpus: int | None = None) -> dict[str, str]:
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
    disk = shutil.disk_usage("/").total
    cap = {"cpu": str(os.cpu_count() or 1), "memory": f"{mem_kib}Ki", "pods": "110",
           "ephemeral-storage": str(disk)}
    count = detect_gpus() if gpus is None else gpus
    if count:
        cap["nvidia.com/gpu"] = str(count)
    return cap


def detect_gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines())


def node_object(name: str, port: int, capacity: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "sweeper.dev/process-node": "true"}},
        "spec": {},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "addresses": [{"type": "InternalIP", "address": NODE_IP},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "nodeInfo": {
                "machineID": "process-node", "systemUUID": "process-node", "bootID": "",
                "kernelVersion": platform.release(), "osImage": "sweeper process node",
                "containerRuntimeVersion": "process://none", "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
            "conditions": node_conditions(),
        },
    }


def node_conditions() -> list[Obj]:
    now = now_rfc3339()

    def cond(ctype: str, status: str, reason: str, message: str) -> Obj:
        return {"type": ctype, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}
    return [cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "no pressure"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "no pressure"),
            cond("Ready", "True", "KubeletReady", "the process node is posting ready status")]


class ApiSources:
    """Secrets, ConfigMaps and Services read through the API server."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.tokens = ProjectedTokens(self.core, log)

    def _get(self, fn: Any, *args: str) -> Obj | None:
        try:
            return json.loads(fn(*args, _preload_content=False).data)
        except client.exceptions.ApiException as e:
            if e.status == 404:
                return None
            raise

    def data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        if kind == "Secret":
            obj = self._get(self.core.read_namespaced_secret, name, namespace)
            return None if obj is None else decode_secret(obj)
        obj = self._get(self.core.read_namespaced_config_map, name, namespace)
        return None if obj is None else dict(obj.get("data") or {})

    def service_ports(self, namespace: str, name: str) -> dict[int, int] | None:
        """Service port -> the port its endpoints listen on: a numeric targetPort, or a named
        one resolved through the EndpointSlices the endpointslice controller wrote."""
        if not _DNS_LABEL.match(name) or not _DNS_LABEL.match(namespace):
            return None
        svc = self._get(self.core.read_namespaced_service, name, namespace)
        if svc is None:
            return None
        slices = json.loads(self.discovery.list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={name}",
            _preload_content=False).data)["items"]
        by_name = {p.get("name", ""): p["port"] for sl in slices for p in sl.get("ports") or []}
        out = {}
        for p in svc["spec"].get("ports") or []:
            target = p.get("targetPort", p["port"])
            out[p["port"]] = target if isinstance(target, int) else by_name.get(p.get("name", ""),
                                                                                p["port"])
        return out


    def project_token(self, path: Path, namespace: str, account: str, audience: str | None,
                      seconds: int, pod: Obj) -> None:
        self.tokens.project(path, namespace, account, audience, seconds, pod)

    def headless_services(self, namespace: str) -> frozenset[str]:
        """The names of the namespace's headless Services (``clusterIP: None``): the
        subdomains its pods' DNS names can live under."""
        if not _DNS_LABEL.match(namespace):
            return frozenset()
        items = json.loads(self.core.list_namespaced_service(
            namespace, _preload_content=False).data)["items"]
        return frozenset(s["metadata"]["name"] for s in items
                         if s["spec"].get("clusterIP") == "None")


class Node:
    def __init__(self, api: client.ApiClient, name: str, root: Path, workdir: Path,
                 port: int, max_grace: float) -> None:
        self.core = client.CoreV1Api(api)
        self.coord = client.CoordinationV1Api(api)
        self.name, self.root, self.port = name, root, port
        self.sources = ApiSources(api)
        base_env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "HOME", "LANG", "TMPDIR")
                    if k in os.environ}
        # The project's environment stands in for the image: its commands come first.
        base_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                            base_env.get("PATH", os.defpath)])
        self.runner = Runner(base_env, workdir, root / "shared", max_grace)
        self.pods: dict[str, Obj] = {}  # uid -> the pod as last seen
        self.runtimes: dict[str, PodRuntime] = {}
        self.deleted: set[str] = set()
        self.logs: dict[tuple[str, str], dict[str, Path]] = {}
        self.capacity: dict[str, str] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = threading.Event()
        for d in ("pods", "shared"):
            (root / d).mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------- the Node and its Lease

    def register(self, capacity: dict[str, str]) -> None:
        self.capacity = capacity
        body = node_object(self.name, self.port, capacity)
        try:
            self.core.create_node(body)
        except client.exceptions.ApiException as e:
            if e.status != 409:
                raise
            self.core.patch_node_status(self.name, {"status": body["status"]})

    def heartbeat(self) -> None:
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            try:
                self._renew_lease()
                self.core.patch_node_status(self.name, {"status": {
                    "conditions": node_conditions()}})
            except Exception as e:  # noqa: BLE001 - the apiserver may be restarting: next beat
                log(f"heartbeat: {e!r}")

    def _renew_lease(self) -> None:
        body = {"metadata": {"name": self.name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40,
                         "renewTime": now_micro()}}
        try:
            self.coord.patch_namespaced_lease(self.name, "kube-node-lease", body)
        except client.exceptions.ApiException as e:
            if e.status != 404:
                raise
            self.coord.create_namespaced_lease("kube-node-lease", body)

    # ---------------------------------------------------------------- pods

    def watch_pods(self) -> None:
        selector = f"spec.nodeName={self.name}"
        while not self.stopping.is_set():
            try:
                listed = json.loads(self.core.list_pod_for_all_namespaces(
                    field_selector=selector, _preload_content=False).data)
                with self.lock:
                    self.pods = {p["metadata"]["uid"]: p for p in listed["items"]}
                self.wake.set()
                rv = listed["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                        self.core.list_pod_for_all_namespaces, field_selector=selector,
                        resource_version=rv, timeout_seconds=60, _preload_content=False):
                    self._on_event(event)
                    if self.stopping.is_set():
                        return
            except Exception as e:  # noqa: BLE001 - expired resourceVersion, a restart: relist
                log(f"pod watch: {e!r}")
                time.sleep(0.5)

    def _on_event(self, event: Any) -> None:
        obj = event["raw_object"]
        uid = obj["metadata"]["uid"]
        with self.lock:
            if event["type"] == "DELETED":
                self.pods.pop(uid, None)
            else:
                self.pods[uid] = obj
        self.wake.set()

    def loop(self) -> None:
        while not self.stopping.is_set():
            self.wake.wait(0.25)
            self.wake.clear()
            with self.lock:
                pods = list(self.pods.values())
            for pod in pods:
                try:
                    self._sync(pod)
                except Exception as e:  # noqa: BLE001 - one broken pod must not stop the node
                    log(f"pod {pod['metadata']['name']}: {e!r}")
            self._forget({p["metadata"]["uid"] for p in pods})
            self.sources.tokens.renew()

    def _sync(self, pod: Obj) -> None:
        meta = pod["metadata"]
        uid, deleting = meta["uid"], bool(meta.get("deletionTimestamp"))
        phase = (pod.get("status") or {}).get("phase")
        rt = self.runtimes.get(uid)
        if phase in ("Succeeded", "Failed") and (rt is None or rt.finished):
            if deleting:
                self._remove(pod)
            return
        if rt is None:
            rt = self.runtimes[uid] = self._new_runtime(pod)
        penv = PodEnv(pod, self.sources, self.name, self._allocatable)
        status = self.runner.sync(pod, rt, penv)
        if status != (pod.get("status") or {}):
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"],
                                                  {"status": status})
        if deleting and status["phase"] in ("Succeeded", "Failed"):
            self._remove(pod)

    def _new_runtime(self, pod: Obj) -> PodRuntime:
        meta = pod["metadata"]
        rt = new_runtime(pod, self.root / "pods")
        images = sorted({c.spec.get("image", "") for c in rt.containers} - {""})
        log(f"pod {meta['namespace']}/{meta['name']}: image {', '.join(images) or '(none)'} "
            "ignored: its containers run as processes in the project's environment")
        self.logs[(meta["namespace"], meta["name"])] = {c.name: c.log_path for c in
                                                        sorted(rt.containers, key=lambda c: c.init)}
        return rt

    def _remove(self, pod: Obj) -> None:
        """The kubelet's last word on a deleted pod: remove it now (grace 0)."""
        meta = pod["metadata"]
        if meta["uid"] in self.deleted:
            return
        self.deleted.add(meta["uid"])
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body={
                "gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
        except client.exceptions.ApiException as e:
            if e.status not in (404, 409):
                raise

    def _forget(self, live: set[str]) -> None:
        for uid in list(self.runtimes):
            if uid not in live:
                rt = self.runtimes.pop(uid)
                self.runner.signal(rt, signal.SIGKILL)
                self.runner.stop(rt)
                self.runner.close(rt)
                # The pod is gone from the API: its directory (logs, emptyDirs) goes too.
                self.logs = {k: v for k, v in self.logs.items()
                             if not any(p.is_relative_to(rt.dir) for p in v.values())}
                shutil.rmtree(rt.dir, ignore_errors=True)
        self.deleted &= live
        self._write_pgids()

    def _write_pgids(self) -> None:
        """The process groups of running containers, for cluster-down after a crash of ours."""
        pgids = sorted(c.proc.pid for rt in self.runtimes.values() for c in rt.containers
                       if c.proc is not None and c.exit_code is None)
        tmp = self.root / "pgids.tmp"
        tmp.write_text("".join(f"{p}\n" for p in pgids))
        tmp.replace(self.root / "pgids")

    def _allocatable(self, resource: str) -> str:
        return self.capacity.get(resource, "0")

    def log_path(self, namespace: str, pod: str, container: str | None) -> tuple[Path, bool] | None:
        """The container's log file and whether it is still running."""
        files = self.logs.get((namespace, pod))
        if not files:
            return None
        name = container or next(iter(files))
        path = files.get(name)
        if path is None:
            return None
        running = any(c.name == name and c.running for rt in self.runtimes.values()
                      for c in rt.containers if c.log_path == path)
        return path, running

    def shutdown(self) -> None:
        self.stopping.set()
        for rt in self.runtimes.values():
            self.runner.signal(rt, signal.SIGKILL)
        for rt in self.runtimes.values():
            self.runner.stop(rt)
            self.runner.close(rt)
        self.runtimes.clear()
        self._write_pgids()


def now_micro() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} process-node: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--name", default="process-node")
    p.add_argument("--root", required=True, type=Path)
    p.add_argument("--workdir", default=os.getcwd(), type=Path)
    p.add_argument("--port", type=int, default=10250)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--gpus", type=int, default=None, help="advertise N GPUs (default: nvidia-smi)")
    p.add_argument("--max-grace", type=float, default=30.0)
    args = p.parse_args(argv)
    api = config.new_client_from_config(args.kubeconfig)
    node = Node(api, args.name, args.root, args.workdir, args.port, args.max_grace)
    server = LogServer(("127.0.0.1", args.port), node.log_path, args.cert, args.key)
    signal.signal(signal.SIGTERM, lambda *_: node.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: node.stopping.set())
    node.register(machine_capacity(args.gpus))
    threads = [threading.Thread(target=t, daemon=True, name=t.__name__)
               for t in (node.heartbeat, node.watch_pods, server.serve_forever)]
    for t in threads:
        t.start()
    log(f"node {args.name} registered (capacity {node.capacity}); logs on https://{NODE_IP}:{args.port}")
    try:
        node.loop()
    finally:
        server.shutdown()
        node.shutdown()
        log("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
