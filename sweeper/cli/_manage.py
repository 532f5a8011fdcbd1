"""Commands that manage the sweeps of a storage: list, delete."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from sweeper import protocol
from sweeper.cli._common import (
    _clients,
    _cluster_options,
    _errors,
    _load_target,
    _open_existing,
    _target,
    name_storage_option,
    storage_option,
)
from sweeper.cli._group import cli
from sweeper.errors import NotConfirmedError
from sweeper.study.values import SweepSummary

#: The trial states ``list`` shows a column for, in this order.
_STATES = ("COMPLETE", "PRUNED", "RUNNING", "WAITING", "FAIL")


# --------------------------------------------------------------------------- list


@cli.command(name="list")
@storage_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@_errors
def list_sweeps(storage: str | None, fmt: str) -> None:
    """Every sweep in the storage: method, indexes finished, trials by state, best value and
    last activity. Optuna studies that sweeper did not create are listed with method
    "(optuna)". Reads a few grouped queries, never every trial; creates nothing."""
    from sweeper.report import format_table
    from sweeper.study.urls import redact, resolve_storage_url

    url = resolve_storage_url(storage)
    sweeps = _open_existing(url).list_sweeps()
    if fmt == "json":
        click.echo(json.dumps([_record(s) for s in sweeps], indent=2, allow_nan=False))
        return
    if not sweeps:
        click.echo(f"no sweeps in {redact(url)}", err=True)
        return
    click.echo(format_table(
        ["name", "method", "finished", *(s.lower() for s in _STATES), "best",
         "last activity (UTC)"],
        [[s.name, s.method if s.is_sweep else "(optuna)",
          f"{s.finished_indexes}/{s.indexes}" if s.is_sweep else None,
          *(s.trials_by_state.get(state, 0) for state in _STATES), _best_cell(s),
          s.last_activity.isoformat(sep=" ", timespec="seconds") if s.last_activity else None]
         for s in sweeps]))
    if any(not s.is_sweep for s in sweeps):
        click.echo("(optuna): a study sweeper did not create (no sweep record)", err=True)


def _best_cell(s: SweepSummary) -> str | None:
    if s.best is None:
        return "pareto: sweeper best" if len(s.directions) > 1 and \
            s.trials_by_state.get("COMPLETE") else None
    value = f"{s.best:.6g}"
    return f"{s.metrics[0]}={value}" if s.metrics else value


def _record(s: SweepSummary) -> dict[str, Any]:
    """``list --format json``: one object per study (fields may be added, never renamed)."""
    metrics: list[str | None] = list(s.metrics) or [None] * len(s.directions)
    return {"name": s.name, "sweeper": s.is_sweep, "method": s.method, "indexes": s.indexes,
            "finished_indexes": s.finished_indexes,
            "objectives": [{"metric": m, "direction": d}
                           for m, d in zip(metrics, s.directions, strict=False)],
            "trials_by_state": s.trials_by_state,
            "best_value": s.best if s.best is None or math.isfinite(s.best) else str(s.best),
            "last_activity": s.last_activity.isoformat() if s.last_activity else None}


# --------------------------------------------------------------------------- delete


@cli.command()
@click.argument("name")
@name_storage_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--purge-artifacts", is_flag=True,
              help="Also remove the sweep's files off this machine: its artifacts in an S3 "
                   "store, its checkpoints in S3 ([prefix/]checkpoints/NAME-UID8/) and on a "
                   "Kubernetes checkpoint volume (where it is mounted here, see --volume-dir). "
                   "Without it they are kept, and delete says where.")
@click.option("--volume-dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              metavar="DIR",
              help="With --purge-artifacts: where the sweep's kubernetes.checkpoint_volume is "
                   "mounted on this machine (default: its mount path in the pods, when the "
                   "sweep's checkpoints are there).")
@click.option("--kubernetes/--no-kubernetes", "kube", default=None,
              help="Also delete the sweep's Kubernetes Jobs (default: when the sweep was "
                   "launched there and a cluster is configured; an unreachable cluster is "
                   "then a warning, with --kubernetes an error).")
@click.option("--namespace", "-n", metavar="NS",
              help="Kubernetes: namespace (default: the one the sweep was launched in).")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Kubernetes: seconds to wait for the Jobs' pods to be gone.")
@_cluster_options
@_errors
def delete(name: str, storage: str | None, yes: bool, purge_artifacts: bool,
           volume_dir: Path | None, kube: bool | None, namespace: str | None, wait_s: float,
           kubeconfig: str | None, context: str | None) -> None:
    """Delete a sweep: its study (every trial), the files of its artifacts in a local
    (filesystem) store, its local logs and checkpoints, and on Kubernetes its Jobs; with
    --purge-artifacts also its artifacts and checkpoints in S3 and on a checkpoint volume.
    Says what it removed and what it kept. Asks first unless --yes.

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
    from sweeper.artifacts import describe, remove_artifacts
    from sweeper.purge import kept, purge, purge_summary
    from sweeper.study.remote.client import is_proxy_url
    from sweeper.study.urls import redact

    if volume_dir is not None and not purge_artifacts:
        raise click.UsageError("--volume-dir goes with --purge-artifacts")
    target = _target(name, storage)
    sweep = _load_target(target)
    counts = sweep.storage.state_counts(sweep.study_id)
    artifact_ids = sweep.storage.artifact_ids(sweep.study_id)
    remote = _remote_state(sweep, artifact_ids, volume_dir)
    ns = namespace or sweep.spec.kubernetes.namespace
    clients, jobs = _sweep_jobs_to_delete(sweep, kube, ns, kubeconfig, context)
    # A filesystem store's default place follows the database's URL (through a proxy: the one
    # it serves, as its runners derived it); a store of this machine only when it is direct.
    local_artifacts = bool(artifact_ids) and sweep.spec.artifacts.store == "filesystem" \
        and not is_proxy_url(target.url)
    what = [f"{sum(counts.values())} trial(s) in {redact(target.url)}"]
    if local_artifacts:
        what.append(f"{len(artifact_ids)} artifact(s) in "
                    f"{describe(sweep.spec.artifacts, target.url)}")
    what += [s for s in [purge_summary(remote) if purge_artifacts else None] if s]
    if jobs:
        what.append(f"{len(jobs)} Kubernetes Job(s) in namespace {ns}: {', '.join(jobs)}")
    left = [] if purge_artifacts else kept(remote)
    _confirm(f"delete sweep {sweep.name}: " + "; ".join(what)
             + (f" (kept: {'; '.join(left)})" if left else ""), yes)
    if clients is not None:
        _delete_jobs(clients, sweep.name, ns, wait_s, required=kube is True)
    # Off this machine first: if S3 refuses, the study (and so the artifact ids) stays.
    removed, left = purge(remote, volume_dir) if purge_artifacts else ([], left)
    local = _local_state(sweep)
    sweep.storage.delete_study(sweep.study_id)
    click.echo(f"deleted sweep {sweep.name} ({sum(counts.values())} trial(s)) from "
               f"{redact(target.url)}")
    if local_artifacts:
        click.echo(remove_artifacts(sweep.spec.artifacts, target.url, artifact_ids))
    for line in removed:
        click.echo(line)
    for kind, path in local:
        if path.is_dir():
            shutil.rmtree(path)
            click.echo(f"removed the local {kind} {path}")
    if left:
        click.echo(f"kept {'; '.join(left)}")


