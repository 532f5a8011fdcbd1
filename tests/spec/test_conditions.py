"""Conditional parameters (`when:`): parsing, the record, dependency order, which parameters a
set has, and the conditional grid (only valid points, each once)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from sweeper.errors import SpecError
from sweeper.space import (
    conditional_grid,
    grid_point,
    grid_size,
    planned_sets,
    random_point,
)
from sweeper.spec import parse_spec_dict
from sweeper.spec.conditions import dependency_order, drop_inactive, is_active
from sweeper.spec.grid import grid_size_of
from tests.support.helpers import contains, make_spec

SPACE: dict[str, Any] = {
    # a child before its parent in YAML order: dependency order puts the parent first
    "momentum": {"type": "float", "values": [0.0, 0.9], "when": {"optimizer": "sgd"}},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam", "rmsprop"]},
    "nesterov": {"type": "categorical", "choices": [True, False], "when": {"momentum": 0.9}},
    "layers": {"type": "int", "low": 1, "high": 3},
    "width2": {"type": "int", "values": [32, 64], "when": {"layers": [2, 3]}},
    "width3": {"type": "int", "values": [32, 64], "when": {"layers": 3}},
}
# sgd: momentum 0.0 | 0.9 x nesterov 2 = 3; adam, rmsprop: 1 each -> 5 optimizer branches;
# layers 1 | 2 x width2 2 | 3 x width2 2 x width3 2 = 7 -> 35 valid points (product: 288).
VALID = 35
REPO = Path(__file__).resolve().parents[2]


def grid(**over: Any) -> Any:
    return make_spec(method="grid", **{"parameters": SPACE, **over})


def test_when_is_parsed_kept_in_the_record_and_round_trips() -> None:
    spec = grid()
    assert spec.parameter("momentum").when == (("optimizer", ("sgd",)),)
    assert spec.parameter("width2").when == (("layers", (2, 3)),)
    assert spec.is_conditional and not make_spec().is_conditional
    record = spec.to_dict()["parameters"]
    assert record["momentum"]["when"] == {"optimizer": ["sgd"]}
    assert "when" not in record["optimizer"]  # unconditional parameters keep their record
    assert parse_spec_dict(spec.to_dict()) == spec
    assert grid(parameters={**SPACE, "width3": {**SPACE["width3"], "when": {"layers": 2}}}) \
        .spec_hash != spec.spec_hash


def test_dependency_order_puts_parents_first_and_otherwise_keeps_yaml_order() -> None:
    spec = grid()
    assert [p.name for p in dependency_order(spec.parameters)] == [
        "optimizer", "momentum", "nesterov", "layers", "width2", "width3"]
    plain = make_spec(method="random")
    assert dependency_order(plain.parameters) == plain.parameters


def test_a_parameter_exists_exactly_when_its_chain_of_conditions_holds() -> None:
    spec = grid()
    everything = {"optimizer": "adam", "momentum": 0.9, "nesterov": True, "layers": 2,
                  "width2": 32, "width3": 64}
    assert drop_inactive(spec.parameters, everything) == {"optimizer": "adam", "layers": 2,
                                                          "width2": 32}
    sgd = {**everything, "optimizer": "sgd"}
    assert drop_inactive(spec.parameters, sgd) == {
        "optimizer": "sgd", "momentum": 0.9, "nesterov": True, "layers": 2, "width2": 32}
    # is_active reads the values decided so far: an inactive parent is absent from them.
    assert not is_active(spec.parameter("nesterov"), {"optimizer": "adam"})
    assert is_active(spec.parameter("nesterov"), {"optimizer": "sgd", "momentum": 0.9})


def test_conditional_grid_has_only_valid_points_each_once() -> None:
    spec = grid()
    points = list(conditional_grid(spec.parameters))
    assert len(points) == VALID == grid_size(spec) == spec.trials
    assert len({tuple(sorted(p.items())) for p in points}) == VALID
    assert all(contains(spec, p) for p in points)
    assert points[0] == {"momentum": 0.0, "optimizer": "sgd", "layers": 1}
    assert points[-1] == {"optimizer": "rmsprop", "layers": 3, "width2": 64, "width3": 64}
    assert [grid_point(spec, i) for i in (0, 17, VALID - 1)] == \
        [points[0], points[17], points[-1]]
    with pytest.raises(IndexError):
        grid_point(spec, VALID)
    assert [p for _, p in planned_sets(spec)] == points
    assert [p for _, p in planned_sets(grid(trials=5))] == points[:5]


def test_conditional_grid_size_counts_without_listing_and_stops_at_the_cap() -> None:
    wide = {"family": {"type": "categorical", "choices": ["a", "b"]},
            **{f"a{k}": {"type": "int", "low": 0, "high": 9, "when": {"family": "a"}}
               for k in range(6)},
            "b0": {"type": "int", "low": 0, "high": 9, "when": {"family": "b"}}}
    spec = make_spec(method="random", trials=3, parameters=wide)
    assert grid_size_of(spec.parameters) == 10**6 + 10
    assert grid_size_of(spec.parameters, cap=1000) > 1000
    with pytest.raises(SpecError, match="the grid has more than 100,000 valid points"):
        make_spec(method="grid", parameters=wide)


def test_random_sets_stay_a_pure_function_of_seed_and_index() -> None:
    spec = make_spec(method="random", parameters=SPACE, trials=40)
    sets = [random_point(spec, i) for i in range(40)]
    assert sets == [random_point(spec, i) for i in range(40)]
    assert all(contains(spec, s) for s in sets)
    assert {s["optimizer"] for s in sets} == {"sgd", "adam", "rmsprop"}
    assert any("nesterov" in s for s in sets) and any("width3" in s for s in sets)
    # The unconditional parameters draw exactly what they would without the conditions.
    plain = make_spec(method="random", trials=40, parameters={
        k: {x: y for x, y in v.items() if x != "when"} for k, v in SPACE.items()})
    assert [s["layers"] for s in sets] == [random_point(plain, i)["layers"] for i in range(40)]


def test_qmc_sets_drop_inactive_parameters() -> None:
    spec = make_spec(method="qmc", parameters=SPACE, trials=16)
    sets = [p for _, p in planned_sets(spec)]
    assert all(contains(spec, s) for s in sets)
    assert any("momentum" not in s for s in sets) and any("momentum" in s for s in sets)


def test_contains_wants_exactly_the_active_parameters() -> None:
    spec = grid()
    assert contains(spec, {"optimizer": "adam", "layers": 1})
    assert not contains(spec, {"optimizer": "adam", "layers": 1, "momentum": 0.0})
    assert not contains(spec, {"optimizer": "sgd", "layers": 1})  # momentum missing
    assert not contains(spec, {"optimizer": "adam", "layers": 2})  # width2 missing


@pytest.mark.parametrize(("when", "field", "message"), [
    ({"optimizer": []}, "parameters.momentum.when.optimizer",
     "expected a value or a non-empty list of values"),
    ({}, "parameters.momentum.when", "expected {parameter: value}"),
    ({"momentum": 0.9}, "parameters.momentum.when.momentum",
     "'momentum' cannot depend on itself"),
    ({"optimizer": [["sgd"]]}, "parameters.momentum.when.optimizer[0]",
     "expected a value, got a list"),
    ({"layers": "2"}, "parameters.momentum.when.layers", "'layers' never takes '2'"),
    ({"optimizer": "sgd", "layers": 7}, "parameters.momentum.when.layers",
     "'layers' never takes 7 (int from 1 to 3)"),
])
def test_bad_conditions_name_their_field(when: Any, field: str, message: str) -> None:
    space = {**SPACE, "momentum": {**SPACE["momentum"], "when": when}}
    with pytest.raises(SpecError) as info:
        make_spec(method="grid", parameters=space)
    assert info.value.field == field
    assert message in info.value.message


def test_a_longer_cycle_is_named_in_full() -> None:
    space = {"a": {"type": "categorical", "choices": ["x"], "when": {"c": "z"}},
             "b": {"type": "categorical", "choices": ["y"], "when": {"a": "x"}},
             "c": {"type": "categorical", "choices": ["z"], "when": {"b": "y"}}}
    with pytest.raises(SpecError, match="conditions form a cycle: a -> c -> b -> a"):
        make_spec(method="random", parameters=space)


def test_tpe_models_a_conditional_space_with_group_unless_told_otherwise() -> None:
    from trial_runner import runner

    sampler = runner.make_sampler(make_spec(method="tpe", parameters=SPACE), 0)
    assert sampler._group is True and sampler._multivariate is True  # noqa: SLF001
    plain = runner.make_sampler(make_spec(method="tpe"), 0)
    assert plain._group is False  # noqa: SLF001
    off = make_spec(method="tpe", parameters=SPACE, sampler={"group": False})
    assert runner.make_sampler(off, 0)._group is False  # noqa: SLF001
    assert len(off.warnings) == 1 and "without group samples the conditional" in off.warnings[0]


def test_the_grid_points_of_an_unconditional_spec_do_not_move() -> None:
    spec = make_spec()
    assert list(itertools.islice((p for _, p in planned_sets(spec)), 3)) == [
        grid_point(spec, i) for i in range(3)]


def test_the_documented_example_is_a_valid_conditional_space() -> None:
    import re

    import yaml

    page = (REPO / "docs" / "spec.md").read_text()
    section = page.split("## Conditional parameters", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    space = yaml.safe_load(block.group(1))["parameters"]
    spec = make_spec(method="random", parameters=space, trials=50)
    sets = [p for _, p in planned_sets(spec)]
    assert spec.is_conditional and all(contains(spec, p) for p in sets)
    assert any("nesterov" in p for p in sets) and any("width3" in p for p in sets)
