"""Parameters -> Optuna distributions, grid enumeration and seeded random sets. All pure."""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

# The model module, not the package: the package's validator calls grid_size_of from here.
from sweeper.spec.conditions import dependency_order, drop_inactive, is_active
from sweeper.spec.model import Parameter, Scalar, SweepSpec
from sweeper.study._optuna_compat import distribution_contains


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


def grid_values(p: Parameter) -> tuple[Scalar, ...]:
    """The finite points of one parameter, in order (raises ValueError for a continuous float)."""
    if p.values is not None:
        return p.values
    if p.choices is not None:
        return p.choices
    assert p.low is not None and p.high is not None
    if p.type == "int":
        return tuple(range(int(p.low), int(p.high) + 1, int(p.step or 1)))
    if p.step is None:
        raise ValueError(f"parameter {p.name} is continuous; a grid needs step or values")
    n = round((p.high - p.low) / p.step)
    # Round away float drift (0.1 * 3 = 0.30000000000000004) so values print and compare cleanly.
    return tuple(_clean(p.low + k * p.step, p.high) for k in range(n + 1))


def _clean(x: float, high: float) -> float:
    return min(round(x, 12), high)


def grid_size_of(params: Iterable[Parameter], cap: int | None = None) -> int:
    """Number of grid points (exact Python int; may be astronomically large; 0 when a parameter
    is continuous). Counts what ``grid_values`` would list, without listing it. A conditional
    grid counts only valid points, walking the conditions' branches: with ``cap``, it stops
    once the count passes ``cap`` and returns a number above it."""
    params = tuple(params)
    if any(p.when for p in params):
        if not all(p.is_finite for p in params):
            return 0
        return _conditional_size(dependency_order(params), cap)
    size = 1
    for p in params:
        if p.values is not None:
            size *= len(p.values)
        elif p.choices is not None:
            size *= len(p.choices)
        elif p.type == "int":
            assert p.low is not None and p.high is not None and p.step is not None
            size *= (int(p.high) - int(p.low)) // int(p.step) + 1
        elif p.step is not None:
            assert p.low is not None and p.high is not None
            size *= round((p.high - p.low) / p.step) + 1
        else:
            return 0
    return size


def grid_size(spec: SweepSpec) -> int:
    return grid_size_of(spec.parameters)


def _conditional_size(order: tuple[Parameter, ...], cap: int | None) -> int:
    """Valid points of a conditional grid. Only parameters that others depend on branch; the
    rest multiply. Each branch holds at least one point, so with ``cap`` the walk is bounded."""
    controllers = {parent for p in order for parent, _ in p.when}
    total = 0

    def walk(k: int, assigned: dict[str, Any], factor: int) -> None:
        nonlocal total
        if cap is not None and total > cap:
            return
        if k == len(order):
            total += factor
            return
        p = order[k]
        if not is_active(p, assigned):
            walk(k + 1, assigned, factor)
        elif p.name not in controllers:
            walk(k + 1, assigned, factor * len(grid_values(p)))
        else:
            for value in grid_values(p):
                assigned[p.name] = value
                walk(k + 1, assigned, factor)
            del assigned[p.name]

    walk(0, {}, 1)
    return total


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


def index_seed(seed: int, index: int) -> int:
    """A 32-bit seed (what numpy-based samplers accept) that is a pure function of
    (seed, index), stable across Python versions and machines."""
    digest = hashlib.sha256(f"sweeper:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


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
        return _clean(p.low + p.step * rng.randrange(n + 1), p.high)
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


def contains(spec: SweepSpec, params: dict[str, Any]) -> bool:
    """Whether params is exactly one point of the space (every active parameter, nothing
    else)."""
    dists = distributions(spec)
    if set(params) != set(drop_inactive(spec.parameters, params)) or \
            not set(params) <= set(dists):
        return False
    missing = [p for p in spec.parameters if p.name not in params
               and is_active(p, params)]
    if missing:
        return False
    dists = {n: d for n, d in dists.items() if n in params}
    try:
        return all(distribution_contains(d, params[n]) for n, d in dists.items())
    except (ValueError, TypeError):
        return False


def format_params(params: dict[str, Any], names: Sequence[str] | None = None) -> str:
    names = list(names) if names is not None else list(params)
    return ", ".join(f"{n}={_fmt(params[n])}" for n in names if n in params)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
