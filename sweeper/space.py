"""Parameters -> Optuna distributions, grid enumeration and seeded random sets. All pure."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from sweeper.spec.conditions import dependency_order, drop_inactive, is_active
from sweeper.spec.grid import clean_point, grid_size_of, grid_values
from sweeper.spec.model import Parameter, SweepSpec
from sweeper.spec.seeds import index_seed


def distribution(p: Parameter) -> BaseDistribution:
    if p.values is not None:
        return CategoricalDistribution(p.values)
    if p.choices is not None:
        return CategoricalDistribution(p.choices)
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return IntDistribution(int(p.low), int(p.high), log=p.log, step=int(p.step or 1))
    return FloatDistribution(float(p.low), float(p.high), log=p.log,
                             step=float(p.step) if p.step is not None else None)


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    return {p.name: distribution(p) for p in spec.parameters}


def grid_size(spec: SweepSpec) -> int:
    return grid_size_of(spec.parameters)


def conditional_grid(params: tuple[Parameter, ...]) -> Iterator[dict[str, Any]]:
    """The valid points of a conditional grid, each once: parameters are decided in
    dependency order (YAML order otherwise), the last fastest, and an inactive parameter is
    left out rather than enumerated, so no two points differ only in an inactive parameter."""
    order = dependency_order(params)
    assigned: dict[str, Any] = {}

    def walk(k: int) -> Iterator[dict[str, Any]]:
        if k == len(order):
            yield {p.name: assigned[p.name] for p in params if p.name in assigned}
            return
        p = order[k]
        if not is_active(p, assigned):
            yield from walk(k + 1)
            return
        for value in grid_values(p):
            assigned[p.name] = value
            yield from walk(k + 1)
        del assigned[p.name]

    return walk(0)


def grid_point(spec: SweepSpec, index: int) -> dict[str, Any]:
    """Point ``index`` of the Cartesian product, YAML parameter order, last parameter fastest
    (the order of ``itertools.product``), computed by mixed-radix decoding without enumerating.
    A conditional grid's point ``index`` is the index-th of :func:`conditional_grid`."""
    if spec.is_conditional:
        if index >= 0:
            for found in itertools.islice(conditional_grid(spec.parameters), index, None):
                return found
        raise IndexError(f"grid index {index} out of range 0..{grid_size(spec) - 1}")
    axes = [grid_values(p) for p in spec.parameters]
    size = math.prod(len(a) for a in axes)
    if not 0 <= index < size:
        raise IndexError(f"grid index {index} out of range 0..{size - 1}")
    point: dict[str, Any] = {}
    for p, axis in zip(reversed(spec.parameters), reversed(axes), strict=True):
        index, digit = divmod(index, len(axis))
        point[p.name] = axis[digit]
    return {p.name: point[p.name] for p in spec.parameters}


def random_point(spec: SweepSpec, index: int) -> dict[str, Any]:
    """Set ``index`` of a random sweep: a pure function of (seed, index), independent of how many
    sets exist or which machine asks, so any runner can recompute and check it."""
    rng = random.Random(index_seed(spec.seed, index))
    # Every parameter is drawn, active or not, so that set i of a spec does not shift when a
    # condition changes which parameters exist; then the inactive ones are dropped.
    return drop_inactive(spec.parameters, {p.name: _sample(p, rng) for p in spec.parameters})


def _sample(p: Parameter, rng: random.Random) -> Any:
    if p.values is not None:
        return p.values[rng.randrange(len(p.values))]
    if p.choices is not None:
        return p.choices[rng.randrange(len(p.choices))]
    assert p.low is not None and p.high is not None
    if p.type == "int":
        step = int(p.step or 1)
        if p.log:
            value = math.exp(rng.uniform(math.log(p.low - 0.5), math.log(p.high + 0.5)))
            return int(min(max(round(value), p.low), p.high))
        return int(p.low) + step * rng.randrange((int(p.high) - int(p.low)) // step + 1)
    if p.step is not None:
        n = round((p.high - p.low) / p.step)
        return clean_point(p.low + p.step * rng.randrange(n + 1), p.high)
    if p.log:
        return min(math.exp(rng.uniform(math.log(p.low), math.log(p.high))), p.high)
    return rng.uniform(p.low, p.high)


def planned_sets(spec: SweepSpec, start: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, params) for indexes ``start``.. of a grid, random or qmc sweep (a grown sweep
    enqueues only its new ones); nothing for adaptive ones. Set i never depends on
    ``trials``, so growing a sweep keeps every planned set it had."""
    if spec.method == "grid" and spec.is_conditional:
        points = itertools.islice(conditional_grid(spec.parameters), start, spec.trials)
        yield from zip(range(start, spec.trials), points, strict=False)
    elif spec.method == "grid":
        for i in range(start, spec.trials):
            yield i, grid_point(spec, i)
    elif spec.method == "random":
        for i in range(start, spec.trials):
            yield i, random_point(spec, i)
    elif spec.method == "qmc":
        from sweeper.qmc import qmc_sets

        chunk = 4096  # one engine per chunk: bulk, without holding a huge plan twice
        for first in range(start, spec.trials, chunk):
            for k, params in enumerate(qmc_sets(spec, first, min(chunk, spec.trials - first))):
                yield first + k, params
