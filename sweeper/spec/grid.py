"""A grid over the spec's parameters: each parameter's finite points and the number of points,
without listing them. Pure functions of the parameters, shared by the validator (a grid's
default ``trials``, its size limit, the warning for a grid cut short) and ``sweeper.space``
(grid and random planning)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sweeper.spec.conditions import dependency_order, is_active
from sweeper.spec.model import Parameter, Scalar


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
    return tuple(clean_point(p.low + k * p.step, p.high) for k in range(n + 1))


def clean_point(x: float, high: float) -> float:
    """A point ``low + k * step`` of a stepped float without float drift, never past ``high``."""
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
