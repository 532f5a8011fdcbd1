"""Promotion ASHA's decisions (``scheduler: {type: asha, mode: promotion}``): the pure ranking
of a rung, and the pruner that asks it when a trial reports the step that ends a rung.

Rung k ends at step ``r_k = min_resource * eta**k`` (below ``max_resource``). A trial is
promotable at rung k iff it is in the top ``floor(n_k / eta)`` of the ``n_k`` trials with an
intermediate value at step ``r_k`` (ties: the older trial first). At ``r_k`` a promotable
trial goes on at once; any other is paused there (the runner's pause, not Optuna's PRUNED) and
waits for a promotion (:mod:`trial_runner.promotion`) as the rung fills.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.protocol import RUNG_ATTR
from sweeper.spec import SchedulerSpec
from sweeper.study import IndexStore
from sweeper.study.values import RungTrial

#: (value, trial number): a trial's place in a rung.
Entry = tuple[float, int]


def _key(entry: Entry, maximize: bool) -> tuple[float, int]:
    return (-entry[0] if maximize else entry[0], entry[1])


def promotable(candidate: Entry, rung: Iterable[Entry], eta: int, *, maximize: bool) -> bool:
    """Whether ``candidate`` is in the top ``floor(n / eta)`` of ``rung`` (every trial with a
    value at the rung; the candidate is counted once whether or not ``rung`` holds it)."""
    entries = {e[1]: e for e in rung}
    entries[candidate[1]] = candidate
    top = len(entries) // eta
    if top == 0:
        return False
    ranked = sorted(entries.values(), key=lambda e: _key(e, maximize))
    return _key(candidate, maximize) <= _key(ranked[top - 1], maximize)


def rung_entries(trials: Iterable[RungTrial], step: int) -> list[Entry]:
    """The entries of the rung ending at ``step``: every trial with a value there but the
    failed attempts (a retry of the same index reports its own)."""
    return [(value, t.number) for t in trials if t.state != TrialState.FAIL
            for s, value in t.values if s == step]


def promotions(trials: Sequence[RungTrial], scheduler: SchedulerSpec, *,
               maximize: bool) -> list[RungTrial]:
    """The paused trials that are promotable now, in the order to claim them: the top rung
    first (ASHA's get_job), the best value first within a rung."""
    steps = scheduler.rung_steps
    out: list[RungTrial] = []
    for k in reversed(range(len(steps))):
        entries = rung_entries(trials, steps[k])
        here = [(t, v) for t in trials if t.paused and t.rung == k
                for s, v in t.values if s == steps[k]]
        ok = [(t, v) for t, v in here if promotable((v, t.number), entries,
                                                   scheduler.reduction_factor, maximize=maximize)]
        out += [t for t, _ in sorted(ok, key=lambda tv: _key((tv[1], tv[0].number), maximize))]
    return out


class PromotionPruner(optuna.pruners.BasePruner):
    """Optuna's pruner interface over :func:`promotable`: True at a rung's last step for a
    trial outside the top 1/eta there, which the runner then pauses at that rung (see
    :meth:`paused_rung`). A trial promoted from rung k (its ``sweeper:rung``) goes on there."""

    def __init__(self, store: IndexStore, study_id: int, scheduler: SchedulerSpec,
                 direction: str) -> None:
        self._store, self._sweep_study_id, self._scheduler = store, study_id, scheduler
        self._maximize = direction == "maximize"
        self._steps = scheduler.rung_steps
        self._lock = threading.Lock()
        #: trial number -> the rung at which this pruner last said "pause" / "go on".
        self._decided: dict[int, int] = {}
        self._passed: dict[int, int] = {}

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        # The highest rung the trial has a value at; decided unless it paused there before
        # (promoted from it) or went on from it in this run. A run resumed from a checkpoint
        # at a rung's step (its promoter died before the decision) decides it now.
        reached = [k for k, r in enumerate(self._steps)
                   if r <= step and r in trial.intermediate_values]
        paused_at = trial.user_attrs.get(RUNG_ATTR)
        with self._lock:
            done = max(-1 if paused_at is None else int(paused_at),
                       self._passed.get(trial.number, -1))
        if not reached or reached[-1] <= done:
            return False
        k = reached[-1]
        at = self._steps[k]
        rung = rung_entries(self._store.rung_trials(self._sweep_study_id, [at]), at)
        me = (trial.intermediate_values[at], trial.number)
        go_on = promotable(me, rung, self._scheduler.reduction_factor, maximize=self._maximize)
        with self._lock:
            (self._passed if go_on else self._decided)[trial.number] = k
        return not go_on

    def paused_rung(self, number: int) -> int | None:
        """The rung at which trial ``number`` is to pause (None: this pruner never said so,
        the trial's own code pruned it: it ends PRUNED)."""
        with self._lock:
            return self._decided.pop(number, None)


def paused_rung(pruner: optuna.pruners.BasePruner, number: int) -> int | None:
    """:meth:`PromotionPruner.paused_rung` for the study's pruner; None for any other."""
    return pruner.paused_rung(number) if isinstance(pruner, PromotionPruner) else None
