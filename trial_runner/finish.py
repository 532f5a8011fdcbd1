"""How a runner ends its trial: the tell (COMPLETE or PRUNED), a FAIL, or the word that the
watcher failed it first (moved out of :mod:`trial_runner.runner`, which re-exports them)."""

from __future__ import annotations

import logging
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper import protocol
from sweeper._optuna_compat import storage_of, tell, tell_trial
from trial_runner.outcome import Outcome

logger = logging.getLogger("trial_runner.runner")


def _finish_pruned(study: optuna.Study, trial_id: int, index: int, number: int, *,
                   trial: optuna.Trial | None = None) -> Outcome:
    if not _tell(study, trial_id, TrialState.PRUNED, None, number=number, trial=trial):
        return _superseded(index, number)
    return Outcome(index, protocol.EXIT_OK, "PRUNED", number,
                   f"index {index}: trial #{number} pruned")


def _tell(study: optuna.Study, trial_id: int, state: TrialState,
          values: list[float] | None, *, number: int | None = None,
          trial: optuna.Trial | None = None) -> bool:
    """Finish the trial. Every storage call of the tell retries, and a retry after a lost
    commit acknowledgement finds its own state and values stored (the storage's
    ``set_trial_state_values``). Optuna's internal tell (what ``study.optimize`` calls) skips
    the public ``Study.tell``'s re-read and deep copy of the finished trial; given the
    ``trial`` (its own up-to-date copy), not even the trial is re-read."""
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


def _superseded(index: int, number: int) -> Outcome:
    return Outcome(index, protocol.EXIT_RETRY, "FAIL", number,
                   f"index {index}: trial #{number} was marked FAIL (stale heartbeat) before it "
                   "finished; the index needs another attempt")


def _fail(storage: Any, index: int, trial_id: int, number: int, reason: str,
          code: int) -> Outcome:
    storage.mark_failed(trial_id, reason)  # the caller logs the outcome (trial_runner.main)
    return Outcome(index, code, "FAIL", number, f"index {index}: trial #{number} failed: {reason}")


def _jsonable(v: Any) -> bool:
    import json

    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return False
    return True
