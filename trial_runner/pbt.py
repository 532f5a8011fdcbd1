"""Population Based Training on the index protocol (``scheduler: {type: pbt}``).

The population is the sweep's trials, all running at once (the spec requires parallelism >=
trials); each member is one Optuna trial (one finished trial per index, as ever) whose Optuna
params are its initial ones. Its lineage, :data:`sweeper.protocol.PBT_ATTR`, is a list of
segments (:func:`sweeper.pbt_lineage.segment`); the objective gets ``ctx.params`` = the last
segment's params plus the spec's ``fixed``.

- :class:`PbtPruner`: at a report of step s that ends an interval
  (:meth:`PbtOptions.decides_at`), the member waits (bounded) until every live member has
  reported s, then the members with a value at s are ranked (:mod:`trial_runner.pbt_policy`);
  one in the bottom quantile gets ``should_prune()`` True. The wait keeps the population in
  step at each interval's end (as Katib's generations do), so a member that started late is
  compared with the others at the same step instead of missing the decision.
- :func:`pbt_objective` wraps the user's objective: when it stops for that (``TrialPruned``,
  or a return of None), a donor is chosen from the top quantile, the donor index's latest
  checkpoint (the checkpoint and its record, read consistently) is copied into this member's
  checkpoint directory (and its mirror), the donor's current params are perturbed, a segment
  is appended, and the objective is called again: its ``ctx.load_checkpoint()`` returns the
  donor's state and step, and it goes on from there. Steps it reports again keep their first
  value (Optuna keeps one value per step); the lineage says from which step the new params
  hold. A retried attempt (a new trial of the index) takes the previous attempt's lineage
  and the index's checkpoint, which holds whatever was copied last.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from sweeper._optuna_compat import trial_id_of
from sweeper.pbt_lineage import segment
from sweeper.protocol import PBT_ATTR
from sweeper.spec import SchedulerSpec
from sweeper.study import IndexStore, Sweep
from sweeper.study.ledger import may_start
from sweeper.study.values import RungTrial
from trial_runner.asha import PromotionPruner, rung_entries
from trial_runner.checkpoints import (
    CHECKPOINT_FILE,
    META_FILE,
    CheckpointMirror,
    read_checkpoint,
    write_atomically,
)
from trial_runner.context import SuggestNotAllowed, TrialContext
from trial_runner.pbt_policy import choose_donor, perturb, quantiles, rng_for
from trial_runner.usage import open_segment

logger = logging.getLogger(__name__)

#: How long a member that ends an interval waits for the others to report that step, at most
#: (the population trains at once, so they are close behind unless one is stuck or lost).
WAIT_S = 600.0
_ENDED = ("COMPLETE", "PRUNED", "FAIL")
POLL_S = 0.2

#: (trial numbers of the top quantile with their trial ids and indexes, the step).
Exploit = tuple[list[tuple[int, int, int]], int]


class NoDonorCheckpoint(SuggestNotAllowed):
    """The donor saved no checkpoint: every member would fail the same way (exit: config)."""


class PbtPruner(optuna.pruners.BasePruner):
    """True at the end of an interval for a member in the bottom quantile there; what to copy
    is kept for :func:`pbt_objective` (:meth:`exploit`)."""

    def __init__(self, store: IndexStore, study_id: int, scheduler: SchedulerSpec,
                 direction: str, population: int) -> None:
        self._store, self._sweep_study_id, self._scheduler = store, study_id, scheduler
        self._population = population
        self._maximize = direction == "maximize"
        self._lock = threading.Lock()
        self._decided: dict[int, int] = {}  # trial number -> the last step it was ranked at
        self._exploit: dict[int, Exploit] = {}

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step not in trial.intermediate_values \
                or not self._scheduler.pbt.decides_at(step, self._scheduler.max_resource):
            return False
        with self._lock:
            if self._decided.get(trial.number, -1) >= step:  # asked again at the same step
                return False
            self._decided[trial.number] = step
        members = self._population_at(step)
        entries = rung_entries(members, step)
        bottom, top = quantiles(entries, self._scheduler.pbt.quantile_fraction,
                                maximize=self._maximize)
        if trial.number not in bottom:
            return False
        by_number = {m.number: m for m in members}
        donors = [(n, by_number[n].trial_id, by_number[n].index or 0) for n in top]
        with self._lock:
            self._exploit[trial.number] = (donors, step)
        return True

    def _population_at(self, step: int) -> list[RungTrial]:
        """The members with their values at ``step`` and after, once every live member has
        reported ``step`` or a later one (or after :data:`WAIT_S`): an index whose latest
        attempt is running, waiting or not created yet is waited for; one whose attempt
        finished or failed is not (a member that copied a checkpoint saved after ``step``
        went on past it: not behind either)."""
        deadline = time.monotonic() + WAIT_S
        later = list(range(step, self._scheduler.max_resource + 1))
        while True:
            members = self._store.rung_trials(self._sweep_study_id, later)
            ahead = {m.number for m in members if m.values}
            table = self._store.index_table(self._sweep_study_id, self._population)
            behind = [s.index for s in table
                      if s.state not in _ENDED and s.trial_number not in ahead]
            if not behind or time.monotonic() > deadline:
                return members
            time.sleep(POLL_S)

    def exploit(self, number: int) -> Exploit | None:
        """What trial ``number`` is to copy (None: this pruner did not stop it)."""
        with self._lock:
            return self._exploit.pop(number, None)


def scheduler_pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    """The pruner of a sweep with a scheduler: PBT's or promotion ASHA's."""
    spec = sweep.spec
    direction = spec.objectives[0].direction
    if spec.scheduler.type == "pbt":
        return PbtPruner(sweep.storage, sweep.study_id, spec.scheduler, direction, spec.trials)
    return PromotionPruner(sweep.storage, sweep.study_id, spec.scheduler, direction)


def pbt_objective(sweep: Sweep, objective: Callable[[TrialContext], Any]
                  ) -> Callable[[TrialContext], Any]:
    """``objective`` as a PBT member runs it (see the module docstring)."""
    fixed = dict(sweep.spec.trial.fixed)

    def member(ctx: TrialContext) -> Any:
        lineage = _lineage(sweep, ctx)
        while True:
            ctx.params = {**lineage[-1]["params"], **fixed}
            pruned = False
            try:
                result = objective(ctx)
            except optuna.TrialPruned:
                pruned, result = True, None
            plan = _pending(ctx)
            if plan is None:
                if pruned:
                    raise optuna.TrialPruned()
                return result
            budget = may_start(sweep)  # the next interval is new work
            if not budget.may_start:
                logger.info("index %d: trial #%d ends at its interval: %s", ctx.index,
                            ctx.trial_number, budget.reason)
                raise optuna.TrialPruned()
            grown = len(lineage)
            lineage = copy_and_perturb(sweep, ctx, lineage, plan)
            opened = open_segment(trial_id_of(ctx.trial))
            if len(lineage) > grown and opened is not None:
                opened.following(int(lineage[-1]["parent_step"]))

    return member


def _pending(ctx: TrialContext) -> Exploit | None:
    pruner = ctx.trial.study.pruner
    return pruner.exploit(ctx.trial_number) if isinstance(pruner, PbtPruner) else None


def _lineage(sweep: Sweep, ctx: TrialContext) -> list[dict[str, Any]]:
    """This member's lineage: its trial's, a previous attempt's (a retry goes on with the
    params it had last), or its first segment, written to the trial."""
    own = ctx.trial.user_attrs.get(PBT_ATTR)
    if own:
        return list(own)
    lineage: list[dict[str, Any]] | None = None
    if ctx.attempt > 0:
        for a in reversed(sweep.storage.attempts(sweep.study_id, ctx.index)):
            earlier = sweep.storage.get_trial(a.trial_id).user_attrs.get(PBT_ATTR)
            if a.trial_id != trial_id_of(ctx.trial) and earlier:
                lineage = list(earlier)
                break
    if lineage is None:
        names = [p.name for p in sweep.spec.parameters]
        lineage = [segment(0, {k: ctx.params[k] for k in names if k in ctx.params})]
    sweep.storage.set_trial_user_attrs(trial_id_of(ctx.trial), {PBT_ATTR: lineage})
    return lineage


def copy_and_perturb(sweep: Sweep, ctx: TrialContext, lineage: list[dict[str, Any]],
                     plan: Exploit) -> list[dict[str, Any]]:
    """Copy a donor's checkpoint, perturb its params, record the segment."""
    spec = sweep.spec
    donors, step = plan
    rng = rng_for(spec.seed, ctx.index, step)
    number = choose_donor([n for n, _, _ in donors], rng)
    # The chosen donor first, then the others: one that trained to the end since the decision
    # holds a checkpoint with no step left to train (the member would go on from past it).
    for n, donor_id, donor_index in sorted(donors, key=lambda d: (d[0] != number, d[0])):
        parent_step = _copy_checkpoint(sweep, ctx, donor_index)
        if parent_step is None:
            raise NoDonorCheckpoint(
                f"PBT: trial #{n} (index {donor_index}) has no checkpoint to copy at step "
                f"{step}: the objective must ctx.save_checkpoint(...) at least every "
                f"perturbation_interval steps")
        if parent_step != _FINISHED:
            return _perturbed(sweep, ctx, lineage, (n, donor_id, parent_step), rng, step)
    logger.info("index %d: trial #%d goes on with its own checkpoint and params at step %d: "
                "every donor has trained to the end", ctx.index, ctx.trial_number, step)
    return lineage


