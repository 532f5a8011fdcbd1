"""A runner under a scheduler (``scheduler: {type: asha, mode: promotion}``): its own index,
then the promotions of paused trials of any index, until nothing is promotable.

Runner i:
  1. runs index i as :func:`trial_runner.runner.run_index` does (its trial may pause at a rung:
     the index is done for now; a paused trial of index i found WAITING is not its to run:
     it is put back, and step 2 decides);
  2. puts back promotions whose promoter died (RUNNING with a rung, heartbeat stale -> WAITING,
     paused), reads the rungs, and claims the first promotable paused trial, top rung first
     (the index protocol's claim: WAITING -> RUNNING, one winner; a lost claim tries the
     next); the promoted trial runs with ITS index's context (checkpoint directory, mirror,
     ``JOB_ID`` in the environment, log header), restored before the user's code runs, on
     the same Optuna trial; it pauses at a higher
     rung, completes at ``max_resource``, or fails like any attempt;
  3. repeats 2 until nothing is promotable; then, if no trial is running and every index has
     finished, failed or paused, the sweep is over: every paused trial ends PRUNED (its rung
     and values kept). A runner that sees a trial still running leaves the end to the runner
     of that trial, which looks again when it pauses or finishes.
An open-ended sweep (a budget, no ``trials``) is never over while its budget lasts: a runner
that finds nothing to promote goes on to its next index, a new configuration asked from the
sampler (which sees every trial, the paused ones included); once the budget is spent (the gate
of :mod:`sweeper.study.ledger` says no), nothing is promoted or started, and it ends as after
a stop rule.
Once a stop rule has fired (``stop:``), nothing is promoted and nothing new starts, so the
sweep is over as soon as no trial is running (an index not started stays so, and is no reason
to wait): the paused trials end PRUNED then, by the runner of the last trial to finish or a
runner that the stop kept from starting its index. (``--ignore-stop`` afterwards runs the
indexes not started; a paused trial that ended PRUNED stays so.)

Index i's own trial goes first (unlike ASHA's get_job, which prefers promotions): the local
backend's watchdog kills a worker that was handed an index and claims nothing for a while.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sweeper import protocol
from sweeper.errors import StorageError
from sweeper.protocol import ATTEMPT_ATTR, PAUSED_ATTR
from sweeper.study import Sweep, stop
from sweeper.study.ledger import may_start
from sweeper.study.values import RungTrial
from trial_runner.asha import promotions
from trial_runner.context import TrialContext
from trial_runner.outcome import Claimed, Outcome, OutcomeState, RunnerSettings
from trial_runner.pbt import pbt_objective
from trial_runner.runner import TrialHook, run_claimed, run_index

logger = logging.getLogger(__name__)

#: Outcomes of a promoted trial after which this runner goes on promoting.
_GO_ON = (protocol.EXIT_OK,)


def _log_info(outcome: Outcome) -> None:
    logger.info("%s", outcome.message)


def run_scheduled(sweep: Sweep, index: int, objective: Callable[[TrialContext], Any],
                  settings: RunnerSettings, *, trial_hook: TrialHook | None = None,
                  log: Callable[[Outcome], None] | None = None) -> Outcome:
    """Index ``index`` as :func:`run_index` (no scheduler: just that), then promotions until
    none is promotable (see the module docstring). The outcome is the index's own, unless a
    promoted trial failed: then that failure's (the launcher retries this runner, which finds
    its index done and promotes again). ``log``: called with each outcome as soon as it is
    known, the index's own before any promotion starts (its line goes to the index's output:
    a promoted segment's header moves the local worker's output to that trial's index log)."""
    pbt = sweep.spec.scheduler.type == "pbt"  # a member trains to the end: nothing to promote
    own = run_index(sweep, index, pbt_objective(sweep, objective) if pbt else objective,
                    settings, trial_hook=trial_hook)
    if log is not None:
        log(own)
    if pbt or not sweep.spec.scheduler.enabled or own.exit_code != protocol.EXIT_OK:
        return own
    if own.state is OutcomeState.STOPPED:
        _end_stopped(sweep, settings)
        return own
    failed = promote(sweep, objective, settings, trial_hook=trial_hook, log=log or _log_info)
    return failed if failed is not None else own


