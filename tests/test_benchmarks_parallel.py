"""The parallel-price harness (benchmarks/parallel.py): its simulated workers overlap as W
real runners do, sweeper's mode samples each index as a runner does, and the figures are the
ones the table states."""

from __future__ import annotations

from typing import Any, ClassVar

import optuna
import pytest
from optuna.trial import TrialState

from benchmarks import parallel
from benchmarks.quality import evaluate, optimum
from sweeper.spec.seeds import index_seed


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)


class _Recording(optuna.samplers.RandomSampler):
    """Notes how many other trials are RUNNING when each trial starts."""

    seen: ClassVar[list[int]] = []

    def before_trial(self, study: optuna.Study, trial: Any) -> None:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        self.seen.append(len([t for t in running if t.number != trial.number]))


def test_w_simulated_workers_keep_w_trials_running_and_finish_every_trial() -> None:
    _Recording.seen = []
    seeds: list[int] = []

    def factory(method: str, seed: int, index: int) -> Any:
        seeds.append(seed)
        return _Recording(seed=seed)

    parallel.simulate("tpe", "sphere", 2, 20, 4, 7, "sweeper", factory)
    assert len(_Recording.seen) == 20
    # the first four start together, then each finish starts one: three others in flight
    assert _Recording.seen[:4] == [0, 1, 2, 3]
    assert _Recording.seen[4:17] == [3] * 13
    # sweeper's mode: a sampler per index, seeded as the runner of that index seeds it
    assert seeds == [index_seed(7, i) for i in range(20)]


def test_sequential_and_plain_modes_keep_one_sampler_per_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []

    def plain_sampler(method: str, seed: int) -> Any:
        built.append(seed)
        return _Recording(seed=seed)

    monkeypatch.setattr(parallel, "_plain_sampler", plain_sampler)
    _Recording.seen = []
    parallel.simulate("tpe", "sphere", 2, 6, 4, 2, "sequential")
    assert built == [2] and _Recording.seen == [0] * 6  # one at a time
    built.clear()
    parallel.simulate("tpe", "sphere", 2, 6, 4, 2, "plain")
    assert built == [2000, 2001, 2002, 2003]  # plain Optuna's W processes, a seed each


def test_sweepers_qmc_plan_is_the_same_at_any_parallelism() -> None:
    one = parallel.simulate("qmc", "rastrigin", 3, 16, 1, 3, "sweeper")
    eight = parallel.simulate("qmc", "rastrigin", 3, 16, 8, 3, "sweeper")
    plan = parallel.qmc_plan("rastrigin", 3, 16, 3)
    assert one == eight == min(evaluate("rastrigin", p) for p in plan)


def test_normalised_regret_and_its_interval() -> None:
    opt = optimum("sphere", 2)
    best = {"sphere": {"random": {"sequential": [opt + 4.0, opt + 4.0]},
                       "tpe": {"sequential": [opt + 1.0, opt + 1.0],
                               "sweeper": [opt + 2.0, opt + 2.0]}}}
    assert parallel.normalised(best, 2, ["sphere"], "tpe", "sequential") == pytest.approx(0.25)
    assert parallel.normalised(best, 2, ["sphere"], "tpe", "sweeper") == pytest.approx(0.5)
    lo, hi = parallel.ratio_interval(best, 2, ["sphere"], "tpe", "sweeper", rounds=50)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)


def test_a_row_passes_only_within_the_target_and_at_or_below_plain() -> None:
    opt = optimum("sphere", 2)

    def best(sweeper: float, plain: float) -> dict[str, Any]:
        return {"sphere": {"random": {"sequential": [opt + 10.0]},
                           "gp": {"sequential": [opt + 1.0], "sweeper": [opt + sweeper],
                                  "plain": [opt + plain]}}}

    def status(sweeper: float, plain: float) -> str:
        return parallel.rows_of(best(sweeper, plain), ["gp"], ["sphere"], 2, 10, 8, 1)[0].status

    assert status(1.05, 1.2) == "PASS"
    assert status(1.2, 1.3) == "MISS"   # over 1.10x sequential
    assert status(1.05, 1.0) == "MISS"  # worse than plain parallel Optuna


def test_a_planned_methods_price_is_against_its_own_plan_at_w1() -> None:
    opt = optimum("sphere", 2)
    best = {"sphere": {"random": {"sequential": [opt + 10.0]},
                       "qmc": {"sequential": [opt + 1.0], "plain": [opt + 1.0],
                               "sweeper": [opt + 3.0], "sweeper_sequential": [opt + 3.0]}}}
    row = parallel.rows_of(best, ["qmc"], ["sphere"], 2, 10, 8, 1)[0]
    assert row.figures["ratio"] == pytest.approx(1.0)
    assert row.figures["plain_ratio"] == pytest.approx(1.0)
    assert row.status == "PASS"


def _running_beside(finished: int) -> tuple[optuna.Study, list[Any]]:
    """A study with ``finished`` sphere trials told and one RUNNING at the best one's params."""
    from optuna.distributions import FloatDistribution

    space = {"x": FloatDistribution(-2.0, 2.0), "y": FloatDistribution(-2.0, 2.0)}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(finished):
        trial = study.ask(space)
        study.tell(trial, trial.params["x"] ** 2 + trial.params["y"] ** 2)
    study.enqueue_trial(study.best_params)
    study.ask(space)
    return study, [study.trials[-1]]


def test_the_gp_variants_lie_as_named() -> None:
    from benchmarks.gp_variants import VARIANTS

    study, running = _running_beside(8)
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    values = sorted(t.value for t in done)
    space = running[0].distributions

    def lie(variant: str) -> float:
        sampler = VARIANTS[variant](0)
        return sampler.lie_value(study, done, running, space)[0]

    assert lie("constant_liar_best") == values[0]
    assert lie("constant_liar_worst") == values[-1]
    # the GP of the finished trials, at a finished trial's point: close to its value
    assert lie("kriging_believer") == pytest.approx(values[0], abs=0.05 * (values[-1] - values[0]))
    assert lie("kriging_believer") not in (values[0], values[-1])
    assert type(VARIANTS["optuna_qlogei"](0)) is optuna.samplers.GPSampler
