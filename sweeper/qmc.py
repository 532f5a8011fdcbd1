"""``method: qmc``: set i is point i of a low-discrepancy sequence (Sobol by default, or Halton),
mapped onto the parameters. Like a random sweep, set i is a pure function of (seed, i) and
the sets are enqueued up front, so ``plan`` and the dashboard show them before anything runs.

Point i of scipy's engines is the same whether the sequence is drawn from 0 or fast-forwarded
to i, and a scrambled engine is seeded from the spec's seed alone, so any runner or command
can recompute any set. ``scramble: true`` (the default here) randomises the sequence by the
seed, as Optuna's QMCSampler does when asked; ``scramble: false`` gives the textbook sequence,
the same for every seed.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from sweeper.spec.model import Parameter, Scalar, SweepSpec

DEFAULT_QMC_TYPE = "sobol"
DEFAULT_SCRAMBLE = True


def _engine(spec: SweepSpec) -> Any:
    import numpy as np
    from scipy.stats import qmc

    kind = spec.sampler.get("qmc_type", DEFAULT_QMC_TYPE)
    scramble = bool(spec.sampler.get("scramble", DEFAULT_SCRAMBLE))
    cls = {"sobol": qmc.Sobol, "halton": qmc.Halton}[kind]
    return cls(len(spec.parameters), scramble=scramble, rng=np.random.default_rng(spec.seed))


def unit_points(spec: SweepSpec, start: int, count: int) -> list[list[float]]:
    """Points ``start .. start+count-1`` of the spec's sequence, in the unit cube."""
    engine = _engine(spec)
    if start:
        engine.fast_forward(start)
    with warnings.catch_warnings():
        # scipy warns that Sobol's balance needs 2**m points; a sweep's size is the user's.
        warnings.simplefilter("ignore")
        return [list(map(float, row)) for row in engine.random(count)]


def from_unit(p: Parameter, u: float) -> Scalar:
    """Map u in [0, 1) onto parameter ``p``: uniform in its (log) range, its steps, or its list."""
    u = min(max(u, 0.0), math.nextafter(1.0, 0.0))
    finite = p.values if p.values is not None else p.choices
    if finite is not None:
        return finite[int(u * len(finite))]
    assert p.low is not None and p.high is not None
    if p.type == "int":
        step = int(p.step or 1)
        if p.log:
            lo, hi = math.log(p.low - 0.5), math.log(p.high + 0.5)
            return int(min(max(round(math.exp(lo + u * (hi - lo))), p.low), p.high))
        n = (int(p.high) - int(p.low)) // step + 1
        return int(p.low) + step * int(u * n)
    if p.step is not None:
        n = round((p.high - p.low) / p.step) + 1
        return min(round(p.low + p.step * int(u * n), 12), p.high)
    if p.log:
        lo, hi = math.log(p.low), math.log(p.high)
        return min(math.exp(lo + u * (hi - lo)), p.high)
    return p.low + u * (p.high - p.low)


def qmc_sets(spec: SweepSpec, start: int = 0, count: int | None = None) -> list[dict[str, Any]]:
    """Sets ``start .. start+count-1`` (default: to the end of the sweep)."""
    from sweeper.spec.conditions import drop_inactive

    count = spec.trials - start if count is None else count
    return [drop_inactive(spec.parameters, {p.name: from_unit(p, u)
                                            for p, u in zip(spec.parameters, row, strict=True)})
            for row in unit_points(spec, start, count)]
