"""Shape checks of pass-through Kubernetes objects (an Affinity, a PodTemplateSpec) against
the models of the official ``kubernetes`` client, which are generated from the Kubernetes
OpenAPI schema: unknown fields, wrong types and missing required fields are found before
anything is rendered or submitted, with the path of the offending field.

This is the part of the schema a model carries (fields, types, required); enums and formats
are left to the API server. The client is imported only when a spec has such an object, and
never by the trial runner (``parse_spec_dict`` does not call this).
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Any

from sweeper.spec.checks import kind_of

Problem = tuple[tuple[str | int, ...], str]

_LIST_RE = re.compile(r"^list\[(.+)\]$")
_DICT_RE = re.compile(r"^dict[\[(]str, (.+)[\])]$")
#: Fields whose OpenAPI type is a Quantity (string or number) but the client types as str,
#: and the maps of quantities (resources.limits.cpu: 2).
_QUANTITY_FIELDS = frozenset({"size_limit"})
_QUANTITY_MAPS = frozenset({"limits", "requests", "overhead"})


def check(value: Any, model: str, *, partial: bool = False) -> Problem | None:
    """The first problem of ``value`` as a ``model`` (e.g. ``"V1Affinity"``), or None.

    ``partial``: a strategic-merge patch (required fields may be missing, ``null`` deletes a
    field, ``$patch``-style directives are allowed)."""
    return _check(value, model, (), partial)


def _check(value: Any, type_name: str, path: tuple[str | int, ...], partial: bool
           ) -> Problem | None:
    if value is None:
        return None if partial else (path, "must not be null")
    if m := _LIST_RE.match(type_name):
        return _check_list(value, m.group(1), path, partial)
    if m := _DICT_RE.match(type_name):
        return _check_dict(value, m.group(1), path, partial)
    scalar = _SCALARS.get(type_name)
    if scalar is not None:
        return None if scalar(value) else (path, f"expected {_WORDS[type_name]}, "
                                                 f"got {kind_of(value)}")
    return _check_model(value, type_name, path, partial)


def _check_list(value: Any, inner: str, path: tuple[str | int, ...], partial: bool
                ) -> Problem | None:
    if not isinstance(value, list):
        return path, f"expected a list, got {kind_of(value)}"
    for i, item in enumerate(value):
        if partial and isinstance(item, dict) and set(item) == {"$patch"}:
            continue
        if problem := _check(item, inner, (*path, i), partial):
            return problem
    return None


def _check_dict(value: Any, inner: str, path: tuple[str | int, ...], partial: bool
                ) -> Problem | None:
    if not isinstance(value, dict):
        return path, f"expected a mapping, got {kind_of(value)}"
    for k, v in value.items():
        if inner == "str" and _is_number(v) and path and path[-1] in _QUANTITY_MAPS:
            continue  # quantities (resources.limits.cpu: 2) are numbers or strings
        if problem := _check(v, inner, (*path, k), partial):
            return problem
    return None


def _check_model(value: Any, type_name: str, path: tuple[str | int, ...], partial: bool
                 ) -> Problem | None:
    if not isinstance(value, dict):
        return path, f"expected a mapping, got {kind_of(value)}"
    fields, required = _model(type_name)
    for key, v in value.items():
        if partial and isinstance(key, str) and key.startswith("$"):
            continue  # $patch, $retainKeys, $setElementOrder/...: strategic-merge directives
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return (*path, key), f"unknown field {key!r} in {_kind(type_name)}{hint}"
        attr, inner = fields[key]
        if attr in _QUANTITY_FIELDS and _is_number(v):
            continue
        if problem := _check(v, inner, (*path, key), partial):
            return problem
    if not partial:
        for key in required:
            if value.get(key) is None:
                return path, f"missing required field {key!r} of {_kind(type_name)}"
    return None


@functools.cache
def _model(type_name: str) -> tuple[dict[str, tuple[str, str]], tuple[str, ...]]:
    """json key -> (attribute, type) of a client model, and its required json keys."""
    from kubernetes.client import models
    from kubernetes.client.configuration import Configuration

    cls = getattr(models, type_name)
    fields = {cls.attribute_map[a]: (a, t) for a, t in cls.openapi_types.items()}
    probe = cls.__new__(cls)
    probe.local_vars_configuration = Configuration()  # client_side_validation on
    required = []
    for attr in cls.openapi_types:
        try:
            setattr(probe, attr, None)  # the generated setters refuse None for required fields
        except ValueError:
            required.append(cls.attribute_map[attr])
    return fields, tuple(required)


def _kind(type_name: str) -> str:
    return re.sub(r"^V\d+(alpha\d+|beta\d+)?", "", type_name)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_SCALARS = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": _is_number,
    "bool": lambda v: isinstance(v, bool),
    "object": lambda v: True,  # IntOrString and friends
    "datetime": lambda v: isinstance(v, str),
    "date": lambda v: isinstance(v, str),
}
_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
          "object": "a value", "datetime": "a timestamp", "date": "a date"}
