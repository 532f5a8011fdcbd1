"""The process node as the kubelet it stands in for, through the real apiserver and scheduler:
init containers in order, a sidecar that runs beside the main container and is stopped after
it, env from a Secret and the downward API, ConfigMap and emptyDir volumes (``/dev/shm``
included), pod status and logs; deletion with SIGTERM, the grace period, then SIGKILL."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.conftest import Target

NS = "default"
Obj = dict[str, Any]


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
    """A shell script; paths go in as arguments (``$1``...): the node rewrites a volume's
    mountPath where it starts an argument or an env value, not inside a script."""
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", script, "sh"],
            "args": list(args), **extra}


def _log(core: client.CoreV1Api, name: str, container: str | None = None) -> str:
    kw = {"container": container} if container else {}
    resp = core.read_namespaced_pod_log(name, NS, _preload_content=False, **kw)
    return str(resp.data.decode())


def test_init_containers_a_sidecar_env_and_volumes(core: client.CoreV1Api) -> None:
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
        assert log[5].endswith("/volumes/" + log[5].rsplit("/", 1)[1]) and "work-" in log[5]
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
def test_deletion_sends_sigterm_then_sigkill(core: client.CoreV1Api, trap: str, grace: int,
                                             code: int) -> None:
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
