"""The typed client wrapper against the real control plane (no database): plain-JSON results,
None/False for what is not there, errors as one BackendError line; and the lazy factory.

The cluster tests share namespace ``sweeper``, so every object here has a name of its own, and
a permission is denied by a real ServiceAccount whose Role lacks it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from sweeper.backends.kubernetes import ClientFactory, KubeClient
from sweeper.errors import BackendError
from tests.backends.conftest import Target
from tests.support.k8s_cluster import NS

LABEL = "sweeper.dev/sweep"
#: Scheduling, the Job controller and the garbage collector all take their turn.
PATIENCE_S = 120.0


@pytest.fixture
def admin(k8s_target: Target) -> Iterator[ApiClient]:
    api = config.new_client_from_config(str(k8s_target.kubeconfig))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def sweep(admin: ApiClient) -> Iterator[str]:
    """A sweep (and Job) name no other test uses; its Jobs and pods are removed afterwards."""
    name = f"client-{uuid.uuid4().hex[:8]}"
    yield name
    BatchV1Api(admin).delete_collection_namespaced_job(
        NS, label_selector=f"{LABEL}={name}", propagation_policy="Background")


@pytest.fixture
def kube(k8s_target: Target, sweep: str) -> KubeClient:
    return KubeClient(ClientFactory(str(k8s_target.kubeconfig), request_timeout_s=10),
                      sweep=sweep)


def _job(name: str, image: str, code: str = "print('hello from the pod')") -> dict[str, Any]:
    """A one-pod Indexed Job that passes the namespace's "restricted" Pod Security profile."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {LABEL: name}},
            "spec": {"completionMode": "Indexed", "completions": 1, "parallelism": 1,
                     "backoffLimit": 0, "template": {
                         "metadata": {"labels": {LABEL: name}},
                         "spec": {"restartPolicy": "Never", "securityContext": {
                             "runAsNonRoot": True, "runAsUser": 10001,
                             "seccompProfile": {"type": "RuntimeDefault"}},
                             "containers": [{
                                 "name": "trial", "image": image,
                                 "command": ["python", "-c", code],
                                 "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}}}]}}}}


def _wait(what: str, done: Any) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        assert time.monotonic() < deadline, f"{what} within {PATIENCE_S:.0f}s"
        time.sleep(0.2)


def test_job_lifecycle(kube: KubeClient, sweep: str, k8s_target: Target) -> None:
    created = kube.create_job(NS, _job(sweep, k8s_target.image))
    assert created["metadata"]["name"] == sweep and created["kind"] == "Job"
    assert [j["metadata"]["name"] for j in kube.list_jobs(NS, f"{LABEL}={sweep}")] == [sweep]
    assert kube.list_jobs(NS, f"{LABEL}={sweep}-other") == []
    job = kube.read_job(NS, sweep)
    assert job is not None and job["spec"]["completions"] == 1  # camelCase JSON, not models

    _wait("the pod succeeds", lambda: kube.list_pods(
        NS, f"{LABEL}={sweep}", field_selector="status.phase=Succeeded"))
    (pod,) = kube.list_pods(NS, f"batch.kubernetes.io/job-name={sweep}")
    name = pod["metadata"]["name"]
    assert "hello from the pod" in kube.read_pod_log(NS, name, container="trial")
    assert kube.read_pod_log(NS, name, container="trial", tail_lines=1).count("\n") <= 1

    assert kube.delete_job(NS, sweep) is True
    _wait("the Job is gone", lambda: kube.read_job(NS, sweep) is None)
    assert kube.delete_job(NS, sweep) is False  # already gone: not an error


@pytest.fixture
def cannot_list_pods(admin: ApiClient, k8s_target: Target, sweep: str,
                     tmp_path: Path) -> Iterator[tuple[KubeClient, str]]:
    """A client that authenticates as a ServiceAccount whose Role grants what the CLI's Role
    (manifests/rbac.yaml) grants, except listing pods; and the user the apiserver names."""
    core, rbac = CoreV1Api(admin), RbacAuthorizationV1Api(admin)
    meta = {"name": sweep, "namespace": NS}
    rules = [{"apiGroups": ["batch"], "resources": ["jobs"],
              "verbs": ["create", "get", "list", "watch", "delete"]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
             {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]
    core.create_namespaced_service_account(NS, {"metadata": meta})
    try:
        rbac.create_namespaced_role(NS, {"metadata": meta, "rules": rules})
        rbac.create_namespaced_role_binding(NS, {
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sweep},
            "subjects": [{"kind": "ServiceAccount", "name": sweep, "namespace": NS}]})
        token = core.create_namespaced_service_account_token(
            sweep, NS, {"spec": {"expirationSeconds": 600}}).status.token
        kubeconfig = yaml.safe_load(k8s_target.kubeconfig.read_text())
        kubeconfig["users"] = [{"name": sweep, "user": {"token": token}}]
        kubeconfig["contexts"][0]["context"].update(user=sweep, namespace=NS)
        path = tmp_path / "kubeconfig-limited"
        path.write_text(yaml.safe_dump(kubeconfig))
        yield (KubeClient(ClientFactory(str(path), request_timeout_s=10), sweep=sweep),
               f"system:serviceaccount:{NS}:{sweep}")
    finally:
        for delete in (rbac.delete_namespaced_role_binding, rbac.delete_namespaced_role,
                       core.delete_namespaced_service_account):
            try:
                delete(sweep, NS)
            except ApiException as e:
                if e.status != 404:
                    raise


def test_errors_are_one_line(kube: KubeClient, sweep: str, k8s_target: Target,
                             cannot_list_pods: tuple[KubeClient, str]) -> None:
    kube.create_job(NS, _job(sweep, k8s_target.image))
    with pytest.raises(BackendError, match=rf"^Job {sweep} already exists \(sweeper cancel "
                                           rf"{sweep}, or resume\)$"):
        kube.create_job(NS, _job(sweep, k8s_target.image))
    assert kube.list_jobs("nowhere", f"{LABEL}={sweep}") == []
    with pytest.raises(BackendError, match=r"^namespace nowhere not found"):
        kube.create_job("nowhere", _job(sweep, k8s_target.image))

    limited, user = cannot_list_pods
    assert [j["metadata"]["name"] for j in limited.list_jobs(NS, f"{LABEL}={sweep}")] == [sweep]
    with pytest.raises(BackendError, match=rf"^permission denied: {re.escape(user)} may not "
                                           rf"list pods in namespace {NS};"):
        limited.list_pods(NS, f"{LABEL}={sweep}")
    with pytest.raises(BackendError, match=r"^not found: "):
        kube.read_pod_log(NS, "no-such-pod", container="trial")


def test_factory_is_lazy_and_says_what_is_missing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    factory = ClientFactory()  # nothing is loaded yet
    assert not factory.configured()
    with pytest.raises(BackendError, match=r"^no Kubernetes configuration"):
        KubeClient(factory).list_jobs(NS, "a=b")
    broken = tmp_path / "broken"
    for text in ("clusters: [\n", "apiVersion: v1\nkind: Config\n"):
        broken.write_text(text)
        with pytest.raises(BackendError, match=rf"^cannot load Kubernetes configuration from "
                                               rf"{broken}: "):
            ClientFactory(str(broken)).api_client()


def test_importing_the_backend_talks_to_no_cluster() -> None:
    """Importing sweeper's Kubernetes code does not even import the kubernetes client."""
    code = ("import sys, sweeper.backends.kubernetes, sweeper.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"
