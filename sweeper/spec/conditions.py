"""Conditional parameters (``when:``): which parameters a trial has, and the order to decide them.

``momentum: {type: float, low: 0, high: 0.99, when: {optimizer: sgd}}`` exists in a trial
exactly when ``optimizer`` exists and is ``sgd``; a list (``when: {layers: [2, 3]}``) means any
of those values, several keys mean all of them. Conditions may chain; they may not loop.

Pure functions shared by the validator, grid / random / qmc planning and the runner, which
suggests in :func:`dependency_order` so that Optuna sees a define-by-run space.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sweeper.spec.checks import Checks, clip, kind_of
from sweeper.spec.model import Parameter, Scalar
from sweeper.spec.yamldoc import Path_


def is_active(p: Parameter, values: Mapping[str, Any]) -> bool:
    """Whether ``p`` exists given the values decided so far (an absent parent: inactive)."""
    return all(parent in values and values[parent] in allowed for parent, allowed in p.when)


def dependency_order(params: Sequence[Parameter]) -> tuple[Parameter, ...]:
    """The parameters with every condition's parent before its children, otherwise in YAML
    order (an unconditional spec keeps its order exactly). Assumes no cycle (validated)."""
    if not any(p.when for p in params):  # planning and every trial call this: the usual case
        return tuple(params)
    placed: set[str] = set()
    out: list[Parameter] = []
    rest = list(params)
    while rest:
        for k, p in enumerate(rest):
            if all(parent in placed for parent, _ in p.when):
                out.append(p)
                placed.add(p.name)
                del rest[k]
                break
        else:  # pragma: no cover - the validator refuses cycles
            raise ValueError("conditions form a cycle")
    return tuple(out)


def drop_inactive(params: Sequence[Parameter], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (one per parameter) without the parameters whose conditions do not hold, in
    the parameters' order."""
    if not any(p.when for p in params):
        return {p.name: values[p.name] for p in params if p.name in values}
    kept: dict[str, Any] = {}
    for p in dependency_order(params):
        if p.name in values and is_active(p, kept):
            kept[p.name] = values[p.name]
    return {p.name: kept[p.name] for p in params if p.name in kept}


# --------------------------------------------------------------------------- validation


def parse_when(v: Checks, value: Any, path: Path_) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """The raw ``when:`` mapping: parent name -> one value or a list of values."""
    m = v.mapping(value, path)
    if not m:
        raise v.err(path, "expected {parameter: value} or {parameter: [values]}, got an empty "
                          "mapping")
    out = []
    for parent, allowed in m.items():
        items = allowed if isinstance(allowed, list) else [allowed]
        if not items:
            raise v.err((*path, parent), "expected a value or a non-empty list of values")
        for i, x in enumerate(items):
            if x is not None and not isinstance(x, (str, int, float, bool)):
                where = (*path, parent, i) if isinstance(allowed, list) else (*path, parent)
                raise v.err(where, f"expected a value, got {kind_of(x)}")
        out.append((str(parent), tuple(items)))
    return tuple(out)


def check_conditions(v: Checks, params: Iterable[Parameter], path: Path_) -> None:
    """Each condition names another categorical or int parameter and values it can take, and
    no chain of conditions loops back on itself."""
    by_name = {p.name: p for p in params}
    for p in by_name.values():
        for parent, allowed in p.when:
            where = (*path, p.name, "when", parent)
            if parent == p.name:
                raise v.err(where, f"{p.name!r} cannot depend on itself")
            if parent not in by_name:
                close = difflib.get_close_matches(parent, sorted(by_name), n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else \
                    f"; parameters: {', '.join(by_name)}"
                raise v.err(where, f"condition on unknown parameter {parent!r}{hint}")
            other = by_name[parent]
            can = _possible_values(other)
            if can is None:
                raise v.err(where, f"a condition needs a categorical or int parameter (or one "
                                   f"with values:); {parent!r} is a float range")
            for x in allowed:
                if not any(x == c and type(x) is type(c) for c in can):
                    raise v.err(where, f"{parent!r} never takes {clip(x)} "
                                       f"({_describe(other, can)})")
    _check_cycles(v, by_name, path)


def _possible_values(p: Parameter) -> Sequence[Scalar] | None:
    if p.values is not None:
        return p.values
    if p.choices is not None:
        return p.choices
    if p.type == "int":
        assert p.low is not None and p.high is not None
        return range(int(p.low), int(p.high) + 1, int(p.step or 1))
    return None


def _describe(p: Parameter, can: Sequence[Scalar]) -> str:
    if isinstance(can, range):
        step = f" step {can.step}" if can.step != 1 else ""
        return f"int from {can.start} to {can.stop - 1}{step}"
    return "values: " + ", ".join(map(str, can))


def _check_cycles(v: Checks, by_name: Mapping[str, Parameter], path: Path_) -> None:
    state: dict[str, int] = {}  # 1: on the current chain, 2: known to end

    def visit(name: str, chain: list[str]) -> None:
        state[name] = 1
        for parent, _ in by_name[name].when:
            if state.get(parent) == 1:
                loop = [*chain[chain.index(parent):], name, parent] if parent in chain \
                    else [name, parent]
                raise v.err((*path, name, "when", parent),
                            "conditions form a cycle: " + " -> ".join(_dedupe(loop)))
            if state.get(parent) is None:
                visit(parent, [*chain, name])
        state[name] = 2

    for name in by_name:
        if state.get(name) is None:
            visit(name, [])


def _dedupe(loop: list[str]) -> list[str]:
    out: list[str] = []
    for n in loop:
        if not out or out[-1] != n:
            out.append(n)
    return out
