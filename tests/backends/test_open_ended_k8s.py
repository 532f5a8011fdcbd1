"""An open-ended sweep (a budget, no ``trials``) on the local control plane (or a cluster of
your own): one Indexed Job of ``parallelism`` pods (completions = parallelism), each a slot
running index after index until the budget gate says no; the Job then completes, no pod
replaced, no other Job created. ``status`` and ``logs`` find an index in its slot's pod, and
show only that index's part of the pod's log."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.manifests import COMPLETION_INDEX
from sweeper.runlogs import split_attempts
from sweeper.study import load_sweep, open_storage
from sweeper.study.ledger import sweep_ledger
from tests.support.k8s_cluster import Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

NAME = "k8s-open"
#: Steps each trial of ``k8s_objectives:slow`` trains (it reports steps 0..3).
STEPS = 3


def _open_spec(cluster: Cluster, name: str, *, parallelism: int, steps: int,
               delay: float = 0.4, retries: int = 0) -> str:
    """An open-ended sweep (a steps budget, no ``trials``) of ``k8s_objectives:slow``."""
    return cluster.spec(f"""
name: {name}
method: tpe
objective: {{metric: loss, direction: minimize}}
parallelism: {parallelism}
trial:
  entrypoint: tests.support.k8s_objectives:slow
  fixed: {{delay: {delay}}}
  retries: {retries}
parameters:
  x: {{type: float, low: 0, high: 1}}
