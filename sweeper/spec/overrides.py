"""``--set KEY=VALUE``: change the parsed YAML mapping before it is validated.

``KEY`` is a dotted path into the mapping (``trial.fixed.epochs``; a number picks a list item:
``trial.command.2``), ``VALUE`` is YAML (``1`` is an int, ``'1'`` a string, ``{type: int, low:
1, high: 4}`` a mapping), read by the same safe loader as the file. Missing mappings on the way
are created. The result is validated like the file, so a bad key or value is the usual one-line
error; it names ``--set`` and the field instead of a line of the file. Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SpecError
from sweeper.spec.yamldoc import Builder, Path_, compose


@dataclass(frozen=True)
class Override:
    """One ``--set``: where, what, and how it was written (for error messages)."""

    path: tuple[str | int, ...]
    value: Any
    text: str


def parse_override(text: str, source: str | None = None) -> Override:
    """``"trial.fixed.epochs=1"`` -> Override(("trial", "fixed", "epochs"), 1)."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise SpecError(f"--set {text!r}: expected KEY=VALUE, e.g. --set trial.fixed.epochs=1",
                        source=source)
    parts = key.split(".")
    if any(not p.strip() or p != p.strip() for p in parts):
        raise SpecError(f"--set {text!r}: KEY is a dotted path like trial.fixed.epochs",
                        source=source)
    path = tuple(int(p) if p.isdigit() else p for p in parts)
    return Override(path, _value(raw, key, source), text)


def _value(raw: str, key: str, source: str | None) -> Any:
    """The YAML value, through the spec's own loader (plain data only, no tags)."""
    where = source or "<spec>"
    try:
        node = compose(raw, where)
        return None if node is None else Builder(where).build(node, (), frozenset())
    except SpecError as e:
        raise SpecError(f"not a YAML value: {e.message}", source=source,
                        field=f"--set {key}") from None


def parse_overrides(texts: Iterable[str], source: str | None = None) -> tuple[Override, ...]:
    return tuple(parse_override(t, source) for t in texts)


def apply_overrides(data: Any, overrides: Sequence[Override],
                    source: str | None = None) -> Any:
    """A copy of ``data`` with every override applied in order (later ones win). ``data`` is
    left as it is; a root that is not a mapping is returned unchanged (the validator says why)."""
    if not overrides or not isinstance(data, dict):
        return data
    out = copy.deepcopy(data)
    for o in overrides:
        node: Any = out
        for depth, part in enumerate(o.path[:-1]):
            node = _child(node, part, o, depth, source)
        _assign(node, o.path[-1], copy.deepcopy(o.value), o, source)
    return out


def _child(node: Any, part: str | int, o: Override, depth: int, source: str | None) -> Any:
    if isinstance(node, list):
        return node[_position(node, part, o, depth, source)]
    if not isinstance(node, dict):
        raise _not_a_container(node, o, depth, source)
    key = str(part)
    if node.get(key) is None:
        node[key] = {}
    return node[key]


def _assign(node: Any, part: str | int, value: Any, o: Override, source: str | None) -> None:
    depth = len(o.path) - 1
    if isinstance(node, list):
        node[_position(node, part, o, depth, source)] = value
    elif isinstance(node, dict):
        node[str(part)] = value
    else:
        raise _not_a_container(node, o, depth, source)


def _position(items: list[Any], part: str | int, o: Override, depth: int,
              source: str | None) -> int:
    if not isinstance(part, int) or part >= len(items):
        raise SpecError(f"{_dotted(o.path[:depth]) or 'the spec'} is a list of {len(items)}; "
                        f"pick an item by its position 0..{len(items) - 1}", source=source,
                        field=f"--set {_dotted(o.path[:depth + 1])}")
    return part


def _not_a_container(node: Any, o: Override, depth: int, source: str | None) -> SpecError:
    return SpecError(f"{_dotted(o.path[:depth])} is {type(node).__name__} {node!r}, not a "
                     "mapping", source=source, field=f"--set {_dotted(o.path[:depth + 1])}")


def _dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path)
