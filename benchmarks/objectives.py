"""Search-quality objectives for sweeper's runners: the synthetic test functions with an
optional fixed ``delay`` (seconds) first, so that W parallel workers really overlap, as trials
that train a model do (with instant trials, a runner rarely sees the others in flight and the
cost of parallelism would be understated)."""

from __future__ import annotations

import time

from trial_runner.context import TrialContext
from trial_runner.examples import synthetic


def _delay(ctx: TrialContext) -> None:
    delay = float(ctx.params.get("delay", 0.0))
    if delay > 0:
        time.sleep(delay)


def sphere(ctx: TrialContext) -> float:
    _delay(ctx)
    return synthetic.sphere(ctx)


def rosenbrock(ctx: TrialContext) -> float:
    _delay(ctx)
    return synthetic.rosenbrock(ctx)


def rastrigin(ctx: TrialContext) -> float:
    _delay(ctx)
    return synthetic.rastrigin(ctx)


def styblinski_tang(ctx: TrialContext) -> float:
    _delay(ctx)
    return synthetic.styblinski_tang(ctx)


def zdt1(ctx: TrialContext) -> dict[str, float]:
    _delay(ctx)
    return synthetic.zdt1(ctx)


def family(ctx: TrialContext) -> float:
    _delay(ctx)
    return synthetic.family(ctx)
