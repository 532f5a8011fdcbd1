"""The spec's ``data:`` on Kubernetes, against the local control plane: an S3 dataset (moto's
server) is synced once per pod into its scratch, so the indexes a pod runs share one download;
a dataset on a read-only PVC (bound by kube-controller-manager's PV binder to a hostPath
PersistentVolume) is read in place.

Local cluster only: its pods reach moto at their gateway, and the test fills the claim's
directory on this machine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import FrozenTrial

from sweeper.backends.kubernetes import job_info
from tests.support.k8s_cluster import NS, Cluster
from tests.support.s3 import REGION, S3Server, moto_s3

pytestmark = pytest.mark.postgres


SPEC = """
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 2
trial:
  entrypoint: tests.support.cluster_objectives:reads_data
  retries: 0
parameters:
  x: {{type: int, low: 0, high: 3}}
{extra}"""


def _values(trials: list[FrozenTrial]) -> list[float]:
    """The trials' values, sorted; every trial has one."""
    values = [t.value for t in trials]
    assert all(v is not None for v in values), trials
    return sorted(v for v in values if v is not None)


@pytest.fixture
def s3(cluster: Cluster) -> Iterator[S3Server]:
    with moto_s3(cluster.pod_host) as server:
        client = server.client()
        client.create_bucket(Bucket="datasets")
        for i, key in enumerate(["a.txt", "b/c.txt"], 1):
            client.put_object(Bucket="datasets", Key=f"digits/{key}", Body=str(i).encode())
        yield server



def test_s3_dataset_is_downloaded_once_per_pod(cluster: Cluster, s3: S3Server,
                                               s3_secret: str) -> None:
    spec = cluster.spec(SPEC.format(name="k8s-data", extra=f"""
data: {{s3: s3://datasets/digits, endpoint_url: '{s3.endpoint}', region: {REGION},
        credentials_secret: {s3_secret}}}
kubernetes:
  indexes_per_pod: 2
"""))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    assert job_info(cluster.jobs("k8s-data")[0], 4).state == "Complete"
    trials = [t for ts in cluster.trials("k8s-data").values() for t in ts]
    assert _values(trials) == [3.0, 4.0, 5.0, 6.0]
    assert all(t.user_attrs["data_files"] == ["a.txt", "b/c.txt"] for t in trials)
    pods = cluster.pods("k8s-data")
    assert len(pods) == 2
    for pod in pods:  # two indexes per pod, one download each
        log = cluster.core().read_namespaced_pod_log(pod["metadata"]["name"], NS)
        assert log.count("data: downloading s3://datasets/digits: 2 files, 2 B") == 1, log
        assert log.count(" complete: loss=") == 2
    # One copy per pod, in that pod's own scratch emptyDir (the same path in each container).
    assert {Path(t.user_attrs["data_dir"]).parts[:2] for t in trials} == {("/", "scratch")}


@pytest.fixture
def claim(cluster: Cluster) -> Iterator[tuple[str, Path]]:
    """A read-only PVC bound to a hostPath PersistentVolume, and its directory on the node."""
    with cluster.shared_claim("digits", ["ReadOnlyMany"], "1Mi") as bound:
        yield bound


def test_dataset_on_a_read_only_pvc(cluster: Cluster, claim: tuple[str, Path]) -> None:
    name, directory = claim
    data = directory / "digits"
    (data / "sub").mkdir(parents=True)
    (data / "one.txt").write_text("10")
    (data / "sub" / "two.txt").write_text("20")
    spec = cluster.spec(SPEC.format(name="k8s-pvc-data", extra=f"""
data: {{path: /datasets/digits}}
kubernetes:
  volumes: [{{name: datasets, mount_path: /datasets, pvc: {name}, read_only: true}}]
"""))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    trials = [t for ts in cluster.trials("k8s-pvc-data").values() for t in ts]
    assert _values(trials) == [30.0, 31.0, 32.0, 33.0]
    assert {t.user_attrs["data_dir"] for t in trials} == {"/datasets/digits"}
