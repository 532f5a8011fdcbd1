"""QMC sets: set i is a pure function of (seed, i), computed in bulk or alone, inside the
parameters' ranges, and spread more evenly than random sets."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from sweeper.qmc import from_unit, qmc_sets, unit_points
from sweeper.space import planned_sets, random_point
from sweeper.spec import Parameter
from tests.support.helpers import contains, make_spec

PARAMS: dict[str, Any] = {
    "lr": {"type": "float", "low": 1.0e-4, "high": 1.0e-1, "log": True},
    "x": {"type": "float", "low": -2.0, "high": 2.0},
    "drop": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1},
    "width": {"type": "int", "low": 16, "high": 256, "step": 16},
    "layers": {"type": "int", "low": 1, "high": 64, "log": True},
    "opt": {"type": "categorical", "choices": ["sgd", "adam", "rmsprop"]},
}


def qmc_spec(**over: Any) -> Any:
    return make_spec(method="qmc", parameters=PARAMS, trials=over.pop("trials", 64), **over)


def test_set_i_is_a_pure_function_of_seed_and_i() -> None:
    spec = qmc_spec(seed=5)
    plan = [p for _, p in planned_sets(spec)]
    assert len(plan) == 64
    assert plan == [p for _, p in planned_sets(qmc_spec(seed=5))]
    for i in (0, 1, 13, 63):
        assert qmc_sets(spec, i, 1) == [plan[i]]
    assert qmc_sets(spec, 10, 5) == plan[10:15]
    # more trials only append sets: set i does not depend on how many there are
    assert [p for _, p in itertools.islice(planned_sets(qmc_spec(seed=5, trials=200)), 64)] \
        == plan
    assert [p for _, p in planned_sets(qmc_spec(seed=6))] != plan


def test_sets_past_one_bulk_chunk_match_the_single_point() -> None:
    spec = qmc_spec(trials=4100)
    tail = list(itertools.islice(planned_sets(spec), 4090, 4100))
    assert [i for i, _ in tail] == list(range(4090, 4100))
    assert all(qmc_sets(spec, i, 1) == [p] for i, p in tail)


def test_every_set_lies_in_the_space() -> None:
    spec = qmc_spec()
    for _, params in planned_sets(spec):
        assert contains(spec, params), params
    widths = {p["width"] for _, p in planned_sets(spec)}
    assert widths == set(range(16, 257, 16))  # 64 Sobol points hit all 16 steps


def test_unscrambled_sobol_is_the_textbook_sequence_for_any_seed() -> None:
    a = qmc_spec(seed=1, sampler={"scramble": False})
    b = qmc_spec(seed=2, sampler={"scramble": False})
    assert unit_points(a, 0, 4) == unit_points(b, 0, 4)
    assert unit_points(a, 0, 2)[0] == [0.0] * 6 and unit_points(a, 0, 2)[1] == [0.5] * 6
    assert unit_points(qmc_spec(sampler={"qmc_type": "halton", "scramble": False}), 1, 1)[0][:2] \
        == [0.5, 1 / 3]


def test_from_unit_maps_the_ends_of_each_range() -> None:
    lr = Parameter("lr", "float", low=1e-4, high=1e-1, log=True)
    assert from_unit(lr, 0.0) == pytest.approx(1e-4) and from_unit(lr, 1.0) <= 1e-1
    assert from_unit(lr, 0.5) == pytest.approx(math.sqrt(1e-4 * 1e-1))
    width = Parameter("width", "int", low=16, high=256, step=16)
    assert (from_unit(width, 0.0), from_unit(width, 0.999999)) == (16, 256)
    drop = Parameter("drop", "float", low=0.0, high=0.5, step=0.1)
    assert [from_unit(drop, u) for u in (0.0, 0.2, 0.5, 0.99)] == [0.0, 0.1, 0.3, 0.5]
    opt = Parameter("opt", "categorical", choices=("a", "b", "c"))
    assert [from_unit(opt, u) for u in (0.0, 0.34, 0.67, 1.0)] == ["a", "b", "c", "c"]


def test_qmc_covers_the_space_more_evenly_than_random() -> None:
    """What QMC is for: 64 points in 2-D leave fewer empty cells of an 8x8 grid."""
    two = {"x": {"type": "float", "low": 0.0, "high": 1.0},
           "y": {"type": "float", "low": 0.0, "high": 1.0}}
    q = make_spec(method="qmc", parameters=two, trials=64)
    r = make_spec(method="random", parameters=two, trials=64)

    def cells(points: list[dict[str, float]]) -> int:
        return len({(int(p["x"] * 8), int(p["y"] * 8)) for p in points})

    assert cells([p for _, p in planned_sets(q)]) == 64  # one point per cell: (t, m, s)-net
    assert cells([random_point(r, i) for i in range(64)]) < 64
