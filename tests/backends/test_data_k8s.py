"""The spec's ``data:`` on Kubernetes, through the fake API server: an S3 dataset (moto's
server) is synced once per pod into its scratch, so the indexes a pod runs share one download;
a dataset on a read-only PVC is read in place."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sweeper.backends.kubernetes import job_info
from tests.support.k8s_cluster import NS, Cluster
from tests.support.s3 import CREDENTIALS, REGION, S3Server, moto_s3

pytestmark = [pytest.mark.postgres,
              pytest.mark.fake_only(reason="pods reach moto on 127.0.0.1; the fake's PVCs are "
                                           "local directories the test fills")]

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


@pytest.fixture
def s3() -> Iterator[S3Server]:
    with moto_s3() as server:
        client = server.client()
        client.create_bucket(Bucket="datasets")
        for i, key in enumerate(["a.txt", "b/c.txt"], 1):
            client.put_object(Bucket="datasets", Key=f"digits/{key}", Body=str(i).encode())
        yield server


def test_s3_dataset_is_downloaded_once_per_pod(cluster: Cluster, s3: S3Server) -> None:
    fake = cluster.fake
    assert fake is not None
    fake.add_secret(NS, "s3-creds", dict(CREDENTIALS))
    spec = cluster.spec(SPEC.format(name="k8s-data", extra=f"""
data: {{s3: s3://datasets/digits, endpoint_url: '{s3.endpoint}', region: {REGION},
        credentials_secret: s3-creds}}
kubernetes:
  indexes_per_pod: 2
  env: {{NO_PROXY: 127.0.0.1}}
"""))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    assert job_info(cluster.jobs("k8s-data")[0], 4).state == "Complete"
    trials = [t for ts in cluster.trials("k8s-data").values() for t in ts]
    assert sorted(t.value for t in trials) == [3.0, 4.0, 5.0, 6.0]
    assert all(t.user_attrs["data_files"] == ["a.txt", "b/c.txt"] for t in trials)
    pods = cluster.pods("k8s-data")
    assert len(pods) == 2
    for pod in pods:  # two indexes per pod, one download each
        log = fake.pod_log(NS, pod["metadata"]["name"])
        assert log.count("data: downloading s3://datasets/digits: 2 files, 2 B") == 1, log
        assert log.count(" complete: loss=") == 2
        assert "/scratch/sweeper-data/" not in log  # the fake maps /scratch to the pod's dir
    dirs = {t.user_attrs["data_dir"] for t in trials}
    assert len(dirs) == 2  # one copy per pod, in that pod's scratch


def test_dataset_on_a_read_only_pvc(cluster: Cluster) -> None:
    fake = cluster.fake
    assert fake is not None
    claim = fake.state_dir / "pvc" / NS / "digits-data" / "digits"
    (claim / "sub").mkdir(parents=True)
    (claim / "one.txt").write_text("10")
    (claim / "sub" / "two.txt").write_text("20")
    spec = cluster.spec(SPEC.format(name="k8s-pvc-data", extra="""
data: {path: /datasets/digits}
kubernetes:
  volumes: [{name: datasets, mount_path: /datasets, pvc: digits-data, read_only: true}]
"""))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    trials = [t for ts in cluster.trials("k8s-pvc-data").values() for t in ts]
    assert sorted(t.value for t in trials) == [30.0, 31.0, 32.0, 33.0]
    assert {t.user_attrs["data_dir"] for t in trials} == {str(claim)}
