"""The ledger and the budget on the local control plane (or a cluster of your own): a pod
evicted through the Eviction API (the apiserver marks it DisruptionTarget, the kubelet sends
SIGTERM) is recorded as preempted by its runner and its index retried without using a retry;
a budget stops the Job's pods from starting new work, overshot by at most what the running
trials needed to finish."""

from __future__ import annotations

import json
import time

import pytest
from optuna.trial import TrialState

from sweeper.accounting import Ending, trial_usages
from sweeper.study import load_sweep, open_storage
from sweeper.study.ledger import sweep_ledger
from tests.support.k8s_cluster import NS, Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _spec(name: str, n: int, parallelism: int, delay: float, extra: str = "") -> str:
    return f"""
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: {parallelism}
trial:
  entrypoint: tests.support.k8s_objectives:slow
  fixed: {{delay: {delay}}}
  retries: 0
parameters:
  x: {{type: int, values: {list(range(n))}}}
{extra}
"""


def _running_pod(cluster: Cluster, name: str, index: int) -> str:
    """The pod of ``index`` once its runner has claimed a trial and reported a step."""
    deadline = time.monotonic() + cluster.patience(30)
    while True:
        trials = cluster.trials(name).get(index, [])
        pods = [p for p in cluster.pods(name)
                if p["metadata"].get("annotations", {}).get(
                    "batch.kubernetes.io/job-completion-index") == str(index)
                and p["status"].get("phase") == "Running"]
        if pods and any(t.state == TrialState.RUNNING and t.intermediate_values
                        for t in trials):
            return str(pods[-1]["metadata"]["name"])
        assert time.monotonic() < deadline, (trials, pods)
        time.sleep(0.2)


def test_an_evicted_pod_is_preempted_and_retried_without_a_retry(cluster: Cluster) -> None:
    spec = cluster.spec(_spec("bk-evict", n=1, parallelism=1, delay=8))
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    victim = _running_pod(cluster, "bk-evict", 0)
    cluster.core().create_namespaced_pod_eviction(victim, NS, {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": victim, "namespace": NS}})
    job = cluster.wait_for_job("bk-evict", 120)
    assert job["status"].get("completedIndexes") == "0", job["status"]
    assert not job["status"].get("failed") and not job["status"].get("failedIndexes")
    evicted, retry = cluster.trials("bk-evict")[0]
    assert evicted.state == TrialState.FAIL and retry.state == TrialState.COMPLETE
    assert "(preempted)" in evicted.user_attrs["sweeper:fail_reason"]
    (seg,) = trial_usages(evicted.user_attrs)
    assert (seg.ending, seg.by) == (Ending.PREEMPTED, "runner") and seg.steps >= 0
    assert [u.ending for u in trial_usages(retry.user_attrs)] == [Ending.COMPLETE]
    status = cluster.sweeper("status", "bk-evict", "--format", "json", "--no-kubernetes")
    spending = json.loads(status.output)["spending"]["totals"]
    assert spending["preempted"]["segments"] == 1 and spending["finished"]["segments"] == 1
    sweep = load_sweep(open_storage(cluster.url), "bk-evict")
    book = sweep_ledger(sweep)
    assert book.totals.preempted.segments == 1 and book.totals.finished.segments == 1


def test_a_budget_stops_the_jobs_new_work(cluster: Cluster) -> None:
    # each trial reports steps 0..3 (3 steps trained); a budget of 5 steps: after two
    # trials nothing new starts, and at most the two running trials overshoot it
    spec = cluster.spec(_spec("bk-budget", n=8, parallelism=2, delay=2,
                              extra="budget: {steps: 5}"))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("stopped: stop rule budget fired at "), result.output
    sweep = load_sweep(open_storage(cluster.url), "bk-budget")
    spent = sweep_ledger(sweep).totals.spent.steps
    assert 5 <= spent <= 5 + 2 * 3, spent
    done = sum(cluster.finished_per_index("bk-budget").values())
    assert 2 <= done < 8
