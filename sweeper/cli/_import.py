"""``sweeper import katib|wandb FILE [-o SPEC]``: a Katib Experiment or a W&B sweep config as a
sweeper spec (stdout, or the file -o names); what does not map is listed on stderr, one line
each, and as comments at the top of the spec. Written to a file, the closing line names the
commands that check and run it (a Katib trial runs on Kubernetes, in its image)."""

from __future__ import annotations

from pathlib import Path

import click

from sweeper.cli._common import errors
from sweeper.cli._group import cli
from sweeper.errors import SweeperError


@cli.group("import")
def import_() -> None:
    """Turn a Katib Experiment or a W&B sweep config into a sweeper spec."""


def _import(kind: str, source: str, output: str | None) -> None:
    from sweeper.importers import import_config

    imported = import_config(kind, source)
    for note in imported.notes:
        click.echo(f"note: {note}", err=True)
    if output is None or output == "-":
        click.echo(imported.text, nl=False)
        return
    target = Path(output)
    try:
        target.write_text(imported.text, encoding="utf-8")
    except OSError as e:
        raise SweeperError(f"cannot write {output}: {e.strerror}") from None
    n = len(imported.notes)
    click.echo(f"wrote {output} ({n} {'note' if n == 1 else 'notes'} on what did not map): "
               f"{imported.next_steps(output)}", err=True)


_output = click.option("--output", "-o", type=click.Path(dir_okay=False, allow_dash=True),
                       default=None, help="Write the spec here instead of stdout.")


@import_.command("katib")
@click.argument("experiment", type=click.Path(dir_okay=False))
@_output
@errors
def katib(experiment: str, output: str | None) -> None:
    """A Katib Experiment (kubeflow.org/v1beta1) as a sweeper spec."""
    _import("katib", experiment, output)


@import_.command("wandb")
@click.argument("sweep_config", type=click.Path(dir_okay=False))
@_output
@errors
def wandb(sweep_config: str, output: str | None) -> None:
    """A W&B sweep configuration (sweep.yaml) as a sweeper spec."""
    _import("wandb", sweep_config, output)
