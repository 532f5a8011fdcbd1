"""Commands that launch a sweep: run, resume. Their options travel as one
:class:`~sweeper.app.options.LaunchOptions` (:func:`launch_options`); the launch is
:mod:`sweeper.app.launch`."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from sweeper.app.backends import KINDS
from sweeper.app.launch import (
    Launched,
    conclude,
    dashboard_hint,
    launch,
    summary_record,
    summary_text,
)
from sweeper.app.launch import resume as resume_sweep
from sweeper.app.options import DEFAULT_LOG_DIR, LaunchOptions
from sweeper.cli._common import (
    NAME_STORAGE_HELP,
    RUN_STORAGE_HELP,
    cluster_options,
    collect,
    errors,
    job_options,
    say,
    set_option,
)
from sweeper.cli._group import cli, group_options
from sweeper.cli._proxy import proxy_options
from sweeper.cli._stop import ignore_stop_option

F = TypeVar("F", bound=Callable[..., Any])

allow_cpu_option = click.option(
    "--allow-cpu", is_flag=True,
    help="Local backend: run on the CPU when the spec asks for GPUs and none is visible "
         "(default: stop with exit code 2).")
code_option = click.option(
    "--code", "code_choice", type=click.Choice(["new"]), default=None,
    help="new: the code (trial.code) changed since the sweep last ran; run its remaining "
         "trials on the new snapshot (default: a change stops the launch with exit code 2).")
run_format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="json: instead of the best-trials table, one summary object on stdout (counts, "
         "failed indexes with reasons, best trial).")


def _options(storage_url: str | None, code_choice: str | None, **given: Any) -> LaunchOptions:
    return LaunchOptions(storage=group_options().storage(storage_url),
                         new_code=code_choice == "new", **given)


def launch_options(*, stored: bool) -> Callable[[F], F]:
    """run's (``stored`` False) or resume's options as one ``options`` parameter."""
    keys = ["storage_url", "backend", "parallelism", "log_dir", "job", "cluster", "detach",
            "allow_cpu", "ignore_stop", "code_choice"]
    keys += [] if stored else ["overrides", "proxy", "metrics_port"]

    def decorate(fn: F) -> F:
        fn = collect("options", _options, tuple(keys))(fn)
        decorators = [
            click.option("--storage", "storage_url", metavar="URL",
                         help=NAME_STORAGE_HELP if stored else RUN_STORAGE_HELP),
            click.option("--backend", type=click.Choice(KINDS), default=None,
                         help="Default: where the sweep was last launched (kubernetes or "
                              "local).") if stored else
            click.option("--backend", type=click.Choice(KINDS), default=KINDS[0],
                         show_default=True),
            click.option("--parallelism", "-p", type=click.IntRange(min=1),
                         help="Trials at once (default: the "
                              f"{'stored ' if stored else ''}spec's parallelism)."),
            click.option("--log-dir", type=click.Path(file_okay=False), default=DEFAULT_LOG_DIR,
                         show_default=True,
                         help="Local backend: one log file per index under NAME-UID8/."),
            job_options, cluster_options(),
            click.option("--detach", is_flag=True,
                         help="Kubernetes: create the Job and return without watching it."),
            *([] if stored else [set_option]),
            allow_cpu_option, ignore_stop_option, code_option,
            *([] if stored else [proxy_options]),
        ]
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return decorate


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@launch_options(stored=False)
@run_format_option
@errors
def run(spec_file: str, options: LaunchOptions, fmt: str) -> None:
    """Create (or resume) the sweep and run every index that has no finished trial."""
    finish(launch(spec_file, options, say), fmt)


@cli.command()
@click.argument("name")
@launch_options(stored=True)
@run_format_option
@errors
def resume(name: str, options: LaunchOptions, fmt: str) -> None:
    """Run only the indexes of a stored sweep that have no finished trial (its spec comes from
    the study; on Kubernetes a new, sparse Job NAME-r<N>). NAME may be the sweep's spec file
    (name and storage: are read from it; `run` applies a changed file, resume does not)."""
    finish(resume_sweep(name, options, say), fmt)


def finish(done: Launched, fmt: str) -> None:
    """The summary of the sweep (stdout), then what the launch says last; exit as it ended."""
    if not done.started:
        return
    if fmt == "json":
        click.echo(json.dumps(summary_record(done), indent=2))
    else:
        click.echo(summary_text(done))
    say(dashboard_hint(done))
    code = conclude(done, say)
    if code:
        sys.exit(code)
