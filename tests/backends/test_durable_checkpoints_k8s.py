"""Checkpoints that survive the pod, end to end against the local control plane: a pod evicted
in the middle of training (the Eviction API: the apiserver marks it DisruptionTarget and
deletes it, SIGTERM then the grace period; the Job's podFailurePolicy ignores the failure) is
replaced by the Job controller with a new pod (a fresh /scratch), and the retry resumes from
the step the evicted attempt saved, to S3 (moto's server, at the address the pods reach this
machine at) or to a checkpoint volume (a claim every pod shares), not from step 0. On the real
node the SIGTERM and the grace period are the kubelet's and containerd's.

The checkpoint volume is a PVC, not an inline ``nfs:`` volume: the namespace of manifests/
enforces Pod Security "restricted", whose admission rejects pods with inline NFS volumes.

Local control plane only: the pods leave markers on a claim's volume (mounted at /markers)
that the test reads as a directory of this machine."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.kubernetes import job_info
from sweeper.study import load_sweep, open_storage
from tests.support.k8s_cluster import NS, Cluster
from tests.support.s3 import CREDENTIALS, REGION, S3Server, moto_s3

pytestmark = pytest.mark.postgres


@pytest.fixture
def s3(cluster: Cluster) -> Iterator[S3Server]:
    with moto_s3(cluster.pod_host) as server:
        yield server



def _logs(cluster: Cluster, name: str) -> dict[str, str]:
    """Each pod's log, through the apiserver (for an assertion's message)."""
    out = {}
    for pod in cluster.pods(name):
        pod_name = pod["metadata"]["name"]
        try:
            out[pod_name] = cluster.core().read_namespaced_pod_log(pod_name, NS)
        except Exception as e:  # noqa: BLE001 - a pod not started yet, or gone: say so
            out[pod_name] = f"(no log: {e})"
    return out



@pytest.mark.parametrize("where", ["s3", "volume"])
def test_preempted_pod_is_replaced_and_resumes_from_the_durable_checkpoint(
        cluster: Cluster, s3: S3Server, s3_secret: str, where: str) -> None:
    name = f"k8s-ckpt-{where}"
    s3.client().create_bucket(Bucket="ckpts")
    with cluster.shared_claim("markers") as (marks, markers):
        if where == "s3":
            _preempt_and_resume(cluster, name, _spec(name, f"""artifacts: {{store: s3,
  bucket: ckpts, endpoint_url: '{s3.endpoint}', region: {REGION},
  credentials_secret: {s3_secret}}}
kubernetes:
  volumes: [{{name: markers, mount_path: /markers, pvc: {marks}}}]"""), markers, None)
            return
        with cluster.shared_claim("ckpt") as (claim, directory):
            _preempt_and_resume(cluster, name, _spec(name, f"""kubernetes:
  volumes: [{{name: ckpt, mount_path: /ckpt, pvc: {claim}}},
            {{name: markers, mount_path: /markers, pvc: {marks}}}]
  checkpoint_volume: ckpt"""), markers, directory)


def _spec(name: str, durable: str) -> str:
    return f"""
name: {name}
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
  env: {{MARKER_DIR: /markers}}
"""


def _preempt_and_resume(cluster: Cluster, name: str, text: str, markers: Path,
                        volume: Path | None) -> None:
    """Run, evict the pod once step 2 is saved, check the retry resumed from the last saved
    step: restored from S3, or (``volume``: the checkpoint volume's directory) found there."""
    result = cluster.sweeper("run", cluster.spec(text), "--backend", "kubernetes", "--detach")
    assert result.exit_code == 0, result.output
    assert "checkpoints go to the pod's" not in result.output  # durable: no warning

    deadline = time.monotonic() + cluster.patience(60)
    while not (markers / "saved-0-0-2").exists():
        assert time.monotonic() < deadline, _logs(cluster, name)
        time.sleep(0.05)
    (first,) = cluster.pods(name)
    victim = first["metadata"]["name"]
    # Preempted: the apiserver adds DisruptionTarget and deletes the pod (SIGTERM, then the
    # grace period); the podFailurePolicy ignores the failure, so no retry is spent on it.
    cluster.core().create_namespaced_pod_eviction(victim, NS, {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": victim, "namespace": NS}})

    job = cluster.wait_for_job(name, 90, lambda: _logs(cluster, name))
    assert job_info(job, 1).state == "Complete", job["status"]
    assert not job["status"].get("failed"), job["status"]  # the eviction spent no retry
    pods = cluster.pods(name)
    assert len(pods) == 1 and pods[0]["metadata"]["uid"] != first["metadata"]["uid"], pods
    killed, retry = cluster.trials(name)[0]
    assert killed.state == TrialState.FAIL and retry.state == TrialState.COMPLETE
    saved = max(int(p.name.rsplit("-", 1)[1]) for p in markers.glob("saved-0-0-*"))
    assert saved >= 2
    assert retry.user_attrs[protocol.RESUMED_ATTR] == saved
    assert retry.user_attrs["start_step"] == saved + 1
    assert min(s for s, _ in retry.user_attrs[protocol.HISTORY_ATTR]["loss"]) == saved + 1
    log = cluster.core().read_namespaced_pod_log(pods[0]["metadata"]["name"], NS)
    assert CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in log
    key = load_sweep(open_storage(cluster.url), name).state_key  # the sweep's own prefix
    assert key.startswith(f"{name}-")
    if volume is None:
        assert f"restored the checkpoint of step {saved} (trial #{killed.number}) from " \
               f"s3://ckpts/checkpoints/{key}/index-0" in log
    else:  # the volume is the checkpoint directory: nothing to restore, it is just there
        assert "restored the checkpoint" not in log
        assert (volume / "checkpoints" / key / "index-0" / "checkpoint.pt").is_file()
