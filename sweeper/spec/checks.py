"""Validation building blocks: scalars, durations, quantities and the one-line wording of
what a value is. ``Checks`` holds the checks every section uses; sections live in
``_validate`` and ``_parameters``."""

from __future__ import annotations

import difflib
import math
import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

from sweeper.errors import SpecError
from sweeper.spec.model import MAX_NAME_LENGTH
from sweeper.spec.yamldoc import Doc, Path_

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PARAM_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h|d))+$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MAX_DURATION_S = 365 * 86400.0
QUANTITY_RE = re.compile(r"^\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def parse_duration(value: Any) -> float:
    """``90``, ``"90s"``, ``"30m"``, ``"1h30m"``, ``"2d"`` -> seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30m, 2h or a number of seconds")
    try:
        if isinstance(value, (int, float)):
            seconds = float(value)
        elif isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value.strip()):
            seconds = float(value)  # "90" quoted is still a number of seconds
        elif isinstance(value, str) and _DURATION_RE.match(value.strip()):
            seconds = sum(float(n) * _DURATION_UNITS[u]
                          for n, u in _DURATION_PART_RE.findall(value.strip()))
        else:
            raise ValueError("expected a duration like 30m, 2h, 1h30m or a number of seconds")
    except OverflowError:
        seconds = math.inf
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError("a duration must be positive")
    if seconds > _MAX_DURATION_S:
        raise ValueError("a duration must be at most 365d")
    return seconds


def command_placeholders(command: Iterable[str]) -> list[str]:
    """Field names of ``{name}`` placeholders in a command argv (``{{`` escapes)."""
    names = []
    for arg in command:
        for _, name, _, _ in string.Formatter().parse(arg):
            if name is not None:
                names.append(name)
    return names


class Checks:
    """The checks every section uses, each raising a SpecError at ``path``."""

    def __init__(self, doc: Doc) -> None:
        self.doc = doc

    def err(self, path: Path_, message: str) -> SpecError:
        return self.doc.error(path, message)

    # ---- primitives

    def mapping(self, value: Any, path: Path_, allowed: Iterable[str] | None = None
                ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.err(path, f"expected a mapping, got {kind_of(value)}")
        if allowed is not None:
            allowed = tuple(allowed)
            for key in value:
                if key not in allowed:
                    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                    hint = f"; did you mean {close[0]!r}?" if close else \
                        f"; allowed: {', '.join(allowed)}"
                    raise self.err((*path, key), f"unknown key {key!r}{hint}")
        return value

    def require(self, m: Mapping[str, Any], key: str, path: Path_) -> Any:
        if key not in m or m[key] is None:
            raise self.err(path, f"missing required key {key!r}")
        return m[key]

    def string(self, value: Any, path: Path_) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.err(path, f"expected a non-empty string, got {kind_of(value)}")
        return value

    def integer(self, value: Any, path: Path_, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err(path, f"expected an integer, got {kind_of(value)}")
        if minimum is not None and value < minimum:
            raise self.err(path, f"must be >= {minimum}, got {value}")
        return value

    def number(self, value: Any, path: Path_) -> float | int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err(path, f"expected a number, got {kind_of(value)}")
        try:
            finite = math.isfinite(value)
        except OverflowError:
            raise self.err(path, "number too large (beyond the float range)") from None
        if not finite:
            raise self.err(path, f"must be finite, got {value}")
        return value

    def boolean(self, value: Any, path: Path_) -> bool:
        if not isinstance(value, bool):
            raise self.err(path, f"expected true or false, got {kind_of(value)}")
        return value

    def choice(self, value: Any, path: Path_, options: Iterable[str]) -> str:
        options = tuple(options)
        if not isinstance(value, str):
            raise self.err(path, f"must be one of {', '.join(options)}, got {kind_of(value)}")
        if value not in options:
            close = ([o for o in options if o.lower() == value.lower()]
                     or [o for o in options if value and o.startswith(value)]
                     or difflib.get_close_matches(value, options, n=1, cutoff=0.6))
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.err(path, f"must be one of {', '.join(options)}, got {value!r}{hint}")
        return value

    def duration(self, value: Any, path: Path_) -> float:
        try:
            return parse_duration(value)
        except ValueError as e:
            raise self.err(path, f"{e}, got {value!r}") from None

    def plain(self, value: Any, path: Path_) -> Any:
        """JSON-able data only (the spec is stored on the study as JSON)."""
        if value is None or isinstance(value, (str, bool, int)):
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise self.err(path, f"must be finite, got {value}")
            return value
        if isinstance(value, list):
            return [self.plain(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {str(k): self.plain(v, (*path, str(k))) for k, v in value.items()}
        raise self.err(path, f"unsupported value {kind_of(value)}; use strings, numbers, lists "
                             "and mappings")


def name_problem(name: str) -> str | None:
    """Why Kubernetes would reject ``name`` as a sweep name (None: it would not)."""
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}"
    if NAME_RE.match(name):
        return None
    if any(c.isupper() for c in name):
        return "has uppercase letters"
    bad = sorted({c for c in name if not (c.isascii() and (c.islower() or c.isdigit()))} - {"-"})
    if bad:
        return "contains " + ", ".join(repr(c) for c in bad[:3])
    return "must start and end with a letter or digit"


def clip(value: Any, limit: int = 60) -> str:
    """``repr`` shortened for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {value}".lower()
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"string {value!r}"
    return f"{type(value).__name__} {value!r}"


_OPTION_WORDS = {"bool": "true/false", "int": "an integer", "float": "a number",
                 "str": "a string", "None": "null"}


def option_ok(value: Any, types: frozenset[str]) -> bool:
    if value is None:
        return "None" in types
    if isinstance(value, bool):
        return "bool" in types
    if isinstance(value, int):
        return bool({"int", "float"} & types)
    if isinstance(value, float):
        return "float" in types
    if isinstance(value, str):
        return "str" in types
    return False


def describe_types(types: frozenset[str]) -> str:
    words = [w for t, w in _OPTION_WORDS.items() if t in types]
    return " or ".join(words) if words else "a scalar"



_PROXY_ADDRESS_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")


def parse_proxy_address(value: str) -> str:
    """A storage proxy address, ``host[:port]`` (``grpc://`` allowed) -> ``host:port`` (port
    13000, ``sweeper proxy``'s default, when left out). ValueError says what is wrong."""
    address = value.removeprefix("grpc://").rstrip("/")
    if not _PROXY_ADDRESS_RE.match(address):
        shown = "a URL with credentials" if "@" in value else clip(value)  # never echo them
        raise ValueError(f"{shown} is not a storage proxy address: use host:port, e.g. "
                         "sweeper-storage-proxy:13000 (no user, password or path)")
    host, _, port = address.partition(":")
    if port and not 0 < int(port) < 65536:
        raise ValueError(f"port {port} is out of range")
    return f"{host}:{port or 13000}"
