"""A safe, line-tracking YAML loader: plain data only, every mapping key's line recorded, so
a validation error can name ``file:line: field``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sweeper.errors import SpecError

Path_ = tuple[str | int, ...]

_MAX_NODES = 200_000
#: What usually causes PyYAML's terser complaints.
_YAML_HINTS = (("<block end>", "check the indentation"),
               ("'\\t'", "indent with spaces, not tabs"),
               ("another document", "a spec is a single YAML document (no ---)"),
               ("mapping values are not allowed", "quote a value that contains ': '"))
#: Only plain data: a ``!!python/...`` (or any other) tag is refused before anything is built.
_SAFE_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in
                       ("str", "int", "float", "bool", "null", "map", "seq", "timestamp"))


class Doc:
    """A parsed YAML document plus the line of every mapping key, for error messages."""

    def __init__(self, source: str, lines: dict[Path_, int]) -> None:
        self.source = source
        self.lines = lines
        #: Paths whose value came from ``--set``: errors there name it instead of a line.
        self.overridden: set[Path_] = set()

    def line(self, path: Path_) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def from_set(self, path: Path_) -> bool:
        """Whether the value at ``path`` came from ``--set`` (it or a parent was set, or it is
        a key that only ``--set`` wrote)."""
        if any(path[:k] in self.overridden for k in range(len(path), 0, -1)):
            return True
        return bool(path) and path not in self.lines and \
            any(o[:len(path)] == path for o in self.overridden)

    def error(self, path: Path_, message: str) -> SpecError:
        if self.from_set(path):
            return SpecError(message, source=self.source, field=f"--set {_dotted(path)}")
        return SpecError(message, source=self.source, line=self.line(path),
                         field=_dotted(path) or None)


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, str) and not (part.isprintable() and part.strip() == part and part):
            part = repr(part)  # keeps the message one readable line
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = str(part)
    return out


def read_text(path: Path) -> str:
    """A spec-like file's text; a missing or unreadable file is one SpecError naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError("no such file", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e}", source=str(path)) from None


def load_yaml(text: str, source: str) -> tuple[Any, Doc]:
    """Safe-load one YAML document, rejecting duplicate keys and recording key lines."""
    node = compose(text, source)
    if node is None:
        raise SpecError("the file is empty; expected a mapping with name, method, objective, "
                        "trial and parameters", source=source)
    builder = Builder(source)
    builder.lines[()] = node.start_mark.line + 1
    try:
        return builder.build(node, (), frozenset()), builder.doc
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply", source=source) from None


def compose(text: str, source: str) -> yaml.Node | None:
    """Parse to a node graph only: nothing is constructed until its tag has been checked."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        hints = [h for needle, h in _YAML_HINTS if needle in problem]
        raise SpecError(f"invalid YAML: {problem}" + "".join(f"; {h}" for h in hints[:1]),
                        source=source, line=mark.line + 1 if mark is not None else None) from None
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply", source=source) from None


class Builder:
    """Node graph -> plain Python data, with a node budget (alias bombs) and a cycle check
    (recursive aliases), recording the line of every key in ``lines``."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: dict[Path_, int] = {}
        self.doc = Doc(source, self.lines)
        self.constructor = yaml.SafeLoader("")
        self.budget = _MAX_NODES

    def build(self, n: yaml.Node, path: Path_, active: frozenset[int]) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise SpecError("YAML document too large (too many nodes or aliases)",
                            source=self.source)
        if id(n) in active:
            raise self.doc.error(path, "recursive YAML alias")
        if n.tag not in _SAFE_TAGS:
            tag = n.tag.replace("tag:yaml.org,2002:", "!!")
            raise SpecError(f"YAML tag {tag} is not allowed: a spec is plain data (strings, "
                            "numbers, booleans, null, lists, mappings)", source=self.source,
                            line=n.start_mark.line + 1, field=_dotted(path) or None)
        if isinstance(n, yaml.MappingNode):
            return self._mapping(n, path, active)
        if isinstance(n, yaml.SequenceNode):
            items = []
            for i, item in enumerate(n.value):
                self.lines.setdefault((*path, i), item.start_mark.line + 1)
                items.append(self.build(item, (*path, i), active | {id(n)}))
            return items
        return self._scalar(n, path)

    def _mapping(self, n: yaml.MappingNode, path: Path_, active: frozenset[int]
                 ) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key_node, value_node in n.value:
            key = self._key(key_node, path, active)
            child = (*path, key)
            if key in out:
                raise SpecError(
                    f"duplicate key {key!r} (first on line {self.lines.get(child)})",
                    source=self.source, line=key_node.start_mark.line + 1, field=_dotted(child))
            self.lines[child] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, child, active | {id(n)})
        return out

    def _key(self, key_node: yaml.Node, path: Path_, active: frozenset[int]) -> str:
        if not isinstance(key_node, yaml.ScalarNode):
            raise SpecError("mapping keys must be plain scalars", source=self.source,
                            line=key_node.start_mark.line + 1, field=_dotted(path) or None)
        if key_node.tag == "tag:yaml.org,2002:merge" or key_node.value == "<<":
            raise SpecError("YAML merge keys (<<) are not supported; write the keys out",
                            source=self.source, line=key_node.start_mark.line + 1,
                            field=_dotted(path) or None)
        key = self.build(key_node, path, active)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise SpecError("mapping keys must be scalars", source=self.source,
                            line=key_node.start_mark.line + 1)
        return str(key) if not isinstance(key, str) else key

    def _scalar(self, n: yaml.Node, path: Path_) -> Any:
        try:
            return self.constructor.construct_object(n)
        except yaml.MarkedYAMLError as e:
            raise SpecError(f"invalid YAML value: {e.problem or e.context}", source=self.source,
                            line=n.start_mark.line + 1, field=_dotted(path) or None) from None
        except (yaml.YAMLError, ValueError, OverflowError) as e:
            raise SpecError(f"invalid YAML value: {str(e).splitlines()[0] if str(e) else e!r}",
                            source=self.source, line=n.start_mark.line + 1,
                            field=_dotted(path) or None) from None
