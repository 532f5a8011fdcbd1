"""Checkpoints that survive the pod, end to end through the fake API server: a pod preempted
in the middle of training is replaced by a new pod (a fresh /scratch), and the retry resumes
from the step the killed attempt saved, to S3 (moto's server) or to a checkpoint volume (NFS,
which the fake maps to one directory every pod shares), not from step 0."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.kubernetes import job_info
from tests.support.k8s_cluster import NS, Cluster
from tests.support.s3 import CREDENTIALS, REGION, S3Server, moto_s3

pytestmark = [pytest.mark.postgres,
              pytest.mark.fake_only(reason="preempts a pod; pods reach moto on 127.0.0.1")]


@pytest.fixture
def s3() -> Iterator[S3Server]:
    with moto_s3() as server:
        yield server


@pytest.mark.parametrize("where", ["s3", "volume"])
def test_preempted_pod_is_replaced_and_resumes_from_the_durable_checkpoint(
        cluster: Cluster, s3: S3Server, tmp_path: Path, where: str) -> None:
    fake = cluster.fake
    assert fake is not None
    s3.client().create_bucket(Bucket="ckpts")
    fake.add_secret(NS, "s3-creds", dict(CREDENTIALS))
    markers = tmp_path / "markers"
    markers.mkdir()
    durable = f"""artifacts: {{store: s3, bucket: ckpts, endpoint_url: '{s3.endpoint}',
             region: {REGION}, credentials_secret: s3-creds}}
kubernetes:""" if where == "s3" else """kubernetes:
  volumes: [{name: ckpt, mount_path: /ckpt, nfs: {server: nfs.internal, path: /sweeps}}]
  checkpoint_volume: ckpt"""
    spec = cluster.spec(f"""
name: k8s-ckpt
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 1
trial:
  entrypoint: tests.support.cluster_objectives:resumable
  fixed: {{steps: 8, delay: 0.4}}
  retries: 1
parameters:
  x: {{type: int, values: [0]}}
{durable}
  env: {{MARKER_DIR: '{markers}', NO_PROXY: 127.0.0.1}}
""")
    result = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert result.exit_code == 0, result.output
    assert "checkpoints go to the pod's" not in result.output  # durable: no warning

    deadline = time.monotonic() + 60
    while not (markers / "saved-0-0-2").exists():
        assert time.monotonic() < deadline, [fake.pod_log(NS, p["metadata"]["name"])
                                             for p in cluster.pods("k8s-ckpt")]
        time.sleep(0.05)
    (first,) = cluster.pods("k8s-ckpt")
    fake.disrupt(first["metadata"]["name"], NS)  # preempted: SIGKILL, the pod is deleted

    job = fake.wait_for_job(NS, "k8s-ckpt", timeout=90)
    assert job_info(job, 1).state == "Complete", job["status"]
    pods = cluster.pods("k8s-ckpt")
    assert len(pods) == 1 and pods[0]["metadata"]["uid"] != first["metadata"]["uid"]
    killed, retry = cluster.trials("k8s-ckpt")[0]
    assert killed.state == TrialState.FAIL and retry.state == TrialState.COMPLETE
    saved = max(int(p.name.rsplit("-", 1)[1]) for p in markers.glob("saved-0-0-*"))
    assert saved >= 2
    assert retry.user_attrs[protocol.RESUMED_ATTR] == saved
    assert retry.user_attrs["start_step"] == saved + 1
    assert min(s for s, _ in retry.user_attrs[protocol.HISTORY_ATTR]["loss"]) == saved + 1
    log = fake.pod_log(NS, pods[0]["metadata"]["name"])
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in log
    if where == "s3":
        assert f"restored the checkpoint of step {saved} (trial #{killed.number}) from " \
               "s3://ckpts/checkpoints/k8s-ckpt/index-0" in log
    else:  # the volume is the checkpoint directory: nothing to restore, it is just there
        assert "restored the checkpoint" not in log
        shared = fake.state_dir / "nfs" / "nfs.internal" / "sweeps" / "checkpoints"
        assert (shared / "k8s-ckpt" / "index-0" / "checkpoint.pt").is_file()
