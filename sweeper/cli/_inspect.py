"""Commands that read a stored sweep: status, best, export, dashboard. NAME may be the sweep's
spec file; nothing here creates a storage. Each parses, calls :mod:`sweeper.app` and
renders."""

from __future__ import annotations

import json
from pathlib import Path

import click

from sweeper.app.options import ClusterOptions, StorageOptions
from sweeper.app.results import best as app_best
from sweeper.app.results import best_table, export_text, serve_dashboard, write_export
from sweeper.app.results import export as app_export
from sweeper.app.status import StatusOptions, status_lines, status_record
from sweeper.app.status import status as app_status
from sweeper.cli._common import cluster_options, errors, say, storage_options
from sweeper.cli._group import cli
from sweeper.report import dumps


@cli.command()
@click.argument("name")
@storage_options()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--kubernetes/--no-kubernetes", "kube", default=None,
              help="Also show the sweep's Jobs (default: when a cluster is configured; "
                   "skipped quietly when none is).")
@cluster_options("Kubernetes: namespace (default: the one the sweep was launched in).")
@errors
def status(name: str, storage: StorageOptions, fmt: str, kube: bool | None,
           cluster: ClusterOptions) -> None:
    """Trial counts by state, the sweep's Kubernetes Jobs, and the per-index table.

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
    view = app_status(name, StatusOptions(storage, kube, cluster))
    if view.cluster is not None and view.cluster.note is not None:
        say(f"note: {view.cluster.note}")
    if fmt == "json":
        click.echo(json.dumps(status_record(view), indent=2))
        return
    for line in status_lines(view):
        click.echo(line)


@cli.command()
@click.argument("name")
@storage_options()
@click.option("--format", "fmt", type=click.Choice(["json", "yaml", "table"]), default="json",
              show_default=True)
@click.option("--download", "download_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Also fetch the best trial's artifacts into DIR "
                                  "(multi-objective: DIR/trial-N/ per Pareto-optimal trial).")
@errors
def best(name: str, storage: StorageOptions, fmt: str, download_dir: str | None) -> None:
    """The best trial (every Pareto-optimal trial for multi-objective sweeps).

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
    view = app_best(name, storage, Path(download_dir) if download_dir is not None else None)
    for number, path in view.downloaded:
        say(f"trial #{number}: {path}")
    if fmt == "table":
        click.echo(best_table(view))
        return
    click.echo(dumps(view.document(), fmt))


@cli.command()
@click.argument("name")
@storage_options()
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv",
              show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Write to this file instead of stdout.")
@errors
def export(name: str, storage: StorageOptions, fmt: str, output: str) -> None:
    """Every trial of the sweep (all states, all attempts) as CSV or JSON, for scripts.

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
    doc = app_export(name, storage)
    if output == "-":
        click.echo(export_text(doc, fmt), nl=False)
        return
    write_export(doc, fmt, Path(output))
    say(f"wrote {len(doc['trials'])} trials of {doc['study']} to {output}")


@cli.command()
@click.argument("name", required=False)
@storage_options()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8080, show_default=True)
@errors
def dashboard(name: str | None, storage: StorageOptions, host: str, port: int) -> None:
    """Serve optuna-dashboard on the sweep storage (works while a sweep runs).

    NAME (optional) opens that sweep's page; it may be the sweep's spec file (name and
    storage: are read from it)."""
    serve_dashboard(name, storage, host, port, say)
