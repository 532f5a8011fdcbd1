"""Commands that act on the sweep's Kubernetes Jobs directly: logs, cancel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sweeper import protocol
from sweeper.cli._common import (
    _clients,
    _cluster_options,
    _errors,
    _load_target,
    _ranges_of,
    _target,
    name_storage_option,
)
from sweeper.cli._group import cli
from sweeper.errors import SweeperError


def _stored_sweep(name_or_spec: str, storage: str | None) -> tuple[str, Any | None]:
    """The sweep's name and its record if the storage is at hand (logs/cancel work without
    it too). NAME may be the spec file."""
    target = _target(name_or_spec, storage)
    if target.url == protocol.DEFAULT_STORAGE and not Path("sweeps.db").exists():
        return target.name, None
    try:
        return target.name, _load_target(target)
    except SweeperError as e:
        click.echo(f"note: {e}", err=True)
        return target.name, None


@cli.command()
@click.argument("name")
@click.option("--index", "-i", type=click.IntRange(min=0), required=True,
              help="The sweep index (JOB_ID) whose pod log to show.")
@click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N",
              help="Only the last N lines.")
@click.option("--namespace", "-n", metavar="NS",
              help="Default: the namespace the sweep was launched in (from the storage).")
@name_storage_option
@_cluster_options
@_errors
def logs(name: str, index: int, tail: int | None, namespace: str | None, storage: str | None,
         kubeconfig: str | None, context: str | None) -> None:
    """The log of the pod that ran index I (its latest attempt, across resume Jobs). NAME may
    be the sweep's spec file."""
    from sweeper.backends.kubernetes import index_log
    from sweeper.spec import KubernetesSpec

    name, sweep = _stored_sweep(name, storage)
    ns = namespace or (sweep.spec.kubernetes.namespace if sweep else KubernetesSpec().namespace)
    log = index_log(_clients(kubeconfig, context), ns, name,
                    sweep.spec.trials if sweep else None, index, tail_lines=tail)
    click.echo(f"pod {ns}/{log.pod} (Job {log.job}, index {index}, attempt {log.attempt + 1}, "
               f"{log.phase})", err=True)
    click.echo(log.text, nl=not log.text.endswith("\n"))


@cli.command()
@click.argument("name")
@name_storage_option
@click.option("--namespace", "-n", metavar="NS",
              help="Default: the namespace the sweep was launched in (from the storage).")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for the Jobs' pods to be gone.")
@_cluster_options
@_errors
def cancel(name: str, storage: str | None, namespace: str | None, wait_s: float,
           kubeconfig: str | None, context: str | None) -> None:
    """Delete the sweep's Jobs and their pods. The study stays: `sweeper resume NAME` runs
    what is missing. NAME may be the sweep's spec file."""
    from sweeper.backends.kubernetes import cancel as cancel_jobs
    from sweeper.spec import KubernetesSpec
    from sweeper.study import index_table, unfinished_indexes

    name, sweep = _stored_sweep(name, storage)
    ns = namespace or (sweep.spec.kubernetes.namespace if sweep else KubernetesSpec().namespace)
    result = cancel_jobs(_clients(kubeconfig, context), name, ns, sweep=sweep, wait_s=wait_s)
    if not result.jobs:
        click.echo(f"no Job of sweep {name} in namespace {ns}")
    for job in result.jobs:
        click.echo(f"deleted Job {ns}/{job}")
    if result.jobs:
        click.echo(f"deleted {result.pods} pod(s)" + (
            f" (still terminating after {wait_s:.0f}s)" if result.unfinished else ""))
    if sweep is None:
        click.echo("the storage was not opened: running trials stay RUNNING until their "
                   "heartbeat goes stale (then a resume retries them)", err=True)
        return
    if result.failed_trials:
        click.echo(f"marked {len(result.failed_trials)} running trial(s) FAIL (cancelled): "
                   + ", ".join(f"#{n}" for n in result.failed_trials))
    missing = unfinished_indexes(index_table(sweep.storage, sweep.spec, sweep.study_id))
    if missing:
        click.echo(f"the study stays; `sweeper resume {name}` runs the {len(missing)} "
                   f"unfinished index(es): {_ranges_of(missing)}", err=True)
