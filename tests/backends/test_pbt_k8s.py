"""Population Based Training on Kubernetes, against the local control plane: four members in
four pods of one Indexed Job at once, their checkpoints on a shared volume (a claim bound to a
PersistentVolume every pod mounts); the worst member copies the best's checkpoint from the best
index's directory there and records its lineage.

Local control plane only: its pods use file barriers in ``$PBT_DIR`` on the claim's volume,
which the test reads as a directory of this machine."""

from __future__ import annotations

import json

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.kubernetes import job_info
from tests.support.k8s_cluster import Cluster

pytestmark = pytest.mark.postgres

NAME = "k8s-pbt"


def _spec(claim: str) -> str:
    return f"""
name: {NAME}
method: random
trials: 4
parallelism: 4
seed: 3
objective: {{metric: loss, direction: minimize}}
scheduler: {{type: pbt, max_resource: 7, perturbation_interval: 4, resample_probability: 0.0}}
trial:
  entrypoint: tests.support.pbt_objectives:member
  fixed: {{steps: 7, interval: 4, population: 4}}
  retries: 1
parameters:
  a: {{type: float, low: 0.5, high: 8.0}}
kubernetes:
  volumes: [{{name: ckpt, mount_path: /ckpt, pvc: {claim}}}]
  checkpoint_volume: ckpt
  env: {{PBT_DIR: /ckpt/barriers}}
"""


def test_the_worst_member_copies_the_best_members_checkpoint_from_the_volume(
        cluster: Cluster) -> None:
    with cluster.shared_claim("pbt") as (claim, directory):
        barriers = directory / "barriers"
        barriers.mkdir(mode=0o777)
        barriers.chmod(0o777)
        result = cluster.sweeper("run", cluster.spec(_spec(claim)), "--backend",
                                 "kubernetes")
        assert result.exit_code == 0, result.output
        (job,) = cluster.jobs(NAME)
        assert job_info(job, 4).state == "Complete", job["status"]
        trials = cluster.trials(NAME)
        assert {i: len(ts) for i, ts in trials.items()} == {i: 1 for i in range(4)}
        members = [t for ts in trials.values() for t in ts]
        assert {t.state for t in members} == {TrialState.COMPLETE}
        best = min(members, key=lambda t: t.params["a"])
        worst = max(members, key=lambda t: t.params["a"])
        copy = worst.user_attrs[protocol.PBT_ATTR][1]
        assert (copy["parent"], copy["parent_step"], copy["from_step"]) == (best.number, 3, 4)
        loads = [json.loads(x) for x in (barriers / "loads.jsonl").read_text().splitlines()]
        (loaded,) = [x for x in loads if x["trial"] == worst.number]
        assert loaded["state"] == {"owner": best.number, "a": best.params["a"], "step": 3}

        status = cluster.sweeper("status", NAME)
        assert status.exit_code == 0, status.output
        assert f"from #{best.number} at step 3" in status.output, status.output
