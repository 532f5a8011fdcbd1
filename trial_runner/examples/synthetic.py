"""Objectives with known optima and fixed durations: fast tests, benchmarks, demos.

No torch: these import in milliseconds, so they measure the orchestration, not the model.
"""

from __future__ import annotations

import itertools
import math
import time

from trial_runner.context import TrialContext


def _xs(ctx: TrialContext) -> list[float]:
    return [float(v) for k, v in sorted(ctx.params.items()) if k.startswith("x")]


def sphere(ctx: TrialContext) -> float:
    """sum x_i^2, optimum 0 at the origin."""
    return sum(x * x for x in _xs(ctx))


def rosenbrock(ctx: TrialContext) -> float:
    """Optimum 0 at (1, ..., 1)."""
    xs = _xs(ctx)
    return sum(100 * (b - a * a) ** 2 + (1 - a) ** 2 for a, b in itertools.pairwise(xs))


def rastrigin(ctx: TrialContext) -> float:
    """Optimum 0 at the origin; many local minima."""
    xs = _xs(ctx)
    return 10 * len(xs) + sum(x * x - 10 * math.cos(2 * math.pi * x) for x in xs)


def styblinski_tang(ctx: TrialContext) -> float:
    """Optimum -39.16617 * d at x_i = -2.903534."""
    return sum(x**4 - 16 * x**2 + 5 * x for x in _xs(ctx)) / 2


def zdt1(ctx: TrialContext) -> dict[str, float]:
    """Two objectives to minimise over x_i in [0, 1] (Zitzler, Deb and Thiele's ZDT1): the
    Pareto front is f2 = 1 - sqrt(f1), reached when every x_i but the first is 0."""
    xs = _xs(ctx)
    f1 = xs[0]
    g = 1 + 9 * sum(xs[1:]) / max(1, len(xs) - 1)
    return {"f1": f1, "f2": g * (1 - math.sqrt(f1 / g))}


#: ``family``'s value -> (the prefix of its parameters, its function, the value added to it).
#: Each family's best differs, so the choice matters; rastrigin's (0, at the origin) is best
#: and hardest to find.
FAMILIES = {"sphere": ("sp", "sphere", 2.0), "rosenbrock": ("ro", "rosenbrock", 1.0),
            "rastrigin": ("ra", "rastrigin", 0.0)}


def family(ctx: TrialContext) -> float:
    """A conditional space: ``family`` picks which test function scores the trial, and so which
    parameters the trial has (``sp1, sp2`` for sphere, ``ro1..ro3``, ``ra1..ra3``; declared
    with ``when: {family: ...}``). Optimum 0 (rastrigin at the origin)."""
    prefix, name, offset = FAMILIES[ctx.params["family"]]
    xs = [float(v) for k, v in sorted(ctx.params.items()) if k.startswith(prefix)]
    fn = {"sphere": _sphere, "rosenbrock": _rosenbrock, "rastrigin": _rastrigin}[name]
    return fn(xs) + offset


def _sphere(xs: list[float]) -> float:
    return sum(x * x for x in xs)


def _rosenbrock(xs: list[float]) -> float:
    return sum(100 * (b - a * a) ** 2 + (1 - a) ** 2 for a, b in itertools.pairwise(xs))


def _rastrigin(xs: list[float]) -> float:
    return 10 * len(xs) + sum(x * x - 10 * math.cos(2 * math.pi * x) for x in xs)


def define_by_run(ctx: TrialContext) -> float:
    """An Optuna objective ported to sweeper: ``layers`` and ``optimizer`` come from the YAML,
    the rest is asked for in code, as Optuna's ``trial.suggest_*`` would be."""
    widths = [ctx.suggest_int(f"width{k}", 8, 128, log=True) for k in range(ctx.params["layers"])]
    loss = sum((math.log2(w) - 5) ** 2 for w in widths) / len(widths)
    if ctx.params["optimizer"] == "sgd":
        momentum = ctx.suggest_float("momentum", 0.0, 0.99)
        loss += (momentum - 0.9) ** 2
    else:
        loss += 0.05
    return loss + 0.1 * ctx.params["layers"]


OPTIMA = {"sphere": 0.0, "rosenbrock": 0.0, "rastrigin": 0.0,
          "styblinski_tang": -39.16616570377142}


def sleep(ctx: TrialContext) -> float:
    """Sleeps ``duration`` seconds (fixed), reporting ``steps`` times; returns x-based loss.
    Fixed-duration work so that overhead measurements do not depend on CPU count."""
    duration = float(ctx.params.get("duration", 0.5))
    steps = int(ctx.params.get("steps", 1))
    value = sphere(ctx)
    for step in range(steps):
        time.sleep(duration / steps)
        ctx.report(step, loss=value + (steps - step - 1))
    return value


def quadratic(ctx: TrialContext) -> dict[str, float]:
    """(x - 2)^2 + (y + 1)^2 style loss over whatever numeric params exist, with a few reports:
    a cheap stand-in for training in tests."""
    p = ctx.params
    loss = sum((float(v) - 0.5) ** 2 for k, v in sorted(p.items())
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "epochs")
    epochs = int(p.get("epochs", 3))
    delay = float(p.get("delay", 0.0))
    for epoch in range(epochs):
        if delay:
            time.sleep(delay)
        ctx.report(epoch, loss=loss + (epochs - epoch), accuracy=1.0 / (1.0 + loss))
    if p.get("save_artifact"):  # fixed param: exercise artifacts without torch
        import json

        ctx.save_artifact(json.dumps({"params": p, "loss": loss}).encode(), name="result.json")
    return {"loss": loss, "accuracy": 1.0 / (1.0 + loss)}
