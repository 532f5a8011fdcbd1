"""Foreign sweep configurations -> sweeper specs: ``sweeper import katib | wandb FILE``.

Each importer maps what has a sweeper counterpart and lists what does not, one line each;
the notes go on top of the written spec as comments (and to stderr). The written spec is
validated before it is returned, so what ``import`` writes is what ``validate`` accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeper.errors import SpecError
from sweeper.importers._common import render
from sweeper.importers.katib import import_katib
from sweeper.importers.wandb import import_wandb

#: kind -> (importer, what the source is called in messages)
IMPORTERS: dict[str, tuple[Callable[[str], tuple[dict[str, Any], list[str]]], str]] = {
    "katib": (import_katib, "Katib Experiment"),
    "wandb": (import_wandb, "W&B sweep config"),
}


@dataclass(frozen=True)
class Imported:
    text: str  # the spec as YAML, notes as comments on top
    spec: dict[str, Any]
    notes: tuple[str, ...]


def import_config(kind: str, path: str | Path) -> Imported:
    convert, what = IMPORTERS[kind]
    spec, notes = convert(str(path))
    text = render(spec, notes, f"sweeper spec imported from {what} {Path(path).name} by "
                               f"`sweeper import {kind}`")
    from sweeper.spec import parse_spec

    try:
        parse_spec(text, source=f"<imported from {path}>")
    except SpecError as e:  # a mapping sweeper cannot express: say what, write nothing
        raise SpecError(f"the imported spec does not validate ({e.field}: {e.message})",
                        source=str(path)) from None
    return Imported(text, spec, tuple(notes))


__all__ = ["IMPORTERS", "Imported", "import_config"]
