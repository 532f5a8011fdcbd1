"""Commands that look at or act on where a sweep ran: logs (local files or pods), cancel."""

from __future__ import annotations

import sys

import click

from sweeper.app.backends import KINDS, BackendOptions
from sweeper.app.manage import LogRequest, follow_logs, resume_hint
from sweeper.app.manage import cancel as cancel_sweep
from sweeper.app.manage import logs as read_log
from sweeper.app.options import DEFAULT_LOG_DIR, ClusterOptions, StorageOptions
from sweeper.cli._common import cluster_options, collect, errors, say, storage_options
from sweeper.cli._group import cli
from sweeper.errors import EXIT_INTERRUPTED


def _write(text: str) -> None:
    click.echo(text, nl=False)


def log_request(fn: click.decorators.FC) -> click.decorators.FC:
    """--index, --attempt, --tail, --follow as one ``request``."""
    fn = collect("request", LogRequest, ("index", "attempt", "tail", "follow"))(fn)
    for option in reversed([
        click.option("--index", "-i", type=click.IntRange(min=0), required=True,
                     help="The sweep index (JOB_ID) whose log to show."),
        click.option("--attempt", type=click.IntRange(min=0), default=None, metavar="K",
                     help="Attempt K of the index (0: the first, as `sweeper export` counts "
                          "them; default: the latest)."),
        click.option("--follow", "-f", is_flag=True,
                     help="Keep printing the latest attempt's log as it is written, until it "
                          "ends."),
        click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N",
                     help="Only the last N lines."),
    ]):
        fn = option(fn)
    return fn


def backend_options(fn: click.decorators.FC) -> click.decorators.FC:
    """--backend, --log-dir and the cluster's options as one ``where``."""
    fn = collect("where", lambda backend, log_dir, cluster: BackendOptions(
        backend, log_dir, cluster), ("backend", "log_dir", "cluster"))(fn)
    fn = cluster_options("Kubernetes: default: the namespace the sweep was launched in (from "
                         "the storage).")(fn)
    fn = click.option("--log-dir", type=click.Path(file_okay=False), default=None,
                      help="Local: the --log-dir that `run` was given (default: the one it "
                           f"recorded, else {DEFAULT_LOG_DIR}).")(fn)
    return click.option("--backend", type=click.Choice(KINDS), default=None,
                        help="Where the sweep ran (default: what `run` recorded on the "
                             "study).")(fn)


@cli.command()
@click.argument("name")
@log_request
@backend_options
@storage_options()
@errors
def logs(name: str, request: LogRequest, where: BackendOptions,
         storage: StorageOptions) -> None:
    """The log of index I: its local log file, or the log of the pod that ran it (across
    resume Jobs); the latest attempt unless --attempt. NAME may be the sweep's spec file."""
    try:
        if request.follow:
            follow_logs(name, request, storage, where, _write, say)
            return
        view = read_log(name, request, storage, where)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    for note in view.notes:
        say(note)
    _write(view.text)


@cli.command()
@click.argument("name")
@storage_options()
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for the Jobs' pods to be gone.")
@cluster_options("Default: the namespace the sweep was launched in (from the storage).")
@errors
def cancel(name: str, storage: StorageOptions, wait_s: float, cluster: ClusterOptions) -> None:
    """Delete the sweep's Jobs and their pods. The study stays: `sweeper resume NAME` runs
    what is missing. NAME may be the sweep's spec file."""
    view = cancel_sweep(name, storage, cluster, wait_s=wait_s)
    for note in view.notes:
        say(note)
    for line in view.lines:
        click.echo(line)
    if view.unfinished is None:
        say("the storage was not opened: running trials stay RUNNING until their heartbeat "
            "goes stale (then a resume retries them)")
        return
    if view.paused_trials:  # promoted ones (scheduler:), with their rung and checkpoint
        click.echo(f"put back {len(view.paused_trials)} promoted trial(s) paused at their "
                   "rung (a resume promotes them again): "
                   + ", ".join(f"#{n}" for n in view.paused_trials))
    if view.failed_trials:
        click.echo(f"marked {len(view.failed_trials)} running trial(s) FAIL (cancelled): "
                   + ", ".join(f"#{n}" for n in view.failed_trials))
    hint = resume_hint(view)
    if hint:
        say(hint)
