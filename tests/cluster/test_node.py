"""The local cluster's real node (tests/cluster/realnode.py: kubelet, containerd, runc, the
bridge CNI, kube-proxy, CoreDNS) through the real apiserver and scheduler, with pods from the
locally built trial-runner image: init containers in order, a sidecar that runs beside the main
container and is stopped after it, env from a Secret and the downward API, ConfigMap and
emptyDir volumes (``/dev/shm`` included), pod status and logs; deletion with SIGTERM, the grace
period, then SIGKILL; a memory limit enforced by the kernel (OOMKilled); Service names through
CoreDNS and ClusterIPs through kube-proxy; GPUs from the fake device plugin (the one emulated
part)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.cluster.realnode import NAME
from tests.conftest import RealNodeTarget, Target

NS = "default"
#: The trial runner's image as the Dockerfile builds it: Debian's shell and coreutils, Python.
IMAGE = "sweeper-trial-runner:0.1.0"
Obj = dict[str, Any]


@pytest.fixture
def real(k8s_target: Target) -> RealNodeTarget:
    if k8s_target.real_node is None:
        pytest.skip("the node's own tests run on the local cluster (tests/cluster)")
    return k8s_target.real_node


@pytest.fixture
def core(k8s_target: Target) -> Iterator[client.CoreV1Api]:
    api = config.new_client_from_config(str(k8s_target.kubeconfig))
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


def _pod(core: client.CoreV1Api, name: str) -> Obj | None:
    try:
        resp = core.read_namespaced_pod(name, NS, _preload_content=False)
        return json.loads(resp.data)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _wait_phase(core: client.CoreV1Api, name: str, phases: set[str], seconds: float = 60) -> Obj:
    deadline = time.monotonic() + seconds
    while True:
        pod = _pod(core, name)
        if pod is not None and pod.get("status", {}).get("phase") in phases:
            return pod
        assert time.monotonic() < deadline, pod and pod.get("status")
        time.sleep(0.2)


def _sh(name: str, script: str, *args: str, **extra: Any) -> Obj:
    """A shell script, with arguments (``$1``...), in the trial runner's image."""
    return {"name": name, "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", script, "sh"], "args": list(args), **extra}


def _log(core: client.CoreV1Api, name: str, container: str | None = None) -> str:
    kw = {"container": container} if container else {}
    resp = core.read_namespaced_pod_log(name, NS, _preload_content=False, **kw)
    return str(resp.data.decode())


def test_the_node_runs_containerd_and_advertises_the_fake_gpus(
        core: client.CoreV1Api, real: RealNodeTarget) -> None:
    node = json.loads(core.read_node(NAME, _preload_content=False).data)
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://"), info
    assert info["kubeletVersion"] == "v1.36.3"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert any(c["type"] == "Ready" and c["status"] == "True"
               for c in node["status"]["conditions"])
    images = {n for image in node["status"].get("images", []) for n in image.get("names") or []}
    assert "docker.io/library/sweeper-trial-runner:0.1.0" in images, images


