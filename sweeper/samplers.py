"""Parallel asks that see each other (issue 29).

A sampler that accounts for running trials (TPE's constant liar, GP's penalised running points)
sees a running trial's point only once that trial's params are written, that is once its own
ask is over. Runners that ask at the same moment therefore miss each other: with GP, whose ask
takes seconds, W runners freed by trials finishing together propose the same point (measured on
the local backend, W=8: a third of the GP trials had no other runner's point to avoid, and came
out as near-duplicates).

:class:`AfterEarlierAsks` closes that gap: before it samples, a trial waits until every RUNNING
trial with a lower number has its params (they are being sampled right now), so the asks of
runners that start together are made one after the other, each seeing the points of those
before it. Waiting only on lower numbers cannot deadlock; the wait is bounded, so a runner that
died between creating its trial and sampling delays the others by ``max_wait_s`` at most.

:class:`PausedAsPruned`: under promotion ASHA (``scheduler: {type: asha, mode: promotion}``) a
paused trial is WAITING with values up to its rung, which no Optuna sampler reads: TPE saw none
of them until they ended, and sampled at random until ``n_startup_trials`` trials had completed
(in such a sweep, few ever do). The wrapper shows its sampler each paused trial as PRUNED at its
rung, as the trial will end if it is never promoted, and as Optuna ranks a pruned trial (TPE: by
its last intermediate value). Samplers that read no PRUNED trial (GP, CMA-ES by default) see
nothing new.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from sweeper._optuna_compat import PrunedView
from sweeper.protocol import PAUSED_ATTR

#: How long a trial waits for the asks before it (a GP ask takes seconds; W of them queue).
MAX_WAIT_S = 60.0
#: How often it looks again meanwhile.
POLL_S = 0.2


class Wrapped(BaseSampler):
    """``sampler`` itself: every call passed on. The wrappers below change what they name."""

    def __init__(self, sampler: BaseSampler) -> None:
        self.sampler = sampler

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.sampler.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.sampler.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.sampler.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()


class AfterEarlierAsks(Wrapped):
    """``sampler``, whose relative sampling waits for the running trials numbered before this
    one to have their params (see the module's docstring)."""

    def __init__(self, sampler: BaseSampler, *, max_wait_s: float = MAX_WAIT_S,
                 poll_s: float = POLL_S,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(sampler)
        self._max_wait_s, self._poll_s = max_wait_s, poll_s
        self._sleep, self._clock = sleep, clock

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if search_space:
            self.wait_for_earlier_asks(study, trial, search_space)
        return self.sampler.sample_relative(study, trial, search_space)

    def wait_for_earlier_asks(self, study: optuna.Study, trial: FrozenTrial,
                              search_space: dict[str, BaseDistribution]) -> float:
        """Wait (bounded) until no RUNNING trial numbered before ``trial`` lacks a param of
        ``search_space``; the seconds waited."""
        start = self._clock()
        while True:
            waiting = earlier_asks(study.get_trials(deepcopy=False,
                                                    states=(TrialState.RUNNING,)),
                                   trial.number, search_space)
            waited = self._clock() - start
            if not waiting or waited >= self._max_wait_s:
                return waited
            self._sleep(self._poll_s)


def earlier_asks(running: Sequence[FrozenTrial], number: int,
                 search_space: dict[str, BaseDistribution]) -> list[int]:
    """The numbers of the running trials before ``number`` still being sampled (without all of
    ``search_space``'s params)."""
    return [t.number for t in running
            if t.number < number and not search_space.keys() <= t.params.keys()]


def is_paused(trial: FrozenTrial) -> bool:
    """A trial paused at a rung, its promotion unclaimed (WAITING, ``sweeper:paused`` true),
    with a value to be ranked by."""
    return trial.state == TrialState.WAITING and trial.user_attrs.get(PAUSED_ATTR) is True \
        and bool(trial.intermediate_values)


class PausedAsPruned(Wrapped):
    """``sampler``, shown every paused trial as PRUNED at its rung (see the module's
    docstring). Only its reads change: what it writes goes to the study as ever."""

    def infer_relative_search_space(self, study: optuna.Study,
                                    trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.sampler.infer_relative_search_space(PrunedView(study, is_paused), trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return self.sampler.sample_relative(PrunedView(study, is_paused), trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.sampler.sample_independent(PrunedView(study, is_paused), trial, param_name,
                                               param_distribution)
