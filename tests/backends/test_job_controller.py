"""What the real Job controller does with sweeper's Indexed Job when pods die: a pod killed
mid-trial is replaced only once it has failed (``podReplacementPolicy: Failed``) and its index
retried once; an eviction is a disruption the ``podFailurePolicy`` ignores (no retry spent);
``backoffLimitPerIndex`` spent for one index fails that index while the others finish. Run
against the local cluster (kube-controller-manager's Job controller, the scheduler, the node)
or a cluster of your own."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper.backends import manifests as m
from sweeper.backends.kubernetes import parse_intervals
from tests.support.k8s_cluster import NS, Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _spec(name: str, entrypoint: str, n: int, retries: int, fixed: str) -> str:
    return f"""
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: {n}
trial:
  entrypoint: tests.support.k8s_objectives:{entrypoint}
  fixed: {fixed}
  retries: {retries}
parameters:
  x: {{type: int, values: {list(range(n))}}}
"""


def _by_index(cluster: Cluster, name: str) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for pod in cluster.pods(name):
        out.setdefault(int(pod["metadata"]["annotations"][m.COMPLETION_INDEX]), []).append(pod)
    return out


def _running_pod(cluster: Cluster, name: str, index: int) -> dict[str, Any]:
    """The pod of ``index`` once its trial is RUNNING (the runner has claimed it)."""
    deadline = time.monotonic() + cluster.patience(30)
    while True:
        trials = cluster.trials(name).get(index, [])
        pods = [p for p in _by_index(cluster, name).get(index, [])
                if p["status"].get("phase") == "Running"]
        if pods and any(t.state == TrialState.RUNNING for t in trials):
            return pods[-1]
        assert time.monotonic() < deadline, (trials, pods)
        time.sleep(0.2)



def test_a_killed_pod_is_replaced_after_it_failed_and_its_index_retried_once(
        cluster: Cluster) -> None:
    spec = cluster.spec(_spec("jc-kill", "slow", n=2, retries=1, fixed="{delay: 6}"))
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    victim = _running_pod(cluster, "jc-kill", 0)
    cluster.kill_container(victim)  # the trial's process dies mid-trial: exit code 137

    job = cluster.wait_for_job("jc-kill", 60)
    assert parse_intervals(job["status"]["completedIndexes"]) == [0, 1], job["status"]
    assert cluster.finished_per_index("jc-kill") == {0: 1, 1: 1}
    trials = cluster.trials("jc-kill")
    assert [t.state for t in trials[0]] == [TrialState.FAIL, TrialState.COMPLETE]
    pods = _by_index(cluster, "jc-kill")
    first, second = pods[0]
    assert first["status"]["phase"] == "Failed" and second["status"]["phase"] == "Succeeded"
    terminated = first["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 137
    assert second["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"] \
        == "1"
    # podReplacementPolicy: Failed: the replacement was created after the first pod failed.
    assert second["metadata"]["creationTimestamp"] >= terminated["finishedAt"]
    assert [p["status"]["phase"] for p in pods[1]] == ["Succeeded"]


def test_an_eviction_is_a_disruption_and_spends_no_retry(cluster: Cluster) -> None:
    # retries: 0, so a counted failure would fail the index for good.
    spec = cluster.spec(_spec("jc-evict", "slow", n=1, retries=0, fixed="{delay: 6}"))
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    victim = _running_pod(cluster, "jc-evict", 0)
    name = victim["metadata"]["name"]
    cluster.core().create_namespaced_pod_eviction(name, NS, {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}})
    last = _last_state_of(cluster, name)
    conditions = {c["type"]: c for c in last["status"]["conditions"]}
    assert conditions["DisruptionTarget"]["reason"] == "EvictionByEvictionAPI"

    job = cluster.wait_for_job("jc-evict", 60)
    assert job["status"].get("completedIndexes") == "0", job["status"]
    assert not job["status"].get("failed") and not job["status"].get("failedIndexes")
    assert cluster.finished_per_index("jc-evict") == {0: 1}
    (replacement,) = _by_index(cluster, "jc-evict")[0]  # the evicted pod was deleted
    assert replacement["metadata"]["name"] != name
    assert replacement["status"]["phase"] == "Succeeded"
    # The disruption was not counted against the index's retries.
    assert replacement["metadata"]["annotations"].get(
        "batch.kubernetes.io/job-index-failure-count", "0") == "0"


def _last_state_of(cluster: Cluster, name: str) -> dict[str, Any]:
    """The pod as last seen before it was removed (or once it has failed)."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + cluster.patience(20)
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = json.loads(cluster.core().read_namespaced_pod(
                name, NS, _preload_content=False).data)
        except ApiException as e:
            if e.status == 404 and last:
                return last
            raise
        if last["status"].get("phase") == "Failed":
            return last
        time.sleep(0.05)
    raise AssertionError(f"pod {name} neither failed nor went away: {last.get('status')}")


def test_spent_retries_fail_one_index_and_the_others_finish(cluster: Cluster) -> None:
    spec = cluster.spec(_spec("jc-spent", "fails_on_index_1", n=3, retries=1, fixed="{}"))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 1, result.output
    assert "this launch: 2 of 3 indexes finished, 1 failed for good (1)" in result.output
    (job,) = cluster.jobs("jc-spent")
    assert parse_intervals(job["status"]["completedIndexes"]) == [0, 2]
    assert job["status"]["failedIndexes"] == "1"
    assert [c["reason"] for c in job["status"]["conditions"] if c["type"] == "Failed"] \
        == ["FailedIndexes"]
    assert [t.state for t in cluster.trials("jc-spent")[1]] == [TrialState.FAIL] * 2
    assert [p["status"]["phase"] for p in _by_index(cluster, "jc-spent")[1]] \
        == ["Failed", "Failed"]


def test_a_sweep_whose_first_attempts_all_fail_is_stopped_and_its_job_deleted(
        cluster: Cluster) -> None:
    """The default brake on Kubernetes: the first 5 attempts failed and none completed, so
    run records the stop and deletes the Job instead of spending every index's retries."""
    spec = cluster.spec(_spec("jc-brake", "always_fails", n=8, retries=1, fixed="{}")
                        .replace("parallelism: 8", "parallelism: 2"))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 1, result.output
    assert "deleted Job sweeper/jc-brake: the sweep stopped at its start" in result.output
    last = result.stderr.strip().splitlines()[-1]
    assert "stop rule failing_start fired" in last and "KeyError: 'step'" in last
    assert cluster.jobs("jc-brake") == []
    failed = [t for ts in cluster.trials("jc-brake").values() for t in ts
              if t.state == TrialState.FAIL]
    assert 5 <= len(failed) <= 5 + 2, len(failed)  # not 16 attempts
