"""PBT's copy through the S3 checkpoint mirror (``artifacts: {store: s3}``, moto's server), on
both storages: two members in two "pods" (runner threads, each with its own empty checkpoint
directory), so the member that copies cannot find the donor's checkpoint on its own disk. It
copies the donor's latest checkpoint from the donor's mirror, loads the donor's state at the
donor's step, and the copy lands in its own mirror prefix, where a retry in a third pod finds
it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from optuna import TrialPruned
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec
from tests.support.s3 import S3Server, s3_in_env
from trial_runner.context import TrialContext
from trial_runner.promotion import run_scheduled
from trial_runner.runner import RunnerSettings

STEPS, INTERVAL = 11, 4
SCHEDULER = {"type": "pbt", "max_resource": STEPS, "perturbation_interval": INTERVAL,
             "quantile_fraction": 0.25, "resample_probability": 0.0,
             "perturbation_factors": [0.8, 1.2]}
BUCKET = "ckpts"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    with s3_in_env(monkeypatch) as server:
        yield server


def _spec(s3: S3Server) -> Any:
    return make_spec(name="pbt-s3", method="random", trials=2, parallelism=2, seed=3,
                     scheduler=SCHEDULER,
                     trial={"entrypoint": "tests.support.pbt_objectives:member", "fixed": {}},
                     parameters={"a": {"type": "float", "low": 0.5, "high": 8.0}},
                     artifacts={"store": "s3", "bucket": BUCKET, "prefix": "team",
                                "endpoint_url": s3.endpoint, "region": "us-east-1"})


def _in_pod(tmp_path: Path, pod: str) -> RunnerSettings:
    """A runner whose local checkpoint directory is its pod's own (empty at start)."""
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=30.0,
                          checkpoint_root=tmp_path / pod / "checkpoints")


class _Population:
    """The members' code: ``loss = a + 1 / (step + 1)``, a checkpoint (``{"owner", "a",
    "step"}``) then a report per step. The member that goes on at step 3 waits there until the
    one that copies has loaded its copy (so the donor's latest checkpoint is the one of step 3);
    the one that copies dies right after loading it (its pod went away)."""

    def __init__(self) -> None:
        self.copied = threading.Event()
        #: (trial number, attempt, state, step, the a it goes on with) per checkpoint loaded.
        self.loads: list[tuple[int, int, Any, int, float]] = []

    def member(self, ctx: TrialContext) -> float:
        a = float(ctx.params["a"])
        start = 0
        loaded = ctx.load_checkpoint()
        if loaded is not None:
            self.loads.append((ctx.trial_number, ctx.attempt, loaded[0], loaded[1], a))
            self.copied.set()
            if ctx.attempt == 0:
                raise RuntimeError("the pod went away right after the copy")
            return a + 1.0 / (loaded[1] + 1)  # the retry: where it resumed is what counts
        for step in range(start, STEPS + 1):
            ctx.save_checkpoint({"owner": ctx.trial_number, "a": a, "step": step}, step=step)
            ctx.report(step, loss=a + 1.0 / (step + 1))
            if ctx.should_prune():
                raise TrialPruned()
            if step == INTERVAL - 1 and not self.copied.wait(120.0):  # a bound, not a timing
                raise RuntimeError("the member that copies never loaded its copy")
        return a + 1.0 / (STEPS + 1)


def test_a_member_copies_the_donors_checkpoint_from_s3_into_its_own_mirror(
        storage_url: str, tmp_path: Path, s3: S3Server) -> None:
    s3.client().create_bucket(Bucket=BUCKET)
    spec = _spec(s3)
    sweep, _ = create_or_resume(open_storage(storage_url), spec)
    population = _Population()

    def pod(index: int) -> Any:
        own, _ = create_or_resume(open_storage(storage_url), spec)
        return run_scheduled(own, index, population.member, _in_pod(tmp_path, f"pod-{index}"))

    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(pod, [0, 1]))
    trials = sweep.study().trials
    donor = min(trials, key=lambda t: t.params["a"])
    copier = max(trials, key=lambda t: t.params["a"])
    i_donor = donor.user_attrs[protocol.INDEX_ATTR]
    i_copier = copier.user_attrs[protocol.INDEX_ATTR]
    assert outs[i_donor].state == "COMPLETE"
    assert (outs[i_copier].state, outs[i_copier].exit_code) == ("FAIL", protocol.EXIT_RETRY)
    # The copier's pod never had the donor's checkpoint directory: the copy came from S3.
    key = sweep.state_key
    assert not (tmp_path / f"pod-{i_copier}" / "checkpoints" / key / f"index-{i_donor}").exists()
    # It copied the donor's checkpoint of step 3 and loaded the donor's state at that step.
    lineage = copier.user_attrs[protocol.PBT_ATTR]
    assert (lineage[1]["parent"], lineage[1]["parent_step"]) == (donor.number, 3)
    a_new = lineage[1]["params"]["a"]
    donor_state = {"owner": donor.number, "a": donor.params["a"], "step": 3}
    assert population.loads == [(copier.number, 0, donor_state, 3, a_new)]
    # The copy is in the copier's own mirror prefix (what it had saved there is replaced).
    prefix = f"team/checkpoints/{key}/index-{i_copier}"
    objects = s3.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
    assert sorted(o["Key"] for o in objects) == [f"{prefix}/checkpoint.json",
                                                 f"{prefix}/checkpoint.pt"]
    meta = s3.client().get_object(Bucket=BUCKET, Key=f"{prefix}/checkpoint.json")["Body"]
    assert json.loads(meta.read()) == {"step": 3, "trial_number": donor.number, "copied": True}
    # A retry of the copier in a third pod (empty directory) resumes from the copy, with the
    # params of its last segment.
    retry = run_scheduled(sweep, i_copier, population.member, _in_pod(tmp_path, "pod-c"))
    assert retry.state == "COMPLETE" and retry.trial_number is not None
    t = sweep.study().trials[retry.trial_number]
    assert (t.user_attrs[protocol.ATTEMPT_ATTR], t.user_attrs[protocol.RESUMED_ATTR]) == (1, 3)
    assert t.user_attrs[protocol.PBT_ATTR] == lineage
    assert population.loads[1] == (t.number, 1, donor_state, 3, a_new)
    assert {x.state for x in sweep.study().trials} == {TrialState.COMPLETE, TrialState.FAIL}
