"""The ``parameters:`` section: one function per parameter kind (a ``values`` list, categorical,
int, float), each checking exactly what Optuna's distribution for it would refuse later."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

from sweeper.spec.checks import PARAM_RE, Checks, clip, kind_of
from sweeper.spec.conditions import check_conditions, parse_when
from sweeper.spec.model import Parameter, Scalar
from sweeper.spec.yamldoc import Path_

PARAM_KINDS = ("float", "int", "categorical")
PARAM_KEYS = ("type", "low", "high", "step", "log", "choices", "values", "when")
#: Optuna stores every parameter value as a float: ints beyond 2**53 would be rounded.
_MAX_EXACT_INT = 2**53


def parameters(v: Checks, value: Any, path: Path_, method: str) -> tuple[Parameter, ...]:
    m = v.mapping(value, path)
    if not m:
        raise v.err(path, "at least one parameter is required")
    out = []
    for name, spec in m.items():
        p = (*path, name)
        if not PARAM_RE.match(name):
            raise v.err(p, f"parameter name {name!r} must be an identifier "
                           "(letters, digits, _; not starting with a digit)")
        param = parameter(v, name, spec, p)
        if method == "grid" and not param.is_finite:
            raise v.err(p, "grid needs a finite parameter: give a float a step or "
                           "explicit values: [...]")
        out.append(param)
    check_conditions(v, out, path)
    return tuple(out)


def parameter(v: Checks, name: str, value: Any, path: Path_) -> Parameter:
    m = v.mapping(value, path, PARAM_KEYS)
    when = parse_when(v, m["when"], (*path, "when")) if m.get("when") is not None else ()
    m = {k: x for k, x in m.items() if k != "when"}
    if m.get("values") is not None:
        return replace(_values_parameter(v, name, m, path), when=when)
    ptype = v.choice(v.require(m, "type", path), (*path, "type"), PARAM_KINDS)
    return replace(_BY_KIND[ptype](v, name, m, path), when=when)


def _values_parameter(v: Checks, name: str, m: dict[str, Any], path: Path_) -> Parameter:
    """``values: [...]``: an explicit finite list of any kind, sampled as categorical."""
    extra = [k for k in ("low", "high", "step", "log", "choices") if k in m]
    if extra:
        raise v.err((*path, extra[0]), f"{extra[0]!r} cannot be combined with values")
    vals = value_list(v, m["values"], (*path, "values"))
    ptype = m.get("type", "categorical")
    v.choice(ptype, (*path, "type"), PARAM_KINDS)
    for i, x in enumerate(vals):
        if ptype == "float" and (isinstance(x, bool) or not isinstance(x, (int, float))):
            raise v.err((*path, "values", i), f"expected a number, got {kind_of(x)}")
        if ptype == "int" and (isinstance(x, bool) or not isinstance(x, int)):
            raise v.err((*path, "values", i), f"expected an integer, got {kind_of(x)}")
    return Parameter(name, ptype, values=vals)


def _categorical_parameter(v: Checks, name: str, m: dict[str, Any], path: Path_) -> Parameter:
    extra = [k for k in ("low", "high", "step", "log") if k in m]
    if extra:
        raise v.err((*path, extra[0]), f"{extra[0]!r} does not apply to categorical")
    choices = value_list(v, v.require(m, "choices", path), (*path, "choices"))
    return Parameter(name, "categorical", choices=choices)


def _int_parameter(v: Checks, name: str, m: dict[str, Any], path: Path_) -> Parameter:
    low, high, log = _range(v, m, path, "int")
    if max(abs(low), abs(high)) > _MAX_EXACT_INT:
        raise v.err((*path, "high" if abs(high) > _MAX_EXACT_INT else "low"),
                    f"int bounds must be within +-{_MAX_EXACT_INT} (Optuna stores "
                    "parameter values as floats)")
    step = m.get("step")
    if step is None:
        return Parameter(name, "int", low=low, high=high, step=1, log=log)
    step = v.integer(step, (*path, "step"), 1)
    if log and step != 1:
        raise v.err((*path, "step"), "an int on a log scale needs step 1")
    if (high - low) % step:
        raise v.err((*path, "step"), f"step {step} does not fit the range [{low}, {high}]: "
                                     "high - low must be a multiple of step")
    return Parameter(name, "int", low=low, high=high, step=step, log=log)


def _float_parameter(v: Checks, name: str, m: dict[str, Any], path: Path_) -> Parameter:
    low, high, log = _range(v, m, path, "float")
    if not math.isfinite(float(high) - float(low)):
        raise v.err((*path, "high"), f"the range [{low}, {high}] is too wide: high - low "
                                     "overflows a float")
    step = m.get("step")
    if step is not None:
        step = float(_float_step(v, step, low, high, log, (*path, "step")))
    return Parameter(name, "float", low=float(low), high=float(high), step=step, log=log)


def _range(v: Checks, m: dict[str, Any], path: Path_, ptype: str
           ) -> tuple[Any, Any, bool]:
    """low, high and log of an int or float, checked against each other."""
    if "choices" in m:
        raise v.err((*path, "choices"), f"choices does not apply to type {ptype}; "
                                        "use type: categorical")
    low = v.number(v.require(m, "low", path), (*path, "low"))
    high = v.number(v.require(m, "high", path), (*path, "high"))
    log = v.boolean(m.get("log", False), (*path, "log"))
    if ptype == "int":
        low = v.integer(low, (*path, "low"))
        high = v.integer(high, (*path, "high"))
    if low >= high:
        raise v.err((*path, "low"), f"low ({low}) must be less than high ({high})")
    if log and low <= 0:
        raise v.err((*path, "low"), f"log scale needs low > 0, got {low}")
    return low, high, log


def _float_step(v: Checks, value: Any, low: float, high: float, log: bool, path: Path_
                ) -> float | int:
    step = v.number(value, path)
    if step <= 0:
        raise v.err(path, f"step must be > 0, got {step}")
    if log:
        raise v.err(path, "step and log: true cannot be combined for a float")
    if step > high - low:
        raise v.err(path, f"step {step} is larger than the range [{low}, {high}]")
    try:  # exact decimal arithmetic, as Optuna's FloatDistribution checks a step
        rest = (Decimal(str(high)) - Decimal(str(low))) % Decimal(str(step))
    except InvalidOperation:
        raise v.err(path, f"step {step} is too small for the range [{low}, {high}]") from None
    if rest != 0:
        raise v.err(path, f"step {step} does not fit the range [{low}, {high}]: high - low "
                          "must be a multiple of step")
    return step


def value_list(v: Checks, value: Any, path: Path_) -> tuple[Scalar, ...]:
    """``choices`` or ``values``: distinct scalars, as Optuna's CategoricalDistribution needs."""
    if not isinstance(value, list):
        raise v.err(path, f"expected a non-empty list, got {kind_of(value)}")
    if not value:
        raise v.err(path, "expected a non-empty list, got an empty list")
    out: list[Scalar] = []
    for i, x in enumerate(value):
        if x is not None and not isinstance(x, (str, int, float, bool)):
            raise v.err((*path, i), f"each entry must be a string, number, boolean or "
                                    f"null, got {kind_of(x)}")
        if isinstance(x, float) and not math.isfinite(x):
            raise v.err((*path, i), f"must be finite, got {x}")
        same = [o for o in out if x == o]  # Optuna finds a choice by ==: 1, 1.0, true clash
        if same:
            also = f" (equal to {same[0]!r})" if type(same[0]) is not type(x) else ""
            raise v.err((*path, i), f"duplicate value {clip(x)}{also}")
        out.append(x)
    return tuple(out)


_BY_KIND: dict[str, Callable[[Checks, str, dict[str, Any], Path_], Parameter]] = {
    "float": _float_parameter,
    "int": _int_parameter,
    "categorical": _categorical_parameter,
}
