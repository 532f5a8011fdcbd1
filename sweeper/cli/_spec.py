"""Commands on a spec file alone (no storage, no cluster): validate, plan, render
(:mod:`sweeper.app.specs`)."""

from __future__ import annotations

import json

import click

from sweeper.app.options import JobOverrides
from sweeper.app.specs import RenderOptions, render_yaml
from sweeper.app.specs import plan as plan_sets
from sweeper.app.specs import render as render_objects
from sweeper.app.specs import validate as validate_spec
from sweeper.cli._common import collect, errors, job_options, say, set_option
from sweeper.cli._group import cli


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--no-import", is_flag=True,
              help="Do not import the entrypoint or look for the command's script (they live "
                   "only in the trial image).")
@set_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: the normalised spec's summary on stdout.")
@errors
def validate(spec_file: str, no_import: bool, overrides: tuple[str, ...], fmt: str) -> None:
    """Check a spec file: schema, ranges, grid size, entrypoint importable, the command's
    script found (unless the spec names the image it runs in: its paths are the image's)."""
    checked = validate_spec(spec_file, check_imports=not no_import, overrides=overrides)
    for note in checked.notes:
        say(f"note: {note}")
    for warning in checked.warnings:
        say(f"warning: {warning}")
    click.echo(json.dumps(checked.record(), indent=2) if fmt == "json" else checked.text())


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--limit", type=int, default=None, help="Show only the first N indexes.")
@set_option
@errors
def plan(spec_file: str, fmt: str, limit: int | None, overrides: tuple[str, ...]) -> None:
    """Show JOB_ID -> hyperparameter set (grid, random, qmc); the adaptive methods (tpe, gp,
    cmaes, nsga2, nsga3) ask their sampler when a trial starts."""
    planned = plan_sets(spec_file, limit=limit, overrides=overrides)
    click.echo(json.dumps(planned.record(), indent=2) if fmt == "json" else planned.text())


def _render_options(parallelism: int | None, job: JobOverrides, overrides: tuple[str, ...],
                    storage: str | None, code_choice: str | None) -> RenderOptions:
    return RenderOptions(parallelism, job, overrides, storage, code_choice == "new")


def render_options(fn: click.decorators.FC) -> click.decorators.FC:
    """render's options as one ``options``."""
    fn = collect("options", _render_options,
                 ("parallelism", "job", "overrides", "storage", "code_choice"))(fn)
    for decorator in reversed([
        click.option("--parallelism", "-p", type=click.IntRange(min=1),
                     help="Pods at once (default: the spec's parallelism)."),
        job_options, set_option,
        click.option("--storage", metavar="URL",
                     help="Without an artifact store: keep the code snapshot in this study "
                          "storage (the one the pods use), creating or resuming the sweep's "
                          "record there."),
        click.option("--code", "code_choice", type=click.Choice(["new"]), default=None,
                     help="new: with --storage, the code changed since the sweep last ran; its "
                          "remaining trials run the new snapshot (default: exit code 2)."),
    ]):
        fn = decorator(fn)
    return fn


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@render_options
@errors
def render(spec_file: str, options: RenderOptions) -> None:
    """Print the Kubernetes objects `run --backend kubernetes` submits, as YAML (no storage,
    no cluster): the ConfigMap NAME-spec and the Job (a JobSet when trial.nodes > 1). With an
    artifact store, the code snapshot (trial.code) is uploaded there and the Job names it.
    Without one, --storage keeps it in the study (render then creates the sweep's record).
    Applied on their own (kubectl apply -f -, GitOps), the first trial runner creates the
    sweep from the spec."""
    click.echo(render_yaml(render_objects(spec_file, options, say)), nl=False)