def _perturbed(sweep: Sweep, ctx: TrialContext, lineage: list[dict[str, Any]],
               donor: tuple[int, int, int], rng: Any, step: int) -> list[dict[str, Any]]:
    """The donor's params perturbed, as this member's next segment (recorded)."""
    spec = sweep.spec
    number, donor_id, parent_step = donor
    donor_lineage = sweep.storage.get_trial(donor_id).user_attrs.get(PBT_ATTR)
    donor_params = donor_lineage[-1]["params"] if donor_lineage else lineage[-1]["params"]
    params = perturb(donor_params, spec.parameters, spec.scheduler.pbt, rng)
    lineage = [*lineage, segment(parent_step + 1, params, number, parent_step)]
    sweep.storage.set_trial_user_attrs(trial_id_of(ctx.trial), {PBT_ATTR: lineage})
    logger.info("index %d: trial #%d copies trial #%d's checkpoint of step %d at step %d; "
                "params %s", ctx.index, ctx.trial_number, number, parent_step, step, params)
    return lineage


#: What :func:`_copy_checkpoint` returns for a donor's checkpoint of its last step.
_FINISHED = -1


def _copy_checkpoint(sweep: Sweep, ctx: TrialContext, donor_index: int) -> int | None:
    """The donor index's latest checkpoint into this member's directory (and its mirror); the
    step it holds, None when there is none, or :data:`_FINISHED` (nothing copied) when it is of
    ``max_resource`` or later. It is fetched into a staging directory beside the member's and
    moved in only when it is taken, so the member's own checkpoint stays otherwise."""
    staging = ctx.checkpoint_dir.parent / f".pbt-staging-{ctx.index}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        mirror = CheckpointMirror.for_index(sweep.spec, sweep.storage.url, donor_index,
                                            sweep.state_key)
        if mirror is not None:
            if mirror.pull(staging) is None:
                return None
        elif not copy_local(ctx.checkpoint_dir.parent / f"index-{donor_index}", staging):
            return None
        if checkpoint_step(staging) >= sweep.spec.scheduler.max_resource:
            return _FINISHED
        ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        os.replace(staging / CHECKPOINT_FILE, ctx.checkpoint_dir / CHECKPOINT_FILE)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    step = checkpoint_step(ctx.checkpoint_dir)
    if ctx.checkpoint_mirror is not None:
        ctx.checkpoint_mirror.push(ctx.checkpoint_dir)
    return step


def copy_local(src: Path, dst: Path) -> bool:
    """Copy the checkpoint file in ``src`` to ``dst`` (False: there is none). Its writer
    replaces it atomically, so the copy is one whole checkpoint; its record is rewritten from
    the checkpoint itself (:func:`checkpoint_step`), which a save in ``src`` between the two
    files cannot make inconsistent."""
    dst.mkdir(parents=True, exist_ok=True)
    tmp = dst / f".{CHECKPOINT_FILE}.pbt{os.getpid()}-{threading.get_ident()}"
    try:
        shutil.copyfile(src / CHECKPOINT_FILE, tmp)
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        return False
    os.replace(tmp, dst / CHECKPOINT_FILE)
    return True


def checkpoint_step(directory: Path) -> int:
    """The step the checkpoint in ``directory`` holds (read from the checkpoint itself, as
    ``ctx.load_checkpoint`` reads it); its record (``checkpoint.json``) is made to match."""
    payload = read_checkpoint(directory / CHECKPOINT_FILE)
    step = int(payload["step"])
    write_atomically(directory / META_FILE, json.dumps(
        {"step": step, "trial_number": payload.get("trial_number"), "copied": True}).encode())
    return step
