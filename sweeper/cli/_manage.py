"""Commands that manage the sweeps of a storage: list, delete."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from sweeper.app.listing import list_record, list_table
from sweeper.app.listing import list_sweeps as app_list_sweeps
from sweeper.app.manage import DeleteOptions, DeletionPlan, DeletionReport, plan_deletion
from sweeper.app.manage import delete as delete_sweep
from sweeper.app.options import StorageOptions
from sweeper.cli._common import (
    RUN_STORAGE_HELP,
    cluster_options,
    collect,
    errors,
    say,
    storage_options,
)
from sweeper.cli._group import cli
from sweeper.errors import NotConfirmedError

# --------------------------------------------------------------------------- list


@cli.command(name="list")
@storage_options(RUN_STORAGE_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@errors
def list_sweeps(storage: StorageOptions, fmt: str) -> None:
    """Every sweep in the storage: method, indexes finished, trials by state, best value and
    last activity. Optuna studies that sweeper did not create are listed with method
    "(optuna)". Reads a few grouped queries, never every trial; creates nothing."""
    view = app_list_sweeps(storage)
    if fmt == "json":
        click.echo(json.dumps(list_record(view), indent=2, allow_nan=False))
        return
    if not view.sweeps:
        say(f"no sweeps in {view.where}")
        return
    click.echo(list_table(view))
    if view.has_plain_studies:
        say("(optuna): a study sweeper did not create (no sweep record)")


# --------------------------------------------------------------------------- delete


def delete_options(fn: click.decorators.FC) -> click.decorators.FC:
    """--purge-artifacts, --volume-dir, --kubernetes, --wait and the cluster's options as one
    ``options``."""
    fn = collect("options", DeleteOptions,
                 ("purge_artifacts", "volume_dir", "on_cluster", "cluster", "wait_s"))(fn)
    fn = cluster_options("Kubernetes: namespace (default: the one the sweep was launched "
                         "in).")(fn)
    for option in reversed([
        click.option("--purge-artifacts", is_flag=True,
                     help="Also remove the sweep's files off this machine: its artifacts in "
                          "an S3 store, its checkpoints in S3 ([prefix/]checkpoints/NAME-UID8/) "
                          "and on a Kubernetes checkpoint volume (where it is mounted here, see "
                          "--volume-dir). Without it they are kept, and delete says where."),
        click.option("--volume-dir", type=click.Path(exists=True, file_okay=False,
                                                     path_type=Path), metavar="DIR",
                     help="With --purge-artifacts: where the sweep's "
                          "kubernetes.checkpoint_volume is mounted on this machine (default: "
                          "its mount path in the pods, when the sweep's checkpoints are "
                          "there)."),
        click.option("--kubernetes/--no-kubernetes", "on_cluster", default=None,
                     help="Also delete the sweep's Kubernetes Jobs (default: when the sweep "
                          "was launched there and a cluster is configured; an unreachable "
                          "cluster is then a warning, with --kubernetes an error)."),
        click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=60.0,
                     show_default=True,
                     help="Kubernetes: seconds to wait for the Jobs' pods to be gone."),
    ]):
        fn = option(fn)
    return fn


@cli.command()
@click.argument("name")
@storage_options()
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@delete_options
@errors
def delete(name: str, storage: StorageOptions, yes: bool, options: DeleteOptions) -> None:
    """Delete a sweep: its study (every trial), the files of its artifacts in a local
    (filesystem) store, its local logs and checkpoints, and on Kubernetes its Jobs; with
    --purge-artifacts also its artifacts and checkpoints in S3 and on a checkpoint volume.
    Says what it removed and what it kept. Asks first unless --yes.

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
    plan = plan_deletion(name, storage, options)
    for warning in plan.warnings:
        say(f"warning: {warning}")
    confirm(plan, yes)
    render_deletion(delete_sweep(plan))


def render_deletion(report: DeletionReport) -> None:
    for warning in report.warnings:
        say(f"warning: {warning}")
    for line in report.lines:
        click.echo(line)
    if report.kept:
        click.echo(f"kept {'; '.join(report.kept)}")


def confirm(plan: DeletionPlan, yes: bool) -> None:
    """Ask on the terminal; without one (a script, CI) only --yes deletes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmedError(f"{plan.question}: not confirmed (stdin is not a terminal); "
                                "pass --yes to delete without asking")
    say(plan.question)
    if not click.confirm("Delete?", default=False, err=True):
        raise click.Abort()
