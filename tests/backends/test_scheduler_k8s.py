"""Promotion ASHA on Kubernetes, against the local control plane: each index's pod runs its own
trial to a rung and pauses it there (the pod exits 0 and holds nothing), and the pods still
running promote paused trials of other indexes, resuming them from the checkpoint volume (a
claim bound to a PersistentVolume every pod mounts). The Job completes once no trial can be
promoted, with every trial finished and none created for a promotion.

Local control plane only: its pods append to a file on the claim's volume (``$ASHA_LOG``),
which the test reads as a directory of this machine."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.kubernetes import job_info
from tests.support.asha_objectives import k8s_promotion_spec
from tests.support.k8s_cluster import Cluster

pytestmark = pytest.mark.postgres

NAME = "k8s-asha"


def _spec(claim: str) -> str:
    return k8s_promotion_spec(NAME, claim, parallelism=3, retries=1,
                              env={"ASHA_LOG": "/ckpt/asha.log"})  # the claim's mount path


def test_paused_trials_hold_no_pod_and_are_promoted_from_the_checkpoint_volume(
        cluster: Cluster) -> None:
    with cluster.shared_claim("asha") as (claim, directory):
        log = directory / "asha.log"
        result = cluster.sweeper("run", cluster.spec(_spec(claim)), "--backend",
                                 "kubernetes")
        assert result.exit_code == 0, result.output
        assert "checkpoints go to the pod's" not in result.output  # durable: no warning

        (job,) = cluster.jobs(NAME)
        assert job_info(job, 9).state == "Complete", job["status"]
        pods = cluster.pods(NAME)
        # One pod per index, each ended once: a paused trial kept no pod waiting for it.
        assert len(pods) == 9 and {p["status"]["phase"] for p in pods} == {"Succeeded"}

        trials = cluster.trials(NAME)
        # One trial per index: a promotion resumed the same trial, it made no new one.
        assert {i: len(ts) for i, ts in trials.items()} == {i: 1 for i in range(9)}
        by_a = {int(t.params["a"]): t for ts in trials.values() for t in ts}
        assert {t.state for t in by_a.values()} <= {TrialState.COMPLETE, TrialState.PRUNED}
        best = by_a[0]  # the best curve: promoted through both rungs, trained to step 9
        assert best.state == TrialState.COMPLETE and best.value == pytest.approx(0.1)
        assert sorted(best.intermediate_values) == list(range(10))
        assert best.user_attrs[protocol.RUNG_ATTR] == 1
        for t in by_a.values():  # every run of a trial went on from where the last stopped
            assert sorted(t.intermediate_values) == list(range(len(t.intermediate_values)))
        assert sum(t.user_attrs[protocol.RUNG_ATTR] >= 1 for t in by_a.values()) >= 3

        # Each promotion resumed from the checkpoint its index saved at the rung's step, in
        # whichever pod claimed it (the index's directory on the shared volume).
        number_of = {t.number: a for a, t in by_a.items()}
        resumed = [(number_of[int(n)], int(step)) for n, step in
                   (line.split() for line in log.read_text().splitlines()) if int(step) >= 0]
        # The best pauses at rung 1 (step 3), where it is the first to arrive, and is promoted
        # from there. At rung 0 it pauses too unless its pod reports step 1 after two others
        # (then it is the top third already and goes on): the pods' start order decides.
        assert (0, 3) in resumed, resumed
        assert {step for _, step in resumed} <= {1, 3}
        assert {a for a, step in resumed if step == 1} >= {
            a for a, t in by_a.items() if t.user_attrs[protocol.RUNG_ATTR] >= 1 and a != 0}
        assert len(resumed) == len(set(resumed)), resumed  # each promotion ran once
        assert len(list(directory.glob("checkpoints/*/index-*/checkpoint.pt"))) == 9

        status = cluster.sweeper("status", NAME)
        assert status.exit_code == 0, status.output
        assert "rungs" in status.output, status.output
