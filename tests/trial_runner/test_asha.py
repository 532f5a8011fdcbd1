"""Promotion ASHA's ranking (pure) and the order of promotions."""

from __future__ import annotations

import pytest
from optuna.trial import FrozenTrial, TrialState, create_trial

from sweeper.protocol import RUNG_ATTR
from sweeper.spec import SchedulerSpec
from sweeper.study.values import RungTrial
from trial_runner.asha import PromotionPruner, promotable, promotions, rung_entries

ASHA = SchedulerSpec(type="asha", min_resource=1, max_resource=27, reduction_factor=3)


def test_rung_steps_are_min_resource_times_eta_to_the_k_below_max_resource() -> None:
    assert ASHA.rung_steps == (1, 3, 9)
    assert SchedulerSpec(type="asha", min_resource=2, max_resource=16,
                         reduction_factor=2).rung_steps == (2, 4, 8)
    assert SchedulerSpec().rung_steps == ()  # no scheduler


@pytest.mark.parametrize(("n", "top"), [(1, 0), (2, 0), (3, 1), (5, 1), (6, 2), (9, 3)])
def test_the_top_floor_n_over_eta_are_promotable(n: int, top: int) -> None:
    rung = [(float(v), v) for v in range(n)]  # value v for trial v: 0 is the best (minimize)
    assert [promotable(e, rung, 3, maximize=False) for e in rung] == \
        [True] * top + [False] * (n - top)


def test_maximize_ranks_the_largest_first() -> None:
    rung = [(0.1, 0), (0.9, 1), (0.5, 2)]
    assert [promotable(e, rung, 3, maximize=True) for e in rung] == [False, True, False]
    assert [promotable(e, rung, 3, maximize=False) for e in rung] == [True, False, False]


def test_ties_go_to_the_older_trial() -> None:
    rung = [(0.5, 4), (0.5, 2), (0.5, 7)]
    assert [promotable(e, rung, 3, maximize=False) for e in rung] == [False, True, False]


def test_too_few_trials_promote_none() -> None:
    assert not promotable((0.0, 0), [(0.0, 0), (1.0, 1)], 3, maximize=False)
    assert not promotable((0.0, 0), [], 2, maximize=False)  # alone: floor(1/2) = 0


def test_the_candidate_counts_once_whether_or_not_the_rung_holds_it() -> None:
    others = [(1.0, 1), (2.0, 2)]
    assert promotable((0.0, 0), others, 3, maximize=False)  # 3 entries with it: the top 1
    assert promotable((0.0, 0), [*others, (0.0, 0)], 3, maximize=False)
    assert not promotable((1.5, 0), others, 3, maximize=False)


def _t(number: int, values: dict[int, float], *, rung: int | None = None, paused: bool = False,
       state: TrialState = TrialState.WAITING) -> RungTrial:
    return RungTrial(number + 100, number, number, state, rung, paused, None,
                     tuple(sorted(values.items())))


def test_failed_attempts_are_not_in_a_rung() -> None:
    trials = [_t(0, {1: 0.5}, state=TrialState.FAIL), _t(1, {1: 0.7, 3: 0.1})]
    assert rung_entries(trials, 1) == [(0.7, 1)]
    assert rung_entries(trials, 3) == [(0.1, 1)]