def promote(sweep: Sweep, objective: Callable[[TrialContext], Any], settings: RunnerSettings,
            *, trial_hook: TrialHook | None = None,
            log: Callable[[Outcome], None] = _log_info) -> Outcome | None:
    """Claim and run promotable paused trials until there is none; then end the sweep if it is
    over. Returns the outcome of a promoted trial that failed (this runner stops there), each
    promoted trial's outcome given to ``log`` first."""
    store, study_id, spec = sweep.storage, sweep.study_id, sweep.spec
    steps = list(spec.scheduler.rung_steps)
    maximize = spec.objectives[0].direction == "maximize"
    while True:
        store.requeue_stale(study_id, settings.grace_period_s)
        trials = store.rung_trials(study_id, steps)
        # A stop rule fired, or the budget is spent: promote nothing more; the sweep ends
        # once no trial runs.
        stopped = (spec.stop.any and stop.before_start(store, study_id, spec) is not None) \
            or not may_start(sweep).may_start
        ran = None
        for cand in [] if stopped else promotions(trials, spec.scheduler, maximize=maximize):
            if _claim(sweep, cand):
                ran = _run_promoted(sweep, cand, objective, settings, trial_hook)
                log(ran)
                break
        if ran is None:
            _end_if_over(sweep, trials, stopped=stopped)
            return None
        if ran.exit_code not in _GO_ON:
            return ran


def _end_stopped(sweep: Sweep, settings: RunnerSettings) -> None:
    """A runner that the stop kept from starting its index ends the sweep if no trial runs:
    the stop may have fired after the last trial ended (at a runner's or the launcher's check
    before a start), when no runner of a trial is left to look."""
    try:
        sweep.storage.requeue_stale(sweep.study_id, settings.grace_period_s)
        _end_if_over(sweep, [], stopped=True)
    except StorageError as e:  # the index's outcome stands; the next runner looks again
        logger.warning("sweep %s: could not end the stopped sweep's paused trials: %s",
                       sweep.name, e)


def _claim(sweep: Sweep, cand: RungTrial) -> bool:
    """The promotion's claim: WAITING -> RUNNING for one runner only (False: another runner
    claimed it, or the sweep's end pruned it first)."""
    try:
        won = sweep.storage.claim(cand.trial_id)
    except Exception as e:  # noqa: BLE001 - a claim that lost to the end's PRUNED may raise
        logger.info("claim of trial #%d lost: %s", cand.number, e)
        return False
    if won:
        sweep.storage.set_trial_user_attrs(cand.trial_id, {PAUSED_ATTR: False})
    return bool(won)


def _run_promoted(sweep: Sweep, cand: RungTrial, objective: Callable[[TrialContext], Any],
                  settings: RunnerSettings, trial_hook: TrialHook | None) -> Outcome:
    """The claimed trial, with its own index (and so its log header); run_claimed says that
    it was promoted once the header is written."""
    index = cand.index if cand.index is not None else -1
    attempt = int(sweep.storage.get_trial(cand.trial_id).user_attrs.get(ATTEMPT_ATTR, 0))
    with own_job_id(index):
        return run_claimed(sweep, index, Claimed(cand.trial_id, attempt), objective, settings,
                           trial_hook=trial_hook, promotion=True)


@contextmanager
def own_job_id(index: int) -> Iterator[None]:
    """``JOB_ID`` is the promoted trial's own index while it runs, not this runner's: what
    the trial's code reads, and every process it starts (a ``command:``, torchrun's ranks)
    inherits; this runner's is back afterwards."""
    before = os.environ.get(protocol.ENV_JOB_ID)
    os.environ[protocol.ENV_JOB_ID] = str(index)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(protocol.ENV_JOB_ID, None)
        else:
            os.environ[protocol.ENV_JOB_ID] = before


def _end_if_over(sweep: Sweep, trials: list[RungTrial], *, stopped: bool = False) -> None:
    """Nothing is promotable: if no trial runs and every index finished, failed or paused
    (as of ``trials``, read before), nothing can become promotable: prune the paused trials.
    ``stopped`` (a stop rule fired): nothing will be promoted or started, so it is over as
    soon as no trial runs."""
    store, study_id = sweep.storage, sweep.study_id
    if sweep.spec.open_ended and not stopped:
        return  # the next configuration starts (the budget lasts): nothing is over yet
    paused = {t.number for t in trials if t.paused}
    for s in store.index_table(study_id, sweep.spec.index_count):
        if s.state in ("COMPLETE", "PRUNED", "FAIL") or (stopped and s.state != "RUNNING"):
            continue
        if s.state == "WAITING" and s.trial_number in paused:
            continue
        return  # running, not started, or paused after ``trials`` was read: not over yet
    ended = store.finish_paused(study_id)
    if ended:
        why = "the sweep is stopped" if stopped else "nothing can be promoted any more"
        logger.info("sweep %s: %s; %d paused trial(s) end PRUNED", sweep.name, why, len(ended))
