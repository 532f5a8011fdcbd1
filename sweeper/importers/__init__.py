"""Foreign sweep configurations -> sweeper specs: ``sweeper import katib | wandb FILE``.

Each importer maps what has a sweeper counterpart and lists what does not, one line each;
the notes go on top of the written spec as comments (and to stderr). The written spec is
validated before it is returned, so what ``import`` writes is what ``validate`` accepts: a
Katib trial runs in its image (``kubernetes.image``), where its command's paths are, so
``validate`` does not look for them on this machine; a W&B program is looked for next to the
spec, then in the working directory, as W&B runs it.
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
    #: The image the trials run in (``kubernetes.image``), None when the spec names none: it
    #: then runs on this machine (``sweeper run``), else on Kubernetes.
    image: str | None = None

    def next_steps(self, path: str) -> str:
        """The commands that check and run the spec once written to ``path``."""
        check = f"check it with `sweeper validate {path}`"
        if self.image is None:
            return f"{check}, run it with `sweeper run {path}`"
        if self.spec.get("kubernetes", {}).get("runner_image"):
            return f"{check}, run it with `sweeper run {path} --backend kubernetes` (the " \
                   f"command runs in {self.image} as it is, sweeper's runner beside it)"
        return f"{check}, run it with `sweeper run {path} --backend kubernetes --image IMAGE`, " \
               f"IMAGE built FROM {self.image} with sweeper installed"


def import_config(kind: str, path: str | Path) -> Imported:
    convert, what = IMPORTERS[kind]
    spec, notes = convert(str(path))
    text = render(spec, notes, f"sweeper spec imported from {what} {Path(path).name} by "
                               f"`sweeper import {kind}`")
    from sweeper.spec import parse_spec
    from sweeper.spec.paths import named_image

    try:
        parsed = parse_spec(text, source=f"<imported from {path}>")
    except SpecError as e:  # a mapping sweeper cannot express: say what, write nothing
        raise SpecError(f"the imported spec does not validate ({e.field}: {e.message})",
                        source=str(path)) from None
    return Imported(text, spec, tuple(notes), named_image(parsed))


__all__ = ["IMPORTERS", "Imported", "import_config"]
