"""``sweeper import katib|wandb FILE [-o SPEC]``: a Katib Experiment or a W&B sweep config as a
sweeper spec (stdout, or the file -o names); what does not map is listed on stderr, one line
each, and as comments at the top of the spec. Written to a file, the closing line names the
commands that check and run it (a Katib trial runs on Kubernetes, in its image)."""

from __future__ import annotations

import click

from sweeper.app.importing import import_config, import_lines
from sweeper.cli._common import errors, say
from sweeper.cli._group import cli


@cli.group("import")
def import_() -> None:
    """Turn a Katib Experiment or a W&B sweep config into a sweeper spec."""


def _import(kind: str, source: str, output: str | None) -> None:
    view = import_config(kind, source, None if output in (None, "-") else output)
    for line in import_lines(view):
        say(line)
    if view.written is None:
        click.echo(view.text, nl=False)


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
