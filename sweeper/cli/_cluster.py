"""Commands that look at or act on where a sweep ran: logs (local files or pods), cancel."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from sweeper import protocol
from sweeper.cli._common import (
    DEFAULT_LOG_DIR,
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
              help="The sweep index (JOB_ID) whose log to show.")
@click.option("--attempt", type=click.IntRange(min=0), default=None, metavar="K",
              help="Attempt K of the index (0: the first, as `sweeper export` counts them; "
                   "default: the latest).")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing the latest attempt's log as it is written, until it ends.")
@click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N",
              help="Only the last N lines.")
@click.option("--backend", type=click.Choice(["local", "kubernetes"]), default=None,
              help="Where the sweep ran (default: what `run` recorded on the study).")
@click.option("--log-dir", type=click.Path(file_okay=False), default=None,
              help="Local: the --log-dir that `run` was given (default: the one it recorded, "
                   f"else {DEFAULT_LOG_DIR}).")
@click.option("--namespace", "-n", metavar="NS",
              help="Kubernetes: default: the namespace the sweep was launched in (from the "
                   "storage).")
@name_storage_option
@_cluster_options
@_errors
def logs(name: str, index: int, attempt: int | None, follow: bool, tail: int | None,
         backend: str | None, log_dir: str | None, namespace: str | None, storage: str | None,
         kubeconfig: str | None, context: str | None) -> None:
    """The log of index I: its local log file, or the log of the pod that ran it (across
    resume Jobs); the latest attempt unless --attempt. NAME may be the sweep's spec file."""
    if follow and attempt is not None:
        raise click.UsageError("--follow follows the latest attempt; leave out --attempt")
    name, sweep = _stored_sweep(name, storage)
    if sweep is not None and index >= sweep.spec.trials:
        raise click.BadParameter(f"sweep {name} has indexes 0..{sweep.spec.trials - 1}",
                                 param_hint="--index")
    attrs = sweep.storage.get_study_user_attrs(sweep.study_id) if sweep is not None else {}
    if sweep is not None:
        key = sweep.state_key
    else:  # no storage at hand: the sweep's newest log directory under its name
        key = _newest_log_key(Path(log_dir or DEFAULT_LOG_DIR), name)
    local_dir = _shown(Path(log_dir) / key if log_dir else
                       Path(attrs.get(protocol.LOG_DIR_ATTR) or Path(DEFAULT_LOG_DIR) / key))
    clients = _clients(kubeconfig, context)
    kind = backend or _where_it_ran(attrs, sweep, local_dir, index, clients)
    try:
        if kind == "local":
            _local_log(sweep, local_dir, index, attempt, follow, tail)
        else:
            _pod_log(sweep, name, index, attempt, follow, tail, namespace, clients)
    except KeyboardInterrupt:
        sys.exit(130)


def _newest_log_key(root: Path, name: str) -> str:
    """The most recently written of NAME-UID8 (and a plain NAME from before identities)."""
    found = [p for p in root.glob(f"{name}-*") if p.is_dir() and len(p.name) == len(name) + 9]
    found += [root / name] if (root / name).is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime).name if found else name


def _where_it_ran(attrs: dict[str, Any], sweep: Any | None, local_dir: Path, index: int,
                  clients: Any) -> str:
    """local or kubernetes: as recorded by the last launch; else (a sweep from an older
    sweeper, or no storage at hand) where a log of the index is found."""
    recorded = attrs.get(protocol.BACKEND_ATTR)
    if recorded in ("local", "kubernetes"):
        return str(recorded)
    if attrs.get(protocol.LAUNCHES_ATTR):
        return "kubernetes"
    from sweeper.runlogs import index_log_path

    if sweep is not None or index_log_path(local_dir, index).exists():
        return "local"
    return "kubernetes" if clients.configured() else "local"


