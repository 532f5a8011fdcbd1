"""Kueue, for real: Kueue's manager (v0.17.0, built from its Go module, its webhooks served)
against the local control plane. A sweep whose Job carries the queue label waits suspended
while its ClusterQueue has no quota, is admitted when quota is added, and never runs more pods
than the quota allows (Kueue's partial admission lowers the Job's parallelism to fit)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.kueue import API, queue_objects
from tests.support.k8s_cluster import NS, Cluster, kubectl

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

QUEUE = "sweeps-test"


def _apply(cluster: Cluster, objects: list[dict[str, Any]], verb: str = "apply") -> None:
    extra = ["--wait"] if verb == "delete" else []
    out = subprocess.run([kubectl(), "--kubeconfig", str(cluster.kubeconfig), verb, *extra,
                          "-f", "-"], input=yaml.safe_dump_all(objects), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.fixture
def queue(cluster: Cluster) -> Iterator[str]:
    assert cluster.local is not None, "Kueue runs in the local control plane (tests/cluster)"
    _apply(cluster, queue_objects(QUEUE, NS, "0"))
    try:
        yield QUEUE
    finally:
        cluster.remove_jobs()
        _apply(cluster, list(reversed(queue_objects(QUEUE, NS, "0"))), "delete")


def _workloads(cluster: Cluster) -> list[dict[str, Any]]:
    from kubernetes.client import CustomObjectsApi

    group, version = API.split("/")
    items: list[dict[str, Any]] = CustomObjectsApi(cluster.api()).list_namespaced_custom_object(
        group, version, NS, "workloads")["items"]
    return items


def test_a_queued_sweep_waits_for_quota_and_never_exceeds_it(cluster: Cluster,
                                                             queue: str) -> None:
    spec = cluster.spec(f"""
name: kueue-sweep
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 4
trial:
  entrypoint: tests.support.k8s_objectives:slow
  fixed: {{delay: 2}}
  resources: {{cpu: 100m}}
parameters:
  x: {{type: int, values: [0, 1, 2, 3, 4, 5]}}
kubernetes:
  labels: {{kueue.x-k8s.io/queue-name: {queue}}}
  # Kueue may admit the Job with fewer pods at once than parallelism, down to 1.
  annotations: {{kueue.x-k8s.io/job-min-parallelism: "1"}}
""")
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output

    # No quota: the Job stays suspended, no pod is created, its Workload waits.
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        (job,) = cluster.jobs("kueue-sweep")
        assert job["spec"]["suspend"] is True
        assert cluster.pods("kueue-sweep") == []
        time.sleep(0.5)
    (workload,) = [w for w in _workloads(cluster)
                   if w["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]]
    assert workload["spec"]["queueName"] == queue
    reserved = {c["type"]: c for c in workload["status"]["conditions"]}["QuotaReserved"]
    assert reserved["status"] == "False" and "insufficient" in reserved["message"].lower()
    status = cluster.sweeper("status", "kueue-sweep")
    assert "Running (Suspended)" in status.output, status.output

    # Quota for two pods (2 x 100m): admitted, with its parallelism lowered to fit.
    _apply(cluster, queue_objects(queue, NS, "200m"))
    most, deadline = 0, time.monotonic() + cluster.patience(60)
    while True:
        (job,) = cluster.jobs("kueue-sweep")
        running = [p for p in cluster.pods("kueue-sweep")
                   if p["status"].get("phase") in ("Pending", "Running")]
        most = max(most, len(running))
        done = {c["type"] for c in job["status"].get("conditions") or []
                if c["status"] == "True"} & {"Complete", "Failed"}
        if done:
            break
        assert time.monotonic() < deadline, job["status"]
        time.sleep(0.2)
    assert done == {"Complete"}, job["status"]
    assert job["spec"]["parallelism"] == 2  # Kueue's partial admission
    assert 1 <= most <= 2, most
    assert cluster.finished_per_index("kueue-sweep") == {i: 1 for i in range(6)}
