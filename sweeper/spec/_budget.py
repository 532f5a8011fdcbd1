"""The ``budget:`` and ``cost:`` sections: what a sweep may spend (GPU-hours, CPU-hours,
steps or money) and the price that turns its accounting into money."""

from __future__ import annotations

from typing import Any

from sweeper.spec._metrics import format_may_name
from sweeper.spec.checks import Checks, clip
from sweeper.spec.model import BUDGET_UNITS, ON_EXHAUSTED, BudgetSpec, CostSpec, TrialSpec
from sweeper.spec.yamldoc import Path_

BUDGET_KEYS = (*BUDGET_UNITS, "on_exhausted")
COST_KEYS = ("per_gpu_hour", "per_cpu_hour", "currency")


def cost_spec(v: Checks, value: Any, path: Path_) -> CostSpec | None:
    """``cost:``: prices of a GPU-hour and a CPU-hour (>= 0, one of them > 0)."""
    if value is None:
        return None
    m = v.mapping(value, path, COST_KEYS)
    prices = {}
    for key in ("per_gpu_hour", "per_cpu_hour"):
        price = float(v.number(m.get(key, 0), (*path, key)))
        if price < 0:
            raise v.err((*path, key), f"must be >= 0, got {price:g}")
        prices[key] = price
    if not any(prices.values()):
        raise v.err(path, "give a price: per_gpu_hour or per_cpu_hour (> 0)")
    currency = v.string(m.get("currency", "USD"), (*path, "currency")).strip()
    return CostSpec(currency=currency, **prices)


def budget_spec(v: Checks, value: Any, path: Path_, *, cost: CostSpec | None,
                trial: TrialSpec) -> BudgetSpec:
    """``budget:``: exactly one unit, a positive amount; ``cost`` needs a price, and a unit
    the trials cannot spend (GPU-hours of CPU trials, CPU-hours of GPU trials) is refused."""
    if value is None:
        return BudgetSpec()
    m = v.mapping(value, path, BUDGET_KEYS)
    units = [u for u in BUDGET_UNITS if u in m]
    if len(units) != 1:
        given = f", not {' and '.join(units)}" if units else ""
        raise v.err(path, f"give one of {', '.join(BUDGET_UNITS)}{given}")
    unit = units[0]
    where = (*path, unit)
    if unit == "steps":
        amount: float | int = v.integer(m[unit], where, None)
    else:
        amount = float(v.number(m[unit], where))
    if amount <= 0:
        raise v.err(where, f"must be > 0, got {amount:g}")
    if unit == "cost" and cost is None:
        raise v.err(where, "a cost budget needs a price: set cost: {per_gpu_hour: ..., "
                           "per_cpu_hour: ..., currency: ...}")
    gpus = trial.resources.gpu
    if unit == "gpu_hours" and not gpus:
        raise v.err(where, "the trials use no GPU (trial.resources.gpu is 0), so no "
                           "GPU-hours are ever spent: use cpu_hours")
    if unit == "cpu_hours" and gpus:
        raise v.err(where, f"the trials use GPUs (trial.resources.gpu: {gpus:g}), whose time "
                           "counts as GPU-hours: use gpu_hours")
    steps_reported(v, unit, trial, where)
    on_exhausted = v.choice(m.get("on_exhausted", "finish"), (*path, "on_exhausted"),
                            ON_EXHAUSTED)
    return BudgetSpec(**{unit: amount}, on_exhausted=on_exhausted)  # type: ignore[arg-type]


def steps_reported(v: Checks, unit: str, trial: TrialSpec, where: Path_) -> None:
    """A ``steps`` budget of a command whose ``metrics.format`` can never read a metric named
    ``step`` is never spent (the command's reports are its ``step`` metric): refused. Whether
    an entrypoint reports steps is decided where it is loaded (``sweeper.step_reports``)."""
    fmt = trial.metrics.format
    if unit != "steps" or trial.command is None or fmt is None:
        return
    if not format_may_name(fmt, "step"):
        raise v.err(where, f"trial.metrics.format {clip(fmt)} never reads a metric named "
                           "'step' (its name group cannot match it), so the trials report no "
                           "steps and a steps budget is never spent: let the name group match "
                           "step, or give the budget in gpu_hours or cpu_hours")


def budget_with_trials(v: Checks, budget: BudgetSpec, trials: int, parallelism: int) -> None:
    """A budget beside ``trials`` needs at least ``parallelism`` of them."""
    if budget.enabled and trials < parallelism:
        raise v.err(("trials",), f"{trials} trials with a budget and parallelism "
                                 f"{parallelism}: fewer trials than run at once; raise trials "
                                 "or lower parallelism")
