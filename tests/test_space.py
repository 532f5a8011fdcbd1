from __future__ import annotations

import itertools
import math

import pytest

from sweeper.space import (
    grid_point,
    grid_size,
    grid_size_of,
    grid_values,
    index_seed,
    planned_sets,
    random_point,
)
from sweeper.spec import Parameter
from tests.support.helpers import contains, make_spec


def test_grid_order_is_the_cartesian_product_in_yaml_order() -> None:
    spec = make_spec(parameters={
        "lr": {"type": "float", "values": [0.1, 0.01]},
        "hidden": {"type": "int", "low": 16, "high": 48, "step": 16},
        "opt": {"type": "categorical", "choices": ["sgd", "adam"]},
    })
    axes = [grid_values(p) for p in spec.parameters]
    expected = [dict(zip(["lr", "hidden", "opt"], combo, strict=True))
                for combo in itertools.product(*axes)]
    assert grid_size(spec) == 12 == len(expected)
    assert [grid_point(spec, i) for i in range(12)] == expected
    assert grid_point(spec, 0) == {"lr": 0.1, "hidden": 16, "opt": "sgd"}
    assert grid_point(spec, 11) == {"lr": 0.01, "hidden": 48, "opt": "adam"}
    with pytest.raises(IndexError):
        grid_point(spec, 12)


def test_grid_size_of_counts_every_kind_without_enumerating() -> None:
    params = [
        Parameter("v", "float", values=(0.1, 0.2, 0.3)),
        Parameter("c", "categorical", choices=("a", "b")),
        Parameter("n", "int", low=16, high=48, step=16),
        Parameter("d", "float", low=0.0, high=0.5, step=0.1),
    ]
    assert grid_size_of(params) == 3 * 2 * 3 * 6
    assert grid_size_of(params) == math.prod(len(grid_values(p)) for p in params)
    assert grid_size_of([]) == 1
    # a continuous dimension has no grid, whatever else there is
    assert grid_size_of([*params, Parameter("lr", "float", low=1e-4, high=1e-1, log=True)]) == 0
    # exact, never a float: far past MAX_INDEXES without listing anything
    wide = [Parameter(f"x{i}", "int", low=0, high=999, step=1) for i in range(8)]
    assert grid_size_of(wide) == 1000**8


def test_float_step_grid_has_clean_values() -> None:
    spec = make_spec(parameters={"d": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1}})
    assert grid_values(spec.parameters[0]) == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
    assert all(contains(spec, grid_point(spec, i)) for i in range(grid_size(spec)))


def test_grid_trials_takes_a_prefix_of_the_plan() -> None:
    spec = make_spec(trials=3)
    sets = list(planned_sets(spec))
    assert [i for i, _ in sets] == [0, 1, 2]
    assert sets[1][1] == grid_point(spec, 1)


def test_random_sets_are_a_pure_function_of_seed_and_index() -> None:
    spec = make_spec(method="random", trials=50, parameters={
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
        "n": {"type": "int", "low": 2, "high": 64, "log": True},
        "k": {"type": "int", "low": 0, "high": 100, "step": 10},
        "d": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1},
        "c": {"type": "categorical", "choices": ["a", "b", None]},
    })
    first = [random_point(spec, i) for i in range(50)]
    assert first == [random_point(spec, i) for i in range(50)]
    assert all(contains(spec, p) for p in first)
    assert len({tuple(sorted(map(str, p.values()))) for p in first}) > 40
    other_seed = make_spec(method="random", trials=50, seed=8, parameters={
        "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}})
    assert random_point(other_seed, 0) != {"lr": first[0]["lr"]}
    # index i does not depend on how many sets the sweep has
    bigger = make_spec(method="random", trials=500, parameters=spec.to_dict()["parameters"])
    assert random_point(bigger, 7) == first[7]


def test_index_seed_is_stable_and_32_bit() -> None:
    # Pinned: changing any of these changes every random sweep's sets (and every TPE runner's
    # seed), so a resumed sweep would no longer match its own plan.
    assert index_seed(0, 0) == 1176940906
    assert index_seed(0, 1) == 1516894611
    assert index_seed(1, 0) == 2168047888
    assert index_seed(7, 12345) == 4104181383
    assert index_seed(2**40, 99_999) == 929488020
    assert all(0 <= index_seed(s, i) < 2**32 for s in range(5) for i in range(50))


def test_contains_rejects_points_outside_the_space() -> None:
    spec = make_spec()
    assert contains(spec, {"a": 0.25, "b": "x"})
    assert not contains(spec, {"a": 0.3, "b": "x"})
    assert not contains(spec, {"a": 0.25, "b": "z"})
    assert not contains(spec, {"a": 0.25})
