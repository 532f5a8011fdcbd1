"""PBT's copy when a donor has trained to the end since the decision: its checkpoint holds no
step left to train, so another top member's is copied, or, when every donor has finished, the
member goes on with its own checkpoint and params (it once went on from past max_resource,
trained nothing and failed: "'val_loss' is nan")."""

from __future__ import annotations

import pickle
import types
from pathlib import Path
from typing import Any

import optuna

from sweeper import protocol
from sweeper._optuna_compat import trial_id_of
from sweeper.pbt_lineage import segment
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec
from trial_runner import pbt
from trial_runner.checkpoints import CHECKPOINT_FILE, read_checkpoint
from trial_runner.pbt_policy import choose_donor, rng_for

MAX = 9


def _sweep(tmp_path: Path) -> Any:
    spec = make_spec(name="pbt-donors", method="random", trials=3, parallelism=3, seed=1,
                     scheduler={"type": "pbt", "max_resource": MAX, "perturbation_interval": 4,
                                "resample_probability": 0.0},
                     trial={"entrypoint": "tests.support.pbt_objectives:member"},
                     parameters={"a": {"type": "float", "low": 0.5, "high": 8.0}})
    sweep, _ = create_or_resume(open_storage(f"sqlite:///{tmp_path / 's.db'}"), spec)
    return sweep


def _checkpoint(directory: Path, step: int, owner: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / CHECKPOINT_FILE, "wb") as f:
        pickle.dump({"step": step, "trial_number": owner, "state": {"owner": owner}}, f)


def _member(sweep: Any, root: Path) -> Any:
    """Trial #0 as index 0's member, its own checkpoint of step 7 in place."""
    study = sweep.study()
    trials = [study.ask() for _ in range(3)]
    for t in trials:
        t.set_user_attr(protocol.PBT_ATTR, [segment(0, {"a": 1.0 + t.number})])
    _checkpoint(root / "index-0", 7, owner=0)
    return types.SimpleNamespace(index=0, trial=trials[0], trial_number=0,
                                 checkpoint_dir=root / "index-0", checkpoint_mirror=None)


def _plan(sweep: Any) -> pbt.Exploit:
    trials = {t.number: t for t in sweep.study().trials}
    return [(n, trial_id_of(trials[n]), n) for n in (1, 2)], 7


def test_a_donor_that_trained_to_the_end_is_passed_over_for_another(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    root = tmp_path / "ckpt"
    ctx = _member(sweep, root)
    chosen = choose_donor([1, 2], rng_for(sweep.spec.seed, 0, 7))
    other = 3 - chosen
    _checkpoint(root / f"index-{chosen}", MAX, owner=chosen)  # finished since the decision
    _checkpoint(root / f"index-{other}", 8, owner=other)
    lineage = pbt.copy_and_perturb(sweep, ctx, [segment(0, {"a": 1.0})], _plan(sweep))
    assert (lineage[-1]["parent"], lineage[-1]["parent_step"]) == (other, 8)
    assert read_checkpoint(root / "index-0" / CHECKPOINT_FILE)["state"] == {"owner": other}
    assert not list(root.glob(".pbt-staging-*"))  # nothing left beside the checkpoints


def test_when_every_donor_has_finished_the_member_goes_on_with_its_own(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    root = tmp_path / "ckpt"
    ctx = _member(sweep, root)
    _checkpoint(root / "index-1", MAX, owner=1)
    _checkpoint(root / "index-2", MAX + 1, owner=2)
    before = [segment(0, {"a": 1.0})]
    assert pbt.copy_and_perturb(sweep, ctx, before, _plan(sweep)) == before
    payload = read_checkpoint(root / "index-0" / CHECKPOINT_FILE)
    assert (payload["step"], payload["state"]) == (7, {"owner": 0})  # its own, untouched
    stored = optuna.load_study(study_name="pbt-donors", storage=sweep.storage).trials[0]
    assert stored.user_attrs[protocol.PBT_ATTR] == [segment(0, {"a": 1.0})]
