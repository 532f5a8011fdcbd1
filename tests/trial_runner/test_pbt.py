"""Population Based Training on the index protocol (``scheduler: {type: pbt}``), on both
storages: four members in four runner processes at once; the worst copies the best's
checkpoint and perturbs its params, and the lineage records it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec

REPO = Path(__file__).resolve().parents[2]
STEPS, INTERVAL, N = 11, 4, 4
SCHEDULER = {"type": "pbt", "max_resource": STEPS, "perturbation_interval": INTERVAL,
             "quantile_fraction": 0.25, "resample_probability": 0.0,
             "perturbation_factors": [0.8, 1.2]}
LOW, HIGH = 0.5, 8.0


def _spec(n: int = N, **fixed: Any) -> Any:
    fixed = {"steps": STEPS, "interval": INTERVAL, "population": n, **fixed}
    return make_spec(name="pbt", method="random", trials=n, parallelism=n, seed=3,
                     scheduler=SCHEDULER,
                     trial={"entrypoint": "tests.support.pbt_objectives:member",
                            "fixed": fixed},
                     parameters={"a": {"type": "float", "low": LOW, "high": HIGH}})


def _run_population(storage_url: str, tmp_path: Path, n: int = N) -> list[int]:
    env = {**os.environ, "SWEEPER_STORAGE": storage_url, "SWEEPER_STUDY": "pbt",
           "PBT_DIR": str(tmp_path), protocol.ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt"),
           protocol.ENV_HEARTBEAT_INTERVAL: "0.5"}
    procs = [subprocess.Popen([sys.executable, "-m", "trial_runner", "--index", str(i)],
                              env=env, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(n)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    if n == N:
        assert [p.returncode for p in procs] == [0] * N, "\n".join(o[-3000:] for o in outs)
    return [p.returncode for p in procs]


def test_pbt_copies_the_right_checkpoint_and_records_lineage(storage_url: str,
                                                             tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(storage_url), _spec())
    _run_population(storage_url, tmp_path)
    trials = sweep.study().trials
    assert len(trials) == N and {t.state for t in trials} == {TrialState.COMPLETE}
    lineage = {t.number: t.user_attrs[protocol.PBT_ATTR] for t in trials}
    for t in trials:  # the first segment is the member's own (Optuna) params
        assert lineage[t.number][0] == {"from_step": 0, "params": t.params, "parent": None,
                                        "parent_step": None}
    best = min(trials, key=lambda t: t.params["a"])
    worst = max(trials, key=lambda t: t.params["a"])
    # At step 3 (the first interval's end) the worst member is the bottom quarter (1 of 4)
    # and the best the top quarter: it copies the best's checkpoint of step 3 ...
    copy = lineage[worst.number][1]
    assert (copy["parent"], copy["parent_step"], copy["from_step"]) == (best.number, 3, 4)
    # ... and goes on with the best's params perturbed (times 0.8 or 1.2, within bounds).
    a_best = best.params["a"]
    assert copy["params"]["a"] in [pytest.approx(min(max(a_best * f, LOW), HIGH))
                                   for f in (0.8, 1.2)]
    # What it loaded is the best member's state of step 3, and it ran on with the new a.
    loads = [json.loads(x) for x in (tmp_path / "loads.jsonl").read_text().splitlines()]
    first = next(x for x in loads if x["trial"] == worst.number)
    assert first["state"] == {"owner": best.number, "a": a_best, "step": 3}
    assert (first["step"], first["a"]) == (3, copy["params"]["a"])
    # Nobody else copied at step 3; the best member never copies (it stays on top).
    assert [s["parent_step"] for n, segs in lineage.items() for s in segs[1:]
            if n != worst.number].count(3) == 0
    assert len(lineage[best.number]) == 1
    for t in trials:  # every step reported once; the value is the last segment's a at 11
        assert sorted(t.intermediate_values) == list(range(STEPS + 1))
        last = lineage[t.number][-1]
        assert t.value == pytest.approx(last["params"]["a"] + 1.0 / (STEPS + 1))
        assert t.intermediate_values[3] == pytest.approx(t.params["a"] + 0.25)
    copies = [(n, s["parent_step"]) for n, segs in lineage.items() for s in segs[1:]]
    assert sorted(step for _, step in copies) == [3, 7]  # one copy per interval's end


def test_a_retried_member_goes_on_with_its_last_params_and_its_checkpoint(
        storage_url: str, tmp_path: Path) -> None:
    from sweeper._optuna_compat import trial_id_of
    from sweeper.pbt_lineage import segment
    from trial_runner.promotion import run_scheduled
    from trial_runner.runner import RunnerSettings

    sweep, _ = create_or_resume(open_storage(storage_url), _spec(2))
    settings = RunnerSettings(heartbeat_interval_s=0.2, checkpoint_root=tmp_path / "ckpt")
    copied = [segment(0, {"a": 3.0}), segment(4, {"a": 1.5}, 1, 3)]

    def dies(ctx: Any) -> float:  # attempt 0: had copied at step 3 (its lineage says so)
        sweep.storage.set_trial_user_attrs(trial_id_of(ctx.trial), {protocol.PBT_ATTR: copied})
        ctx.save_checkpoint({"owner": 1, "a": 1.5, "step": 3}, step=3)
        raise RuntimeError("the node went away")

    seen: list[Any] = []

    def goes_on(ctx: Any) -> float:
        seen.append((dict(ctx.params), ctx.load_checkpoint()))
        return 0.5

    assert run_scheduled(sweep, 0, dies, settings).exit_code == protocol.EXIT_RETRY
    assert run_scheduled(sweep, 0, goes_on, settings).state == "COMPLETE"
    ((params, loaded),) = seen
    assert params["a"] == 1.5  # the last segment's, not the trial's own (Optuna) params
    assert loaded == ({"owner": 1, "a": 1.5, "step": 3}, 3)
    retry = max(sweep.study().trials, key=lambda t: t.number)
    assert retry.user_attrs[protocol.PBT_ATTR] == copied
    assert retry.user_attrs[protocol.ATTEMPT_ATTR] == 1


def test_a_donor_without_a_checkpoint_fails_the_member_as_a_configuration_error(
        storage_url: str, tmp_path: Path) -> None:
    """Two members whose code saves no checkpoint (and no test barrier: the runners' own wait
    ranks both at step 3): the worse one has nothing to copy, which every member would hit
    alike, so it fails with the configuration exit code and says why; the better completes."""
    sweep, _ = create_or_resume(open_storage(storage_url), _spec(2, population=1, save=False))
    codes = _run_population(storage_url, tmp_path, n=2)
    trials = sorted(sweep.study().trials, key=lambda t: t.params["a"])
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL]
    worse = trials[1]
    assert codes[worse.user_attrs[protocol.INDEX_ATTR]] == protocol.EXIT_CONFIG
    assert "has no checkpoint to copy at step 3" in worse.user_attrs[protocol.FAIL_REASON_ATTR]
