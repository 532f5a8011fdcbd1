"""The compute section's simulation of its schedules (benchmarks/schedule_sim.py): the stopping
and the promotion rule on hand-made values, brackets as Optuna's Hyperband weighs them."""

from __future__ import annotations

import collections
from functools import partial

import pytest

from benchmarks import compute, compute_figures, curves, schedule_sim

S = schedule_sim.Schedule(min_resource=1, max_resource=3, eta=3)
#: Values at step 1 (the only rung below 3): index 1 best, index 2 worst.
AT_1 = {0: 0.5, 1: 0.3, 2: 0.9}


def _run(policy: str, workers: int = 1) -> list[curves.Event]:
    return schedule_sim.simulate(3, lambda i, k: AT_1[i] if k == 1 else AT_1[i] - k,
                                 lambda i, k: float(k), policy, S, workers)


def test_promotion_pauses_until_the_rung_ranks_then_promotes_the_top_third() -> None:
    events = _run("promotion")
    # 0 and 1 pause (too few at the rung to rank), 2 ranks last and pauses; then 1 is the top
    # third of three and resumes after its checkpoint: 5 steps, one trained to the end.
    assert [(e.index, e.step) for e in events] == [(0, 1), (1, 1), (2, 1), (1, 2), (1, 3)]
    assert schedule_sim.trained_to_end(events, 3) == {1}


def test_stopping_lets_the_first_trials_of_a_rung_go_on_and_stops_for_good() -> None:
    events = _run("stopping")
    # Optuna's successive halving: 0 is the best so far (of one), 1 too (of two); 2 is not in
    # the top max(1, 3 // 3) and stops.
    assert [(e.index, e.step) for e in events] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2),
                                                    (1, 3), (2, 1)]
    assert schedule_sim.trained_to_end(events, 3) == {0, 1}


def test_no_pruning_trains_everything_and_workers_share_the_ticks() -> None:
    events = _run("none", workers=3)
    assert len(events) == 9 and schedule_sim.trained_to_end(events, 3) == {0, 1, 2}
    assert [e.t for e in events] == [1.0] * 3 + [2.0] * 3 + [3.0] * 3


def test_brackets_are_drawn_with_hyperbands_weights() -> None:
    weights = schedule_sim.bracket_weights(4, 3)
    # Optuna's HyperbandPruner: bracket k's budget ceil(4 / (4 - k)) * 3**(3 - k).
    assert weights == [27, 18, 6, 4]
    drawn = collections.Counter(schedule_sim.bracket_of(i, weights) for i in range(5500))
    for k, w in enumerate(weights):
        assert drawn[k] / 5500 == pytest.approx(w / sum(weights), abs=0.01)
    assert schedule_sim.rung_steps(0, schedule_sim.Schedule(1, 27, 3)) == (1, 3, 9)
    assert schedule_sim.rung_steps(2, schedule_sim.Schedule(1, 27, 3)) == (9,)
    assert schedule_sim.rung_steps(3, schedule_sim.Schedule(1, 27, 3)) == ()
    assert compute_figures.sim_schedule(27, None).brackets == 4


def test_a_bracket_ranks_only_its_own_trials() -> None:
    s = schedule_sim.Schedule(min_resource=1, max_resource=3, eta=3, brackets=2)
    weights = schedule_sim.bracket_weights(2, 3)
    brackets = [schedule_sim.bracket_of(i, weights) for i in range(12)]
    events = schedule_sim.simulate(12, lambda i, k: float(i), lambda i, k: float(k),
                                   "promotion", s, 1)
    # Bracket 1 has no rung below 3: its trials train to the end whatever their values.
    assert {i for i in range(12) if brackets[i] == 1} <= schedule_sim.trained_to_end(events, 3)
    assert {i for i in range(12) if brackets[i] == 0} - schedule_sim.trained_to_end(events, 3)


def test_the_curve_simulation_uses_the_curve_tasks_noise_and_scores() -> None:
    size = compute.task_size(compute.SIZES["tiny"], "curve")
    configs = compute.curve_configs(size, 0)
    events = schedule_sim.on_curves(configs, 0, "none", compute_figures.sim_schedule(9, 1), 2)
    e = events[0]
    assert e.score == curves.quality(configs[e.index], e.step)
    assert e.value == e.score + curves.noise(0, e.index, e.step)


def test_the_simulation_check_compares_the_configurations_trained_to_the_end() -> None:
    size = compute.task_size(compute.SIZES["tiny"], "curve")
    sim = schedule_sim.on_curves(compute.curve_configs(size, 0), 0, "promotion",
                                 compute_figures.sim_schedule(9, 1), size["w"])
    ends = schedule_sim.trained_to_end(sim, 9)
    same = [{"runs": {"asha": {"events": [[i, 9, 0.1] for i in ends]}}}]
    other = [{"runs": {"asha": {"events": [[i, 9, 0.1] for i in ends | {99}]}}}]
    check = compute_figures.simulation_check
    configs_of = partial(compute.curve_configs, size)
    assert "in 1/1 seeds" in check(same, configs_of, 9, size["w"])
    assert "in 0/1 seeds" in check(other, configs_of, 9, size["w"])


def test_a_budget_starts_configurations_from_the_pool_until_the_gate_says_no() -> None:
    # 30 configurations in the pool, each better than the last at every step; 9 steps each
    pool = 30
    s = schedule_sim.Schedule(min_resource=1, max_resource=9, eta=3)

    def run(budget: int | None, workers: int) -> list[curves.Event]:
        return schedule_sim.simulate(pool, lambda i, k: 1.0 / (i + 1) + 1.0 / k,
                                     lambda i, k: float(k), "promotion", s, workers, budget)

    everything = run(None, 1)
    assert {e.index for e in everything} == set(range(pool))  # no budget: the whole pool
    for workers in (1, 4):
        events = run(20, workers)
        # one worker: new work starts while spent < 20, so at most one segment past it
        assert 20 <= len(events) <= 20 + workers * s.max_resource
        assert len({e.index for e in events}) < pool
    # sequentially, the gate counts what the finished segments used: the run stops at 20
    # steps unless the segment that crossed it was running
    assert len(run(20, 1)) - 20 < s.max_resource
