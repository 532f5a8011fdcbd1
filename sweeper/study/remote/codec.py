"""JSON for the values the index store's operations take and return, driven by their type
hints (:mod:`sweeper.study.values`, :class:`sweeper.study.store.IndexStore`): dataclasses as
objects of their fields, tuples as lists, ``TrialState`` by name, a distribution as Optuna's
JSON, a spec as its normalised record, ``datetime`` in ISO form.

Decoding checks what it reads against the hint: a value of another type, a missing or an
unknown field is a :class:`WireError` (the server answers INVALID_ARGUMENT), never a crash or
a half-built value. Nothing here does I/O or imports grpc."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from optuna.distributions import BaseDistribution, distribution_to_json, json_to_distribution
from optuna.trial import TrialState

from sweeper.spec import SweepSpec, parse_spec_dict


class WireError(ValueError):
    """A message that does not decode to what its operation takes."""


def to_wire(value: Any, hint: Any) -> Any:
    """``value`` (of type ``hint``) as JSON-ready data."""
    if value is None or hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return to_wire(value, _optional_of(hint))
    if origin in (list, tuple, Sequence):
        return [to_wire(v, h) for v, h in zip(value, _item_hints(hint, len(value)), strict=True)]
    if origin in (dict, Mapping):
        return {k: to_wire(v, typing.get_args(hint)[1]) for k, v in value.items()}
    if hint is TrialState:
        return value.name
    if hint is BaseDistribution:
        return distribution_to_json(value)
    if hint is SweepSpec:
        return {"record": value.to_dict(), "base_dir": value.base_dir}
    if hint is datetime:
        return value.isoformat()
    if dataclasses.is_dataclass(hint):
        return {name: to_wire(getattr(value, name), h)
                for name, h in _fields(typing.cast(type, hint)).items()}
    return value


def from_wire(data: Any, hint: Any, where: str = "value") -> Any:
    """``data`` decoded as ``hint``; :class:`WireError` naming ``where`` if it is not one."""
    if hint is Any or (hint is type(None) and data is None):
        return data
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return None if data is None else from_wire(data, _optional_of(hint), where)
    if data is None:
        raise WireError(f"{where}: null where {_name(hint)} is expected")
    if origin in (list, tuple, Sequence):
        items = [from_wire(v, h, f"{where}[{k}]") for k, (v, h) in
                 enumerate(zip(_expect(data, list, where), _item_hints(hint, len(data)),
                               strict=True))]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping):
        return {_expect(k, str, where): from_wire(v, typing.get_args(hint)[1], f"{where}.{k}")
                for k, v in _expect(data, dict, where).items()}
    decode = _LEAVES.get(hint)
    if decode is not None:
        return decode(data, where)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _dataclass(data, hint, where)
    raise WireError(f"{where}: no decoding for {_name(hint)}")


def _dataclass(data: Any, cls: type, where: str) -> Any:
    fields = _fields(cls)
    got = _expect(data, dict, where)
    unknown = set(got) - set(fields)
    if unknown:
        raise WireError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in got and
               f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise WireError(f"{where}: missing field {missing[0]!r}")
    return cls(**{k: from_wire(v, fields[k], f"{where}.{k}") for k, v in got.items()})


def _expect(data: Any, kind: type, where: str) -> Any:
    if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
        raise WireError(f"{where}: {type(data).__name__} where {kind.__name__} is expected")
    return data


def _number(data: Any, where: str) -> float:
    if isinstance(data, bool) or not isinstance(data, int | float):
        raise WireError(f"{where}: {type(data).__name__} where a number is expected")
    return float(data)


def _state(data: Any, where: str) -> TrialState:
    try:
        return TrialState[_expect(data, str, where)]
    except KeyError:
        raise WireError(f"{where}: no trial state {data!r}") from None


def _distribution(data: Any, where: str) -> BaseDistribution:
    try:
        return json_to_distribution(_expect(data, str, where))
    except (ValueError, KeyError, TypeError) as e:
        raise WireError(f"{where}: not a distribution ({e})") from None


def _spec(data: Any, where: str) -> SweepSpec:
    got = _expect(data, dict, where)
    record, base_dir = got.get("record"), got.get("base_dir")
    if not isinstance(record, dict) or not (base_dir is None or isinstance(base_dir, str)):
        raise WireError(f"{where}: a spec is {{record: object, base_dir: string or null}}")
    spec = parse_spec_dict(record, source="<spec sent to the proxy>")
    return dataclasses.replace(spec, base_dir=base_dir) if base_dir is not None else spec


def _datetime(data: Any, where: str) -> datetime:
    try:
        return datetime.fromisoformat(_expect(data, str, where))
    except ValueError:
        raise WireError(f"{where}: not an ISO time {data!r}") from None


_LEAVES: dict[Any, Any] = {
    int: lambda d, w: _expect(d, int, w),
    float: _number,
    str: lambda d, w: _expect(d, str, w),
    bool: lambda d, w: _expect(d, bool, w),
    TrialState: _state,
    BaseDistribution: _distribution,
    SweepSpec: _spec,
    datetime: _datetime,
}


def _optional_of(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) != 1:
        raise TypeError(f"only X | None unions travel: {hint}")
    return args[0]


def _item_hints(hint: Any, n: int) -> list[Any]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if n != len(args):
            raise WireError(f"{n} items where {len(args)} are expected")
        return list(args)
    return [args[0] if args else Any] * n


@functools.cache
def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint))


__all__ = ["WireError", "from_wire", "to_wire"]
