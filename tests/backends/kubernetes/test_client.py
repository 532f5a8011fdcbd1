"""The typed client wrapper against the fake API server (no database): plain-JSON results,
None/False for what is not there, errors as one BackendError line; and the lazy factory."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sweeper.backends.kubernetes import ClientFactory, KubeClient
from sweeper.errors import BackendError
from tests.support.k8s_fake import FakeKubeAPI

NS = "sweeper"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(workdir=tmp_path) as f:
        f.add_namespace(NS)
        yield f


@pytest.fixture
def kube(fake: FakeKubeAPI, tmp_path: Path) -> KubeClient:
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    return KubeClient(ClientFactory(str(kubeconfig), request_timeout_s=10), sweep="s")


def _job(name: str, code: str = "print('hello from the pod')") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"sweeper.dev/sweep": "s"}},
            "spec": {"completionMode": "Indexed", "completions": 1, "parallelism": 1,
                     "backoffLimit": 0, "template": {
                         "metadata": {"labels": {"sweeper.dev/sweep": "s"}},
                         "spec": {"restartPolicy": "Never", "containers": [{
                             "name": "trial", "image": "x",
                             "command": [sys.executable, "-c", code]}]}}}}


def test_job_lifecycle(kube: KubeClient) -> None:
    created = kube.create_job(NS, _job("s"))
    assert created["metadata"]["name"] == "s" and created["kind"] == "Job"
    assert [j["metadata"]["name"] for j in kube.list_jobs(NS, "sweeper.dev/sweep=s")] == ["s"]
    assert kube.list_jobs(NS, "sweeper.dev/sweep=other") == []
    job = kube.read_job(NS, "s")
    assert job is not None and job["spec"]["completions"] == 1  # camelCase JSON, not models

    deadline = time.monotonic() + 30
    while not kube.list_pods(NS, "sweeper.dev/sweep=s", field_selector="status.phase=Succeeded"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (pod,) = kube.list_pods(NS, "batch.kubernetes.io/job-name=s")
    name = pod["metadata"]["name"]
    assert "hello from the pod" in kube.read_pod_log(NS, name, container="trial")
    assert kube.read_pod_log(NS, name, container="trial", tail_lines=1).count("\n") <= 1

    assert kube.delete_job(NS, "s") is True
    deadline = time.monotonic() + 30
    while kube.read_job(NS, "s") is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert kube.delete_job(NS, "s") is False  # already gone: not an error


def test_errors_are_one_line(kube: KubeClient, fake: FakeKubeAPI) -> None:
    kube.create_job(NS, _job("s"))
    with pytest.raises(BackendError, match=r"^Job s already exists \(sweeper cancel s, or "
                                           r"resume\)$"):
        kube.create_job(NS, _job("s"))
    assert kube.list_jobs("nowhere", "sweeper.dev/sweep=s") == []  # as a real apiserver
    with pytest.raises(BackendError, match=r"^namespace nowhere not found"):
        kube.create_job("nowhere", _job("s"))
    fake.forbid("list", "pods", namespace=NS)
    with pytest.raises(BackendError, match=r"^permission denied: .* may not list pods in "
                                           r"namespace sweeper;"):
        kube.list_pods(NS, "sweeper.dev/sweep=s")
    fake.allow_all()
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
