"""`sweeper delete` of a sweep launched on Kubernetes: its Jobs go first, and with them, through
the garbage collector and owner references, their pods and the spec's ConfigMap; then the
study. Against the local control plane (or a cluster of your own)."""

from __future__ import annotations

import time

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.study import open_storage
from tests.support.k8s_cluster import NS, Cluster

pytestmark = pytest.mark.postgres

SPEC = """
name: k8s-delete
method: grid
objective: {metric: loss, direction: minimize}
parallelism: 2
trial:
  entrypoint: tests.support.k8s_objectives:slow
  fixed: {delay: 20}
parameters:
  x: {type: int, low: 0, high: 3}
"""


def test_delete_removes_the_jobs_then_the_study(cluster: Cluster) -> None:
    spec = cluster.spec(SPEC)
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    deadline = time.monotonic() + cluster.patience(30)
    while TrialState.RUNNING not in [t.state for ts in cluster.trials("k8s-delete").values()
                                     for t in ts]:
        assert time.monotonic() < deadline
        time.sleep(0.1)

    (job,) = cluster.jobs("k8s-delete")
    configmap = cluster.core().read_namespaced_config_map("k8s-delete-spec", NS)
    assert [(r.kind, r.uid) for r in configmap.metadata.owner_references] == [
        ("Job", job["metadata"]["uid"])]

    refused = cluster.sweeper("delete", "k8s-delete")
    assert refused.exit_code == 2
    assert "1 Kubernetes Job(s) in namespace sweeper: k8s-delete" in refused.stderr
    assert len(cluster.jobs("k8s-delete")) == 1

    deleted = cluster.sweeper("delete", spec, "--yes")  # the spec file names the sweep
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.splitlines()[0] == "deleted Job sweeper/k8s-delete"
    assert "deleted sweep k8s-delete (4 trial(s))" in deleted.stdout
    assert "ConfigMap sweeper/k8s-delete-spec goes with its Job (garbage collector)" \
        in deleted.stdout
    assert cluster.jobs("k8s-delete") == [] and cluster.pods("k8s-delete") == []
    deadline = time.monotonic() + cluster.patience(10)
    while _configmap_exists(cluster, "k8s-delete-spec"):
        assert time.monotonic() < deadline, "the garbage collector left the ConfigMap"
        time.sleep(0.2)
    assert [s.study_name for s in optuna.get_all_study_summaries(open_storage(cluster.url))] \
        == []

    offline = cluster.sweeper("delete", "k8s-delete", "--yes", "--no-kubernetes")
    assert offline.exit_code == 2 and "no sweep named 'k8s-delete'" in offline.stderr


def _configmap_exists(cluster: Cluster, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        cluster.core().read_namespaced_config_map(name, NS)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True
