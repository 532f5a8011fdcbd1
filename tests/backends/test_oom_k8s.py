"""A trial over its memory limit on the real node: the kernel's OOM killer ends the trial's
container (on this machine's cgroup v1 it kills the largest process of the container's cgroup:
the runner, which runs the trial in its own process), the kubelet reports it ``OOMKilled`` with
exit code 137, and ``sweeper run``'s watcher fails the attempt with that reason instead of
leaving it to a stale heartbeat. The retry runs the same parameters with the same limit and
runs out of memory again; when ``trial.retries`` are spent the index fails, and ``status`` and
``export`` say why."""

from __future__ import annotations

import csv
import io
import json

import pytest
from optuna.trial import TrialState

from sweeper.protocol import FAIL_REASON_ATTR
from tests.support.k8s_cluster import Cluster

pytestmark = pytest.mark.postgres

NAME = "k8s-oom"
SPEC = f"""
name: {NAME}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 2
trial:
  entrypoint: tests.support.k8s_objectives:hog
  fixed: {{mb: 1024}}
  retries: 1
  resources: {{cpu: 100m, memory: 256Mi}}
kubernetes:
  env: {{SWEEPER_GRACE_PERIOD: "30"}}
parameters:
  x: {{type: int, values: [0, 1, 2]}}
"""


def test_an_oom_killed_trial_is_failed_with_the_reason_and_its_retry_too(
        cluster: Cluster) -> None:
    # A grace period as long as a real cluster's (the tests' 5 s could let a heartbeat go
    # stale before the pod's failure reaches the Job's status on a busy machine).
    result = cluster.sweeper("run", cluster.spec(SPEC), "--backend", "kubernetes",
                             SWEEPER_GRACE_PERIOD="30")
    assert result.exit_code != 0, result.output
    assert "was OOM-killed: over its memory limit" in result.output, result.output

    trials = cluster.trials(NAME)
    assert cluster.finished_per_index(NAME) == {0: 0, 1: 1, 2: 1}
    attempts = sorted(trials[0], key=lambda t: t.number)
    assert [t.state for t in attempts] == [TrialState.FAIL, TrialState.FAIL]  # the retry too
    for t in attempts:
        reason = t.user_attrs[FAIL_REASON_ATTR]
        assert reason.startswith("OOMKilled: the trial's container went over its memory "
                                 "limit (256Mi)"), reason
    pods = [p for p in cluster.pods(NAME) if p["status"]["phase"] == "Failed"]
    assert len(pods) == 2
    for pod in pods:
        (cs,) = pod["status"]["containerStatuses"]
        assert (cs["state"]["terminated"]["reason"],
                cs["state"]["terminated"]["exitCode"]) == ("OOMKilled", 137)

    status = cluster.sweeper("status", NAME, "--format", "json")
    assert status.exit_code == 0, status.output
    rows = {r["index"]: r for r in json.loads(status.stdout)["per_index"]}
    assert rows[0]["fail_reason"].startswith("OOMKilled"), rows[0]
    exported = cluster.sweeper("export", NAME, "--format", "csv")
    assert exported.exit_code == 0, exported.output
    failed = [r for r in csv.DictReader(io.StringIO(exported.stdout)) if r["state"] == "FAIL"]
    assert len(failed) == 2 and all(r["fail_reason"].startswith("OOMKilled") for r in failed)
