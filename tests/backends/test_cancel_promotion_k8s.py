"""`sweeper cancel` of a promotion ASHA sweep on Kubernetes, against the local control plane: a
promoted trial whose promoter died goes back to WAITING, paused at its rung (not FAIL), and a
resume promotes it again from its checkpoint; trials in their first run are marked FAIL.

The sweep runs one pod at a time (parallelism 1), so its course is fixed: indexes 0-2 pause at
rung 0 (step 1); index 2's pod then promotes trial a=0, which dies (``$ASHA_KILL``: SIGKILL
after step 2, its checkpoint saved), leaving it RUNNING with its rung; index 3's pod holds
(``$HOLD``) and keeps the Job running; index 4 has not started and the test claims its trial
through the store, as a pod that claimed it and died without a word would have.

Local control plane only: its pods read and write control files on the claim's volume, which
the test reads as a directory of this machine."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper._optuna_compat import trial_id_of
from sweeper.study import create_or_resume, open_storage
from tests.support.asha_objectives import k8s_promotion_spec
from tests.support.k8s_cluster import Cluster

pytestmark = pytest.mark.postgres


NAME = "k8s-asha-cancel"


def _spec(claim: str) -> str:
    """The control files are on the claim's volume (mounted at /ckpt)."""
    return k8s_promotion_spec(
        NAME, claim, entrypoint="tests.support.cancel_objectives:curve_or_hold", configs=5,
        extra="  termination_grace_period: 5\n",
        # A grace period long enough that the dead promoter's trial is still RUNNING when the
        # test looks: starting containers takes the real node seconds, the tests' 5 s would
        # let another runner requeue it first.
        env={"ASHA_LOG": "/ckpt/asha.log", "ASHA_KILL": "/ckpt/killed", "HOLD": "/ckpt/hold",
             "SWEEPER_GRACE_PERIOD": "60"})


def _resumes(log: Path) -> list[tuple[int, int]]:
    """(trial number, step it resumed from; -1: not resumed) per run of the objective."""
    return [(int(n), int(s)) for n, s in (line.split() for line in log.read_text().splitlines())]


def test_cancel_puts_a_promoted_trial_back_paused_and_resume_promotes_it_again(
        cluster: Cluster) -> None:
    with cluster.shared_claim("cancel") as (claim, shared):
        (shared / "hold").write_text("hold")
        spec_text = _spec(claim)
        started = cluster.sweeper("run", cluster.spec(spec_text), "--backend", "kubernetes",
                                  "--detach")
        assert started.exit_code == 0, started.output

        def held() -> list[int]:
            """The indexes >= 3 whose pod holds their first run."""
            return [i for i, ts in cluster.trials(NAME).items()
                    if i >= 3 and ts[-1].state == TrialState.RUNNING]

        deadline = time.monotonic() + cluster.patience(60)
        while not ((shared / "killed").exists() and held()):
            assert time.monotonic() < deadline, {i: [t.state for t in ts] for i, ts
                                                 in cluster.trials(NAME).items()}
            time.sleep(0.2)

        trials = cluster.trials(NAME)
        (promoted,) = trials[0]  # a = 0, the best: promoted from rung 0, its promoter killed
        assert promoted.params["a"] == 0 and promoted.state == TrialState.RUNNING, promoted
        assert promoted.user_attrs[protocol.RUNG_ATTR] == 0
        assert sorted(promoted.intermediate_values) == [0, 1, 2]
        (running,) = held()
        (other,) = [i for i in (3, 4) if i != running]  # not started: parallelism 1
        (waiting,) = trials[other]
        assert waiting.state == TrialState.WAITING
        sweep, _ = create_or_resume(open_storage(cluster.url), cluster.parse(spec_text))
        assert sweep.storage.claim(trial_id_of(waiting))  # a pod claimed it and died

        cancelled = cluster.sweeper("cancel", NAME)
        assert cancelled.exit_code == 0, cancelled.output
        assert cluster.jobs(NAME) == [] and cluster.pods(NAME) == []
        assert f"put back 1 promoted trial(s) paused at their rung (a resume promotes them " \
               f"again): #{promoted.number}" in cancelled.stdout
        assert "running trial(s) FAIL (cancelled)" in cancelled.stdout
        assert f"#{waiting.number}" in cancelled.stdout

        trials = cluster.trials(NAME)
        (back,) = trials[0]
        assert back.state == TrialState.WAITING, back  # not FAIL: its rung progress kept
        assert back.user_attrs[protocol.PAUSED_ATTR] is True
        assert back.user_attrs[protocol.RUNG_ATTR] == 0
        assert sorted(back.intermediate_values) == [0, 1, 2]
        # The trials in their first run are FAIL: the one cancel found RUNNING without a pod,
        # and the held one (failed by its runner on SIGTERM, or by cancel).
        assert [t.state for t in trials[other]] == [TrialState.FAIL]
        assert trials[other][0].user_attrs["sweeper:fail_reason"] == "cancelled (sweeper cancel)"
        assert [t.state for t in trials[running]] == [TrialState.FAIL]
        assert [t.state for t in trials[1] + trials[2]] == [TrialState.WAITING] * 2  # paused

        (shared / "hold").unlink()
        resumed = cluster.sweeper("resume", NAME, "--parallelism", "5")
        assert resumed.exit_code == 0, resumed.output
        runs = _resumes(shared / "asha.log")

    trials = cluster.trials(NAME)
    (t0,) = trials[0]  # the same trial, promoted again: no new attempt for index 0
    assert t0.state in (TrialState.PRUNED, TrialState.COMPLETE), t0
    assert t0.user_attrs[protocol.RUNG_ATTR] == 1  # went on from rung 0 to rung 1 (step 3)
    assert sorted(t0.intermediate_values) == [0, 1, 2, 3]  # resumed, each step reported once
    # Its runs: the first, the promotion killed after step 2, the promotion after the resume
    # from the checkpoint of step 2 (the cancelled run's).
    assert [s for n, s in runs if n == t0.number] == [-1, 1, 2]
    assert all(ts[-1].state in (TrialState.PRUNED, TrialState.COMPLETE)
               for ts in trials.values()), {i: [t.state for t in ts] for i, ts in trials.items()}