def _local_log(sweep: Any | None, log_dir: Path, index: int, attempt: int | None,
               follow: bool, tail: int | None) -> None:
    from sweeper.runlogs import follow_file, index_log_path, last_lines, read_local_log

    path = index_log_path(log_dir, index)
    if follow and not path.exists() and (sweep is None or _ended(sweep, index) is None):
        click.echo(f"waiting for index {index} to start ({path}) ...", err=True)
        while not path.exists() and (sweep is None or _ended(sweep, index) is None):
            time.sleep(0.5)
    log = read_local_log(log_dir, index, attempt)
    h = log.section.header
    what = f", attempt {h.attempt}, trial #{h.trial_number}" if h is not None else ""
    if log.segments > 1:  # promoted after a pause (scheduler:): each part has its header
        what += f", {log.segments} segments"
    held = f"; attempts in the file: {_ranges_of(list(log.attempts))}" \
        if len(log.attempts) > 1 else ""
    click.echo(f"file {log.path} (index {index}{what}{held})", err=True)
    click.echo(last_lines(log.section.text, tail), nl=False)
    if not follow:
        return
    if sweep is None:
        click.echo("(the sweep's storage is not at hand: following until Ctrl-C)", err=True)
    follow_file(log.path, log.size, lambda text: click.echo(text, nl=False),
                lambda: sweep is not None and _ended(sweep, index) is not None)
    ended = _ended(sweep, index) if sweep is not None else None
    if ended is not None:
        click.echo(f"index {index}: attempt {ended.attempt} (trial #{ended.number}) ended "
                   f"{ended.state.name}", err=True)


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory when it is below it (shorter to read)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _ended(sweep: Any, index: int) -> Any | None:
    """The latest attempt of ``index`` if it has ended (COMPLETE, PRUNED or FAIL)."""
    from optuna.trial import TrialState


    found = sweep.storage.attempts(sweep.study_id, index)
    ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return found[-1] if found and found[-1].state in ended else None


def _pod_log(sweep: Any | None, name: str, index: int, attempt: int | None, follow: bool,
             tail: int | None, namespace: str | None, clients: Any) -> None:
    from sweeper.backends.kubernetes import follow_index_log, index_log
    from sweeper.backends.kubernetes.promoted import promoted_attempt
    from sweeper.spec import KubernetesSpec

    ns = namespace or (sweep.spec.kubernetes.namespace if sweep else KubernetesSpec().namespace)
    trials = sweep.spec.trials if sweep else None
    if follow:
        pod, stream = follow_index_log(clients, ns, name, trials, index, tail_lines=tail)
        click.echo(f"pod {ns}/{pod.pod} (Job {pod.job}, index {index}, {pod.phase}; "
                   "following)", err=True)
        for text in stream:
            click.echo(text, nl=False)
        return
    log = index_log(clients, ns, name, trials, index, tail_lines=tail, attempt=attempt,
                    promoted=promoted_attempt(sweep, index, attempt) if sweep else None)
    h = log.header
    what = f"attempt {h.attempt}, trial #{h.trial_number}" if h is not None else \
        f"pod attempt {log.attempt}"
    if log.segments > 1:  # promoted after a pause (scheduler:): each part has its header
        what += f", {log.segments} segments"
    click.echo(f"pod {ns}/{log.pod} (Job {log.job}, index {index}, {what}, {log.phase})",
               err=True)
    if log.promoted_in:
        click.echo(f"promoted segments from pod(s) {', '.join(log.promoted_in)}", err=True)
    if sweep is None:
        click.echo("note: the storage is not at hand, so only the pods of this index were "
                   "read: under a promotion scheduler a segment that another pod resumed is "
                   "not shown (give --storage)", err=True)
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
    from sweeper.study import unfinished_indexes

    name, sweep = _stored_sweep(name, storage)
    ns = namespace or (sweep.spec.kubernetes.namespace if sweep else KubernetesSpec().namespace)
    result = cancel_jobs(_clients(kubeconfig, context), name, ns, sweep=sweep, wait_s=wait_s)
    if not result.jobs and not result.jobsets:
        click.echo(f"no Job of sweep {name} in namespace {ns}")
    for kind, names in (("JobSet", result.jobsets), ("Job", result.jobs)):
        for job in names:
            click.echo(f"deleted {kind} {ns}/{job}")
    if result.jobs or result.jobsets:
        click.echo(f"deleted {result.pods} pod(s)" + (
            f" (still terminating after {wait_s:.0f}s)" if result.unfinished else ""))
    if sweep is None:
        click.echo("the storage was not opened: running trials stay RUNNING until their "
                   "heartbeat goes stale (then a resume retries them)", err=True)
        return
    if result.paused_trials:  # promoted ones (scheduler:), with their rung and checkpoint
        click.echo(f"put back {len(result.paused_trials)} promoted trial(s) paused at their "
                   "rung (a resume promotes them again): "
                   + ", ".join(f"#{n}" for n in result.paused_trials))
    if result.failed_trials:
        click.echo(f"marked {len(result.failed_trials)} running trial(s) FAIL (cancelled): "
                   + ", ".join(f"#{n}" for n in result.failed_trials))
    missing = unfinished_indexes(sweep.storage.index_table(sweep.study_id, sweep.spec.index_count))
    if missing:
        click.echo(f"the study stays; `sweeper resume {name}` runs the {len(missing)} "
                   f"unfinished index(es): {_ranges_of(missing)}", err=True)