def _local_state(sweep: Any) -> list[tuple[str, Path]]:
    """The sweep's own directories on this machine (logs, checkpoints), as its local launches
    recorded them; a sweep from before identities (no uid) shares them by name: kept."""
    if sweep.uid is None:
        return []
    attrs = sweep.storage.get_study_user_attrs(sweep.study_id)
    return [(what, Path(attrs[key])) for what, key in (
        ("logs", protocol.LOG_DIR_ATTR), ("checkpoints", protocol.CHECKPOINT_DIR_ATTR))
        if isinstance(attrs.get(key), str) and Path(attrs[key]).name == sweep.state_key]


def _remote_state(sweep: Any, artifact_ids: list[str], volume_dir: Path | None) -> Any:
    """The sweep's files off this machine: S3 artifacts and checkpoints, and the checkpoint
    volume's directory when the sweep was launched on Kubernetes (only pods write there)."""
    from sweeper.backends.pod import checkpoint_dir
    from sweeper.purge import remote_state

    k = sweep.spec.kubernetes
    vol = k.volume(k.checkpoint_volume) if k.checkpoint_volume else None
    launched = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.LAUNCHES_ATTR)
    if volume_dir is not None and vol is None:
        raise click.BadParameter(f"sweep {sweep.name} has no kubernetes.checkpoint_volume",
                                 param_hint="--volume-dir")
    volume = (vol.name, vol.mount_path, checkpoint_dir(k)) \
        if vol is not None and (launched or volume_dir is not None) else None
    return remote_state(sweep.state_key, sweep.uid is not None, sweep.spec.artifacts,
                        artifact_ids, volume)