def test_init_containers_a_sidecar_env_and_volumes(core: client.CoreV1Api,
                                                   real: RealNodeTarget) -> None:
    name = f"node-shape-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_secret(NS, {"metadata": {"name": name},
                                       "stringData": {"TOKEN": "s3cr3t"}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": name},
                                           "data": {"greeting": "hello from a ConfigMap"}})
    work = {"name": "work", "mountPath": "/work"}
    pod = {"metadata": {"name": name, "annotations": {
               "batch.kubernetes.io/job-completion-index": "7"}},
           "spec": {
               "restartPolicy": "Never",
               "initContainers": [
                   _sh("prepare", 'echo prepared > "$1"; echo init-done', "/work/ready",
                       volumeMounts=[work]),
                   _sh("sidecar", "trap 'echo sidecar-stopped; exit 0' TERM; echo sidecar-up; "
                       "while true; do sleep 0.1; done", restartPolicy="Always")],
               "containers": [_sh(
                   "main", 'cat "$1"; echo index=$JOB_COMPLETION_INDEX; echo token=$TOKEN; '
                   'cat "$2"; echo; touch "$3/x" && echo shm-ok; pwd',
                   "/work/ready", "/config/greeting", "/dev/shm",
                   workingDir="/work",
                   env=[{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                       "fieldPath": "metadata.annotations['batch.kubernetes.io/"
                                    "job-completion-index']"}}}],
                   envFrom=[{"secretRef": {"name": name}}],
                   volumeMounts=[work, {"name": "config", "mountPath": "/config"},
                                 {"name": "shm", "mountPath": "/dev/shm"}])],
               "volumes": [{"name": "work", "emptyDir": {}},
                           {"name": "config", "configMap": {"name": name}},
                           {"name": "shm", "emptyDir": {"medium": "Memory"}}]}}
    core.create_namespaced_pod(NS, pod)
    try:
        done = _wait_phase(core, name, {"Succeeded", "Failed"})
        assert done["status"]["phase"] == "Succeeded", done["status"]
        log = _log(core, name, "main").splitlines()
        assert log[:5] == ["prepared", "index=7", "token=s3cr3t", "hello from a ConfigMap",
                           "shm-ok"]
        assert log[5] == "/work"
        assert _log(core, name, "prepare") == "init-done\n"
        assert "sidecar-up" in _log(core, name, "sidecar")
        inits = {c["name"]: c for c in done["status"]["initContainerStatuses"]}
        main = done["status"]["containerStatuses"][0]["state"]["terminated"]
        assert inits["prepare"]["state"]["terminated"]["exitCode"] == 0
        assert inits["prepare"]["state"]["terminated"]["finishedAt"] <= main["startedAt"]
        assert "terminated" in inits["sidecar"]["state"]  # stopped with the pod
        assert main["exitCode"] == 0 and main["reason"] == "Completed"
    finally:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
        core.delete_namespaced_secret(name, NS)
        core.delete_namespaced_config_map(name, NS)