def test_promotions_come_top_rung_first_then_best_first() -> None:
    done = TrialState.COMPLETE
    trials = [
        # rung 0 (step 1): six trials, the top 2 (values 0.1, 0.2) promotable; 0.1 is paused
        _t(0, {1: 0.1}, rung=0, paused=True), _t(1, {1: 0.2}, rung=0, paused=True),
        _t(2, {1: 0.3}, rung=0, paused=True), _t(3, {1: 0.4}, rung=0, paused=True),
        _t(4, {1: 0.5}, rung=0, paused=True), _t(5, {1: 0.05, 3: 0.01}, state=done),
        # rung 1 (step 3): trial 5 and trial 6; floor(2/3) = 0: none promotable there
        _t(6, {1: 0.01, 3: 0.02}, rung=1, paused=True),
    ]
    # trial 5 has the best value at rung 0, trial 6 the second: neither is paused at rung 0
    assert [t.number for t in promotions(trials, ASHA, maximize=False)] == []
    trials += [_t(7, {1: 0.9, 3: 0.9}, state=done)]  # rung 1 has 3: trial 5 (0.01) is top
    assert [t.number for t in promotions(trials, ASHA, maximize=False)] == []
    trials += [_t(n, {1: 0.95}, rung=0, paused=True) for n in (8, 9, 10, 11, 12)]
    # rung 0 now has 13 entries: top 4 = trials 6, 5, 0, 1 -> 0 and 1 are paused there
    assert [t.number for t in promotions(trials, ASHA, maximize=False)] == [0, 1]
    trials += [_t(13, {1: 0.9, 3: 0.001}, state=done), _t(14, {1: 0.9, 3: 0.5}, state=done),
               _t(15, {1: 0.9, 3: 0.6}, state=done)]
    # rung 1: 6 entries, top 2 = 13 (0.001), 5 (0.01); trial 6 (0.02) is third: not yet;
    # rung 0 has 16 entries: top 5 = 6, 5, 0, 1, 2
    assert [t.number for t in promotions(trials, ASHA, maximize=False)] == [0, 1, 2]
    trials += [_t(16, {1: 0.9, 3: 0.7}, state=done), _t(17, {1: 0.9, 3: 0.8}, state=done),
               _t(18, {1: 0.9, 3: 0.85}, state=done)]
    # rung 1: 9 entries, top 3 includes trial 6, which comes first (the top rung first)
    assert [t.number for t in promotions(trials, ASHA, maximize=False)][:1] == [6]


class _Store:
    """The one read the pruner makes: the trials with a value at a rung's step."""

    def __init__(self, trials: list[RungTrial]) -> None:
        self.trials, self.reads = trials, 0

    def rung_trials(self, study_id: int, steps: list[int]) -> list[RungTrial]:
        self.reads += 1
        return self.trials


def _frozen(number: int, values: dict[int, float], rung: int | None = None) -> FrozenTrial:
    t = create_trial(state=TrialState.RUNNING, intermediate_values=values,
                     user_attrs={} if rung is None else {RUNG_ATTR: rung})
    t.number = number
    return t


def test_the_pruner_decides_once_per_rung_and_says_where_to_pause() -> None:
    rung0 = [_t(n, {1: v}) for n, v in ((1, 0.1), (2, 0.2))]
    store = _Store(rung0)
    pruner = PromotionPruner(store, 1, ASHA, "minimize")  # type: ignore[arg-type]
    assert not pruner.prune(None, _frozen(0, {0: 0.9}))  # type: ignore[arg-type]
    assert store.reads == 0  # no rung reached: nothing read
    # step 1 ends rung 0: with trials 1, 2 there, 0.05 is the top 1 of 3: it goes on
    assert not pruner.prune(None, _frozen(0, {0: 0.9, 1: 0.05}))  # type: ignore[arg-type]
    assert not pruner.prune(None, _frozen(0, {0: 0.9, 1: 0.05, 2: 0.04}))  # type: ignore[arg-type]
    assert store.reads == 1 and pruner.paused_rung(0) is None  # decided once
    # 0.3 is not in the top 1 of 3: pause at rung 0
    assert pruner.prune(None, _frozen(3, {1: 0.3}))  # type: ignore[arg-type]
    assert pruner.paused_rung(3) == 0 and pruner.paused_rung(3) is None


def test_a_promoted_trial_goes_on_at_its_rung_and_decides_the_next() -> None:
    store = _Store([_t(n, {1: 0.1, 3: 0.01}) for n in (1, 2)])
    pruner = PromotionPruner(store, 1, ASHA, "minimize")  # type: ignore[arg-type]
    # paused at rung 0, promoted: step 1 again (its code re-reported it) is not a decision
    assert not pruner.prune(None, _frozen(5, {1: 0.5}, rung=0))  # type: ignore[arg-type]
    assert store.reads == 0
    # resumed from a checkpoint at step 3 that its dead promoter saved before deciding rung 1:
    # the first report after it decides rung 1 (0.5 is third of three: pause there)
    assert pruner.prune(None, _frozen(5, {1: 0.5, 3: 0.5, 4: 0.4}, rung=0))  # type: ignore[arg-type]
    assert pruner.paused_rung(5) == 1
