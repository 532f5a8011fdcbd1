"""An open-ended sweep (a budget, no ``trials``) on the local control plane (or a cluster of
your own): one Indexed Job of ``parallelism`` pods (completions = parallelism), each a slot
running index after index until the budget gate says no; the Job then completes, no pod
replaced, no other Job created."""

from __future__ import annotations

from collections import Counter

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.study import load_sweep, open_storage
from sweeper.study.ledger import sweep_ledger
from tests.support.k8s_cluster import Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

NAME = "k8s-open"
#: Steps each trial of ``k8s_objectives:slow`` trains (it reports steps 0..3).
STEPS = 3


def test_an_open_ended_sweep_is_one_indexed_job_until_its_budget_is_spent(
        cluster: Cluster) -> None:
    budget, parallelism = 15, 2
    spec = cluster.spec(f"""
name: {NAME}
method: tpe
objective: {{metric: loss, direction: minimize}}
parallelism: {parallelism}
trial:
  entrypoint: tests.support.k8s_objectives:slow
  fixed: {{delay: 0.4}}
  retries: 0
parameters:
  x: {{type: float, low: 0, high: 1}}
budget: {{steps: {budget}}}
""")
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