@pytest.mark.parametrize(("trap", "grace", "code"), [
    ("trap 'echo got-term; exit 3' TERM", 10, 3),  # stops on SIGTERM within the grace period
    ("trap '' TERM", 1, 137),  # ignores it: SIGKILL when the grace period is over
])
def test_deletion_sends_sigterm_then_sigkill(core: client.CoreV1Api, real: RealNodeTarget,
                                             trap: str, grace: int, code: int) -> None:
    name = f"node-delete-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(NS, {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
        "containers": [_sh("main", f"{trap}; echo started; while true; do sleep 0.1; done")]}})
    _wait_phase(core, name, {"Running"})
    deadline = time.monotonic() + 20
    while "started" not in _log(core, name):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    rv = _pod(core, name)["metadata"]["resourceVersion"]  # type: ignore[index]
    core.delete_namespaced_pod(name, NS)
    last: Obj | None = None
    for event in watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=rv,
                                      field_selector=f"metadata.name={name}",
                                      timeout_seconds=30, _preload_content=False):
        last = event["raw_object"]
        if event["type"] == "DELETED":
            break
    # The node's last status before it removed the pod (what the DELETED event carries).
    assert last is not None and last["status"]["phase"] == "Failed", last and last["status"]
    terminated = last["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == code


def _run_to_end(core: client.CoreV1Api, name: str, spec: Obj,
                seconds: float = 90) -> Obj:
    core.create_namespaced_pod(NS, {"metadata": {"name": name, "labels": {"app": name}},
                                    "spec": {"restartPolicy": "Never", **spec}})
    return _wait_phase(core, name, {"Succeeded", "Failed"}, seconds)


def test_a_container_over_its_memory_limit_is_oom_killed(core: client.CoreV1Api,
                                                         real: RealNodeTarget) -> None:
    """The kernel enforces the limit through the pod's memory cgroup; the kubelet reports
    the container OOMKilled with exit code 137 (what sweeper's runner and the Job's
    podFailurePolicy see on any cluster)."""
    name = f"node-oom-{uuid.uuid4().hex[:6]}"
    try:
        done = _run_to_end(core, name, {"containers": [{
            "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["python", "-c", "b = bytearray(512 * 2**20); print('survived')"],
            "resources": {"limits": {"memory": "64Mi", "cpu": "500m"}}}]})
        terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137), terminated
        assert "survived" not in _log(core, name)
    finally:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def test_service_names_resolve_through_coredns_and_route_through_kube_proxy(
        core: client.CoreV1Api, real: RealNodeTarget) -> None:
    """A server pod behind a ClusterIP Service and a headless one (the pod's own DNS name, as
    a JobSet's ranks meet); a client pod reaches it by both names, and the pods' resolver is
    the cluster's DNS Service."""
    server, client_pod = f"web-{uuid.uuid4().hex[:6]}", f"client-{uuid.uuid4().hex[:6]}"
    headless = f"{server}-h"
    for svc in ({"metadata": {"name": server}, "spec": {
                    "selector": {"app": server}, "ports": [{"port": 80, "targetPort": 8080}]}},
                {"metadata": {"name": headless}, "spec": {
                    "clusterIP": "None", "selector": {"app": server},
                    "ports": [{"port": 8080}]}}):
        core.create_namespaced_service(NS, svc)
    serve = ("import http.server, socketserver\n"
             "class H(http.server.BaseHTTPRequestHandler):\n"
             "    def do_GET(self):\n"
             "        self.send_response(200); self.end_headers(); self.wfile.write(b'hello')\n"
             "socketserver.TCPServer(('', 8080), H).serve_forever()\n")
    fetch = ("import sys, time, urllib.request\n"
             "for url in sys.argv[1:]:\n"
             "    for _ in range(100):\n"
             "        try:\n"
             "            print(url, urllib.request.urlopen(url, timeout=2).read().decode())\n"
             "            break\n"
             "        except OSError as e:\n"
             "            last = e; time.sleep(0.3)\n"
             "    else:\n"
             "        sys.exit(f'{url}: {last}')\n"
             "print(open('/etc/resolv.conf').read())\n")
    urls = [f"http://{server}.{NS}.svc.cluster.local/",
            f"http://{server}/",
            f"http://srv.{headless}.{NS}.svc.cluster.local:8080/"]
    try:
        core.create_namespaced_pod(NS, {"metadata": {"name": server, "labels": {"app": server}},
                                        "spec": {
            "hostname": "srv", "subdomain": headless,
            "containers": [{"name": "web", "image": IMAGE, "imagePullPolicy": "Never",
                            "command": ["python", "-c", serve]}]}})
        done = _run_to_end(core, client_pod, {"containers": [{
            "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["python", "-c", fetch, *urls]}]}, seconds=120)
        log = _log(core, client_pod)
        assert done["status"]["phase"] == "Succeeded", log
        assert [line for line in log.splitlines() if line.endswith("hello")] == [
            f"{url} hello" for url in urls]
        svc = core.read_namespaced_service("kube-dns", "kube-system")
        assert f"nameserver {svc.spec.cluster_ip}" in log
    finally:
        for pod in (server, client_pod):
            core.delete_namespaced_pod(pod, NS, grace_period_seconds=0)
        for name in (server, headless):
            core.delete_namespaced_service(name, NS)


def test_gpus_come_from_the_device_plugin(core: client.CoreV1Api, real: RealNodeTarget) -> None:
    """The fake device plugin through the kubelet's device manager: a container granted two
    ``nvidia.com/gpu`` sees two distinct devices in NVIDIA_VISIBLE_DEVICES and their ordinals
    in CUDA_VISIBLE_DEVICES; a pod asking for more than the node has stays Pending."""
    name, greedy = f"node-gpu-{uuid.uuid4().hex[:6]}", f"node-gpu5-{uuid.uuid4().hex[:6]}"
    try:
        done = _run_to_end(core, name, {"containers": [_sh(
            "main", 'echo "nvidia=$NVIDIA_VISIBLE_DEVICES cuda=$CUDA_VISIBLE_DEVICES"',
            resources={"limits": {"nvidia.com/gpu": "2"}})]})
        assert done["status"]["phase"] == "Succeeded"
        nvidia, cuda = (part.split("=", 1)[1] for part in _log(core, name).split())
        assert len(set(nvidia.split(","))) == 2 and all("fake" in d for d in nvidia.split(","))
        assert sorted(cuda.split(",")) == sorted(
            str(int(d.rsplit("-", 1)[1])) for d in nvidia.split(","))
        core.create_namespaced_pod(NS, {"metadata": {"name": greedy}, "spec": {
            "restartPolicy": "Never", "containers": [_sh(
                "main", "true", resources={"limits": {"nvidia.com/gpu": "5"}})]}})
        time.sleep(3)
        pending = _pod(core, greedy)
        assert pending is not None and pending["status"]["phase"] == "Pending"
        (cond,) = [c for c in pending["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert cond["status"] == "False" and "nvidia.com/gpu" in cond["message"]
    finally:
        for pod in (name, greedy):
            core.delete_namespaced_pod(pod, NS, grace_period_seconds=0)
