"""How a runner ends its trial: the tell (COMPLETE or PRUNED), a FAIL, or the word that the
watcher failed it first. :mod:`trial_runner.runner` decides which; this module writes it."""

from __future__ import annotations

import logging

import optuna
from optuna.trial import TrialState

from sweeper import protocol
from sweeper._optuna_compat import storage_of, tell, tell_trial
from sweeper.study.store import IndexStore
from trial_runner.outcome import Outcome, OutcomeState

logger = logging.getLogger(__name__)


def finish_pruned(study: optuna.Study, trial_id: int, index: int, number: int, *,
                  trial: optuna.Trial | None = None) -> Outcome:
    """Tell the trial PRUNED: its outcome, or :func:`superseded` when the watcher failed it
    first."""
    if not tell_state(study, trial_id, TrialState.PRUNED, None, number=number, trial=trial):
        return superseded(index, number)
    return Outcome(index, protocol.EXIT_OK, OutcomeState.PRUNED, number,
                   f"index {index}: trial #{number} pruned")


def tell_state(study: optuna.Study, trial_id: int, state: TrialState,
               values: list[float] | None, *, number: int | None = None,
               trial: optuna.Trial | None = None) -> bool:
    """Finish the trial; False when someone else finished it in another state first. Every
    storage call of the tell retries, and a retry after a lost commit acknowledgement finds
    its own state and values stored (the storage's ``set_trial_state_values``). Optuna's
    internal tell (what ``study.optimize`` calls) skips the public ``Study.tell``'s re-read
    and deep copy of the finished trial; given the ``trial`` (its own up-to-date copy), not
    even the trial is re-read."""
    n = number if number is not None else storage_of(study).get_trial(trial_id).number
    try:
        if trial is not None:
            tell_trial(study, trial, values, state)
        else:
            tell(study, n, values, state)
    except (optuna.exceptions.UpdateFinishedTrialError, ValueError) as e:
        # Finished by someone else: the watcher failed it for a stale heartbeat (the work
        # does not count).
        stored = storage_of(study).get_trial(trial_id).state
        if stored == TrialState.RUNNING:  # not finished by anyone: the tell itself failed
            raise
        logger.debug("tell of trial %d refused: %s", trial_id, e)
        return stored == state
    return True


def superseded(index: int, number: int) -> Outcome:
    """The outcome of a trial the watcher failed (stale heartbeat) before it finished."""
    return Outcome(index, protocol.EXIT_RETRY, OutcomeState.FAIL, number,
                   f"index {index}: trial #{number} was marked FAIL (stale heartbeat) before it "
                   "finished; the index needs another attempt")


def fail_trial(storage: IndexStore, index: int, trial_id: int, number: int, reason: str,
               code: int) -> Outcome:
    """Mark the trial FAIL for ``reason``: its outcome, with exit code ``code``."""
    storage.mark_failed(trial_id, reason)  # the caller logs the outcome (trial_runner.main)
    return Outcome(index, code, OutcomeState.FAIL, number,
                   f"index {index}: trial #{number} failed: {reason}")

