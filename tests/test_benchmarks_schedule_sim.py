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
    check = partial(compute_figures.simulation_check, compute.curve_sim(size))
    assert "in 1/1 seeds" in check(same)
    assert "in 0/1 seeds" in check(other)


def test_a_program_that_reports_its_first_epoch_as_step_0_meets_each_rung_an_epoch_later(
        ) -> None:
    assert schedule_sim.rung_steps(0, schedule_sim.Schedule(1, 27, 3, offset=1)) == (2, 4, 10)
    assert compute_figures.sim_schedule(27, None, offset=1).offset == 1
    # a trial ranked at a rung has trained offset + the rung's step: with one rung (step 1 of
    # 3) and offset 1, the first trials pause after 2 steps, not 1
    s = schedule_sim.Schedule(min_resource=1, max_resource=3, eta=3, offset=1)
    events = schedule_sim.simulate(3, lambda i, k: AT_1[i] if k == 2 else AT_1[i] - k,
                                   lambda i, k: float(k), "promotion", s, 1)
    assert [(e.index, e.step) for e in events] == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1),
                                                    (2, 2), (1, 3)]


#: A digits size small enough for a test: 3 configurations (a pool of 12) of 3 epochs.
DIGITS = {"w": 2, "step_s": 0.0, "trials": 3, "steps": 3, "seeds": 1}


def _real(sim: compute_figures.SimTask, seed: int, policy: str) -> list[list[float]]:
    """A real run's ledger as the simulation would have it ([index, reported step, loss])."""
    events = schedule_sim.simulate(sim.n, *sim.measures(seed), policy, sim.schedule(1), sim.workers)
    return [[e.index, e.step - sim.offset, e.score] for e in events]


def test_the_digits_simulation_reports_its_rows_with_their_seeds_and_checks_the_real_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(compute.SIM_SEEDS, "digits", 2)
    sim, _ = compute.digits_sim(DIGITS)
    per_seed = [{"runs": {v: {"events": _real(sim, 0, p)}
                          for v, p in (("none", "none"), ("asha", "promotion"))}}]
    logged: list[str] = []
    rows, notes = compute.simulate("digits", DIGITS, per_seed, logged.append)
    assert [r.item for r in rows] == [
        f"compute, simulated: epochs to the top {f:.0%} (digits, N=3 x 3 steps, W=2, 2 seeds)"
        for f in compute_figures.SIM_FRACTIONS]
    assert all(r.status == "INFO" and r.figures["seeds"] == 2 for r in rows)
    assert all(r.figures["task"] == "digits" for r in rows)
    # every simulated rule, with the seeds that reached the target
    assert all(f"{label} " in rows[0].measured for label in
               [*compute_figures.SIMULATED, *compute_figures.SIM_BUDGETED])
    assert "/2)" in rows[0].measured and "(3/2)" not in rows[0].measured
    text = " ".join(notes)
    assert "compute digits, simulated: the same rules replayed" in text
    assert "reseeds its dropout" in text and "compute digits, simulated, at equal budget" in text
    assert "in 1/1 seeds" in text  # the ASHA run above is the simulation's own
    assert "no-pruning run's 9 reported losses differ from the simulated curves by at most " \
        "0.0e+00" in text
    assert logged


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
