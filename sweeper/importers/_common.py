"""What both importers share: reading the file (one line per problem, as the spec loader
does), the notes on what did not map, names, numbers, and writing the spec with its notes as
comments at the top."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sweeper.errors import SpecError
from sweeper.spec.yamldoc import Doc, Path_, load_yaml, read_text

_NUMBER_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_NAME_CHARS = re.compile(r"[^a-z0-9-]+")


@dataclass
class Importer:
    """The file being imported and what did not map (``notes``: one line each)."""

    doc: Doc
    notes: list[str] = field(default_factory=list)

    def err(self, path: Path_, message: str) -> SpecError:
        return self.doc.error(path, message)

    def note(self, where: str, text: str) -> None:
        """Something the spec cannot say (or says only approximately: the text says how)."""
        line = f"{where}: {text}" if where else text
        if line not in self.notes:
            self.notes.append(" ".join(line.split()))


def read(path: str | Path) -> tuple[Any, Doc]:
    p = Path(path)
    text = read_text(p)
    return load_yaml(text, str(p))


def number(im: Importer, value: Any, path: Path_, *, integer: bool = False) -> float | int:
    """A number written as a number or a string (Katib's feasibleSpace; W&B's ``1e-5``, which
    YAML 1.1 reads as a string)."""
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float, str)):
        raise im.err(path, f"expected a number, got {value!r}")
    if isinstance(value, str):
        if not _NUMBER_RE.match(value.strip()):
            raise im.err(path, f"expected a number, got {value!r}")
        parsed = float(value)
        if integer or (parsed.is_integer() and re.fullmatch(r"[-+]?\d+", value.strip())):
            parsed = int(parsed) if parsed.is_integer() else parsed
        value = parsed
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise im.err(path, f"expected an integer, got {value!r}")
        return int(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise im.err(path, f"expected a finite number, got {value!r}")
    return value


def is_number_text(value: Any) -> bool:
    return isinstance(value, str) and bool(_NUMBER_RE.match(value.strip()))


def param_name(raw: str) -> str:
    """A sweeper parameter name (an identifier) for a foreign one (``num-epochs``,
    ``optimizer.config.learning_rate``)."""
    name = re.sub(r"\W+", "_", raw).strip("_") or "param"
    return f"p_{name}" if name[0].isdigit() else name


def sweep_name(raw: str) -> str:
    """A sweep name (a DNS-1123 label of at most 50 characters) for a foreign one."""
    name = _NAME_CHARS.sub("-", raw.lower()).strip("-")[:50].rstrip("-")
    return name or "imported"


def escape_braces(text: str) -> str:
    """Literal braces in a command argument (sweeper fills ``{name}`` placeholders)."""
    return text.replace("{", "{{").replace("}", "}}")


def render(spec: dict[str, Any], notes: list[str], header: str) -> str:
    """The spec as YAML, the notes as comments on top: what did not map, one line each."""
    lines = [f"# {header}"]
    if notes:
        lines.append("# Not mapped, or mapped only approximately (check each before running):")
        lines += [f"#   - {n}" for n in notes]
    body = yaml.safe_dump(spec, sort_keys=False, default_flow_style=None, width=100,
                          allow_unicode=True)
    return "\n".join(lines) + "\n" + body
