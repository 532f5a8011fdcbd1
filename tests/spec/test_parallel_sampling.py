"""Parallel GP proposals are spread (issue 29): W=8 runners asking while the earlier ones are
still RUNNING must not propose near-duplicates.

Each ask is what a sweeper runner does for its index: a fresh sampler from the registry
(``build_sampler("gp", ...)``) seeded ``index_seed(seed, index)``, asking on the shared study
whose other trials are RUNNING. The sampler's resolution is a relative distance in the search
space normalised to the unit cube (each parameter's range mapped to [0, 1], distance divided by
the cube's diagonal): two pending points closer than 1 % of it are the same proposal for any
practical purpose (Optuna's acquisition optimiser stops at 1e-4 of it).

The same asks made blind to the running trials (each in a study that holds only the finished
ones, which is what a sampler that ignores running trials sees) give points within 1e-4 of each
other on this seed: the check below is one that a sampler without pending points fails.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import optuna
import pytest
from optuna.distributions import FloatDistribution

from sweeper.spec.registry import build_sampler
from sweeper.spec.seeds import index_seed

SPACE = {"x1": FloatDistribution(-5.0, 5.0), "x2": FloatDistribution(0.0, 1.0),
         "x3": FloatDistribution(-2.0, 2.0)}
RESOLUTION = 0.01
WORKERS = 8
FINISHED = 12
SEED = 0


def _objective(params: dict[str, float]) -> float:
    return (params["x1"] - 1.0) ** 2 + 10 * (params["x2"] - 0.3) ** 2 + params["x3"] ** 2


def _unit(params: dict[str, float]) -> list[float]:
    return [(params[k] - d.low) / (d.high - d.low) for k, d in SPACE.items()]


def _closest_pair(points: list[list[float]]) -> float:
    """The smallest distance between two points, as a fraction of the unit cube's diagonal."""
    return min(math.dist(a, b) for a, b in itertools.combinations(points, 2)) \
        / math.sqrt(len(SPACE))


def _finished_study() -> optuna.Study:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=SEED))
    for _ in range(FINISHED):
        trial = study.ask(SPACE)
        study.tell(trial, _objective(trial.params))
    return study


def _pending(ask: Callable[[optuna.Study, int], dict[str, float]]) -> list[list[float]]:
    study = _finished_study()
    return [_unit(ask(study, FINISHED + i)) for i in range(WORKERS)]


def _as_runner(study: optuna.Study, index: int) -> dict[str, float]:
    """Runner ``index``: its own sampler, the earlier asks left RUNNING in the study."""
    study.sampler = build_sampler("gp", {}, index_seed(SEED, index))
    return study.ask(SPACE).params


def _blind(study: optuna.Study, index: int) -> dict[str, float]:
    """The same ask by a sampler that sees only the finished trials."""
    view = optuna.create_study(sampler=build_sampler("gp", {}, index_seed(SEED, index)))
    view.add_trials([t for t in study.get_trials() if t.state.is_finished()])
    params = view.ask(SPACE).params
    study.enqueue_trial(params)
    study.ask(SPACE)  # left RUNNING, as in the parallel case
    return params


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_parallel_gp_proposals_at_w8_are_spread() -> None:
    assert _closest_pair(_pending(_as_runner)) > RESOLUTION


def test_the_spread_check_fails_for_a_sampler_blind_to_running_trials() -> None:
    assert _closest_pair(_pending(_blind)) < RESOLUTION
