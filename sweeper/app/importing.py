"""``import``: a Katib Experiment or a W&B sweep config turned into a sweeper spec, as an
:class:`ImportView` (the spec's text, the notes on what did not map, where it was written);
beside it :func:`import_lines`, what the CLI says on stderr about it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import SweeperError
from sweeper.importers import IMPORTERS
from sweeper.importers import import_config as convert

#: What ``kind`` may be: ``katib``, ``wandb``.
KINDS = tuple(IMPORTERS)


@dataclass(frozen=True)
class ImportView:
    """The imported spec: ``text`` (YAML, the notes as comments on top), ``notes`` (one line
    per thing that did not map), and where it went: ``written`` is the file (None: not
    written, the caller prints ``text``), ``next_steps`` the commands that check and run it
    there."""

    kind: str
    source: str
    text: str
    notes: tuple[str, ...]
    written: str | None = None
    next_steps: str | None = None


def import_config(kind: str, source: str | Path, output: str | Path | None = None
                  ) -> ImportView:
    """The sweeper spec of the ``kind`` config at ``source`` (``katib``: a Katib Experiment;
    ``wandb``: a W&B sweep configuration), validated; with ``output`` it is also written
    there. SpecError (exit 2) for a config that does not convert or validate, with nothing
    written; SweeperError when ``output`` cannot be written."""
    if kind not in IMPORTERS:
        raise SweeperError(f"cannot import {kind!r}: one of {', '.join(KINDS)}")
    imported = convert(kind, source)
    if output is None:
        return ImportView(kind, str(source), imported.text, imported.notes)
    target = Path(output)
    try:
        target.write_text(imported.text, encoding="utf-8")
    except OSError as e:
        raise SweeperError(f"cannot write {output}: {e.strerror}") from None
    return ImportView(kind, str(source), imported.text, imported.notes, str(output),
                      imported.next_steps(str(output)))


def import_lines(view: ImportView) -> list[str]:
    """What the CLI says on stderr: one ``note:`` line per note, then (written to a file)
    where it went, how many notes there are, and what to run next."""
    lines = [f"note: {note}" for note in view.notes]
    if view.written is not None:
        n = len(view.notes)
        lines.append(f"wrote {view.written} ({n} {'note' if n == 1 else 'notes'} on what did "
                     f"not map): {view.next_steps}")
    return lines