def _sweep_jobs_to_delete(sweep: Any, kube: bool | None, ns: str, kubeconfig: str | None,
                          context: str | None) -> tuple[Any | None, list[str]]:
    """The client to delete the sweep's Jobs with (None: not on Kubernetes, or not asked)
    and the Jobs' names. Automatic only for sweeps launched there with a cluster configured;
    an unreachable cluster is a warning then (an error with --kubernetes)."""
    from sweeper.backends.kubernetes import sweep_jobs
    from sweeper.errors import BackendError

    if kube is False:
        return None, []
    clients = _clients(kubeconfig, context, timeout_s=30.0 if kube else 10.0)
    if kube is None:
        launched = sweep.storage.get_study_user_attrs(sweep.study_id).get(
            protocol.LAUNCHES_ATTR)
        if not launched or not clients.configured():
            return None, []
    try:
        return clients, [j.name for j in sweep_jobs(clients, ns, sweep.name, sweep.spec.trials)]
    except BackendError as e:
        if kube:
            raise
        click.echo(f"warning: the sweep's Kubernetes Jobs are not deleted: {e}", err=True)
        return None, []


def _delete_jobs(clients: Any, name: str, ns: str, wait_s: float, *, required: bool) -> None:
    """Delete the sweep's Jobs; their pods, and the spec's ConfigMap that each Job owns, go
    with them through the garbage collector. A ConfigMap nobody owns (applied on its own, by
    GitOps or an older sweeper) is deleted here."""
    from sweeper.backends.kubernetes import KubeClient, cancel
    from sweeper.backends.manifests import spec_configmap_name
    from sweeper.errors import BackendError

    api = KubeClient(clients, name)
    configmap = spec_configmap_name(name)
    try:
        before = api.read_configmap(ns, configmap)
        result = cancel(clients, name, ns, wait_s=wait_s)
    except BackendError as e:
        if required:
            raise
        click.echo(f"warning: the sweep's Kubernetes Jobs are not deleted: {e}", err=True)
        return
    for job in result.jobs:
        click.echo(f"deleted Job {ns}/{job}" + (" (its pods still terminating)"
                                                if result.unfinished else ""))
    if before is None:
        return
    if before["metadata"].get("ownerReferences"):
        click.echo(f"ConfigMap {ns}/{configmap} goes with its Job (garbage collector)")
    elif api.delete_configmap(ns, configmap):
        click.echo(f"deleted ConfigMap {ns}/{configmap}")


def _confirm(question: str, yes: bool) -> None:
    """Ask on the terminal; without one (a script, CI) only --yes deletes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmedError(f"{question}: not confirmed (stdin is not a terminal); pass "
                                "--yes to delete without asking")
    click.echo(question, err=True)
    if not click.confirm("Delete?", default=False, err=True):
        raise click.Abort()
