"""Parameters -> Optuna distributions, grid enumeration and seeded random sets. All pure."""

from __future__ import annotations

import hashlib
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


def grid_size_of(params: Iterable[Parameter]) -> int:
    """Number of grid points (exact Python int; may be astronomically large; 0 when a parameter
    is continuous). Counts what ``grid_values`` would list, without listing it."""
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


def grid_point(spec: SweepSpec, index: int) -> dict[str, Any]:
    """Point ``index`` of the Cartesian product, YAML parameter order, last parameter fastest
    (the order of ``itertools.product``), computed by mixed-radix decoding without enumerating."""
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
    return {p.name: _sample(p, rng) for p in spec.parameters}


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


def planned_sets(spec: SweepSpec) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, params) for every index of a grid, random or qmc sweep; nothing for adaptive
    ones."""
    if spec.method == "grid":
        for i in range(spec.trials):
            yield i, grid_point(spec, i)
    elif spec.method == "random":
        for i in range(spec.trials):
            yield i, random_point(spec, i)
    elif spec.method == "qmc":
        from sweeper.qmc import qmc_sets

        chunk = 4096  # one engine per chunk: bulk, without holding a huge plan twice
        for start in range(0, spec.trials, chunk):
            for k, params in enumerate(qmc_sets(spec, start, min(chunk, spec.trials - start))):
                yield start + k, params


def contains(spec: SweepSpec, params: dict[str, Any]) -> bool:
    """Whether params is exactly one point of the space (every parameter, nothing else)."""
    dists = distributions(spec)
    if set(params) != set(dists):
        return False
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