budget: {{steps: {steps}}}
""")


def test_an_open_ended_sweep_is_one_indexed_job_until_its_budget_is_spent(
        cluster: Cluster) -> None:
    budget, parallelism = 15, 2
    spec = _open_spec(cluster, NAME, parallelism=parallelism, steps=budget)
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    assert "open-ended" in result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("stopped: stop rule budget fired at "), result.output
    (job,) = cluster.jobs(NAME)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == parallelism
    assert job["status"].get("succeeded") == parallelism, job["status"]
    assert len(cluster.pods(NAME)) == parallelism  # no pod per configuration, none replaced
    env = {e["name"]: e.get("value") for e in
           job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[protocol.ENV_INDEX_STRIDE] == str(parallelism)
    sweep = load_sweep(open_storage(cluster.url), NAME)
    spent = sweep_ledger(sweep).totals.spent.steps
    assert budget <= spent <= budget + parallelism * STEPS, spent
    trials = sweep.study().trials
    assert all(t.state == TrialState.COMPLETE for t in trials)
    started = Counter(t.user_attrs[protocol.INDEX_ATTR] for t in trials)
    assert set(started.values()) == {1} and len(started) == spent // STEPS > parallelism
    # each slot ran its own indexes j, j+2, j+4, ... in order: no index runs twice
    assert all(i < len(started) + parallelism for i in started)


def _slot_of(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["labels"][COMPLETION_INDEX])


def test_status_and_logs_find_an_index_in_its_slots_pod(cluster: Cluster) -> None:
    """Sweep index I ran in the pod of slot ``I % parallelism``: ``status`` names that pod,
    ``logs --index I`` (and ``--follow``) show I's part of its log and nothing of the slot's
    other indexes, and an index the sweep never reached has no log."""
    name, parallelism = "k8s-open-logs", 2
    spec = _open_spec(cluster, name, parallelism=parallelism, steps=18)
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    slot_pods = {_slot_of(p): p["metadata"]["name"] for p in cluster.pods(name)}
    assert sorted(slot_pods) == list(range(parallelism))

    shown = cluster.sweeper("status", name, "--format", "json")
    assert shown.exit_code == 0, shown.output
    record = json.loads(shown.stdout)
    rows = record["per_index"]
    assert len(rows) > parallelism + 1, rows
    assert {r["index"]: r["pod"] for r in rows} == \
        {r["index"]: slot_pods[r["index"] % parallelism] for r in rows}
    (job,) = record["kubernetes_jobs"]
    assert job["slots"] == parallelism and job["completed_slots"] == [0, 1], job
    table = cluster.sweeper("status", name)
    assert table.exit_code == 0, table.output
    assert "slots completed 0-1" in table.stdout and slot_pods[0] in table.stdout, table.stdout

    last = max(r["index"] for r in rows)  # ran after others in its slot, the refusal after it
    logs = cluster.sweeper("logs", name, "--index", str(last))
    assert logs.exit_code == 0, logs.output
    pod = slot_pods[last % parallelism]
    assert logs.stderr.startswith(f"pod sweeper/{pod} "), logs.stderr
    assert f"index {last} of slot {last % parallelism} (indexes" in logs.stderr, logs.stderr
    (part,) = split_attempts(logs.stdout)
    assert part.header is not None and part.header.index == last
    assert f"objective output of index {last}" in logs.stdout
    assert set(re.findall(r"\bindex (\d+)\b", logs.stdout)) == {str(last)}, logs.stdout
    assert logs.stdout.rstrip().endswith(" ends ==="), logs.stdout  # the refusal left out

    followed = cluster.sweeper("logs", name, "--index", str(last - parallelism), "--follow")
    assert followed.exit_code == 0, followed.output
    assert f"objective output of index {last - parallelism}" in followed.stdout
    assert set(re.findall(r"\bindex (\d+)\b", followed.stdout)) == \
        {str(last - parallelism)}, followed.stdout

    never = cluster.sweeper("logs", name, "--index", str(last + 2 * parallelism))
    assert never.exit_code == 3, never.output
    assert f"index {last + 2 * parallelism} has not run in pod {slot_pods[last % parallelism]}" \
        in never.stderr, never.stderr


def test_logs_find_an_index_in_the_slot_pod_that_ran_it_before_it_was_replaced(
        cluster: Cluster) -> None:
    """A slot's pod killed while it runs index 1: the Job replaces it, and the new pod
    replays the slot (index 0 a lookup, index 1 retried). Index 0's log is the first pod's
    part; index 1's latest attempt is the new pod's, its first attempt the first pod's."""
    if cluster.local is None:
        pytest.skip("kills a container through the local node's containerd")
    name = "k8s-open-replaced"
    spec = _open_spec(cluster, name, parallelism=1, steps=8, delay=2, retries=1)
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    deadline = time.monotonic() + cluster.patience(60)
    while not any(t.state == TrialState.RUNNING for t in cluster.trials(name).get(1, [])):
        assert time.monotonic() < deadline, cluster.trials(name)
        time.sleep(0.2)
    (first,) = cluster.pods(name)
    cluster.kill_container(first)
    job = cluster.wait_for_job(name, 90, lambda: cluster.pods(name))
    assert job["status"].get("succeeded") == 1, job["status"]
    pods = cluster.pods(name)
    assert [p["status"]["phase"] for p in pods] == ["Failed", "Succeeded"]
    old, new = (p["metadata"]["name"] for p in pods)
    assert old == first["metadata"]["name"]

    zero = cluster.sweeper("logs", name, "--index", "0")
    assert zero.exit_code == 0, zero.output
    assert zero.stderr.startswith(f"pod sweeper/{old} "), zero.stderr
    assert "objective output of index 0" in zero.stdout
    one = cluster.sweeper("logs", name, "--index", "1")
    assert one.exit_code == 0, one.output
    assert one.stderr.startswith(f"pod sweeper/{new} ") and "attempt 1," in one.stderr, \
        one.stderr
    assert "objective output of index 1" in one.stdout
    killed = cluster.sweeper("logs", name, "--index", "1", "--attempt", "0")
    assert killed.exit_code == 0, killed.output
    assert killed.stderr.startswith(f"pod sweeper/{old} "), killed.stderr
    assert "objective output of index 1" not in killed.stdout
    assert [t.state for t in cluster.trials(name)[1]] == [TrialState.FAIL,
                                                          TrialState.COMPLETE]
    # status names the same pods: index 0 the first pod's, the later ones the new pod's
    shown = cluster.sweeper("status", name, "--format", "json")
    assert shown.exit_code == 0, shown.output
    pod_of = {r["index"]: r["pod"] for r in json.loads(shown.stdout)["per_index"]}
    assert pod_of[0] == old and pod_of[1] == new, pod_of
    assert all(p == new for i, p in pod_of.items() if i >= 1), pod_of
