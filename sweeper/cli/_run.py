"""Commands that launch a sweep: run, resume; the launch itself and its summary."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sweeper import protocol
from sweeper.cli._common import (
    _clients,
    _cluster_options,
    _errors,
    _job_options,
    _load,
    _open_sweep,
    _ranges_of,
    storage_option,
)
from sweeper.cli._group import cli
from sweeper.cli._proxy import proxy_options, run_extras
from sweeper.errors import SweepFailedError

if TYPE_CHECKING:
    from sweeper.backends.base import Backend, RunResult

EXIT_INTERRUPTED = 130


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@storage_option
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Trials at once (default: the spec's parallelism).")
@click.option("--backend", type=click.Choice(["local", "kubernetes"]), default="local",
              show_default=True)
@click.option("--log-dir", type=click.Path(file_okay=False), default=".sweeper/logs",
              show_default=True, help="Local backend: one log file per index under NAME/.")
@_job_options
@_cluster_options
@click.option("--detach", is_flag=True,
              help="Kubernetes: create the Job and return without watching it.")
@proxy_options
@_errors
def run(spec_file: str, storage: str | None, parallelism: int | None, backend: str,
        log_dir: str, image: str | None, namespace: str | None, storage_secret: str | None,
        storage_proxy: str | None, kubeconfig: str | None, context: str | None, detach: bool,
        proxy: bool | None, metrics_port: int | None) -> None:
    """Create (or resume) the sweep and run every index that has no finished trial."""
    from sweeper.backends.manifests import with_kubernetes
    from sweeper.study import resolve_storage_url

    spec = _load(spec_file, check_entrypoint=backend == "local")
    spec = spec.with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret,
                           storage_proxy=storage_proxy)
    url = resolve_storage_url(storage, spec)
    extras = run_extras(backend, proxy, metrics_port, url, spec.name)
    _launch(spec, url, _backend(backend, spec, log_dir, kubeconfig, context, detach, **extras))


@cli.command()
@click.argument("name")
@storage_option
@click.option("--backend", type=click.Choice(["local", "kubernetes"]), default=None,
              help="Default: kubernetes when the sweep was launched there, else local.")
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Trials at once (default: the stored spec's parallelism).")
@click.option("--log-dir", type=click.Path(file_okay=False), default=".sweeper/logs",
              show_default=True, help="Local backend: one log file per index under NAME/.")
@_job_options
@_cluster_options
@click.option("--detach", is_flag=True,
              help="Kubernetes: create the Job and return without watching it.")
@_errors
def resume(name: str, storage: str | None, backend: str | None, parallelism: int | None,
           log_dir: str, image: str | None, namespace: str | None, storage_secret: str | None,
           storage_proxy: str | None, kubeconfig: str | None, context: str | None,
           detach: bool) -> None:
    """Run only the indexes of a stored sweep that have no finished trial (its spec comes from
    the study; on Kubernetes a new, sparse Job NAME-r<N>)."""
    from sweeper.backends.manifests import with_kubernetes

    sweep, url = _open_sweep(name, storage)
    spec = sweep.spec.with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret,
                           storage_proxy=storage_proxy)
    if backend is None:
        launched = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.LAUNCHES_ATTR)
        backend = "kubernetes" if launched else "local"
    _launch(spec, url, _backend(backend, spec, log_dir, kubeconfig, context, detach))


def _backend(kind: str, spec: Any, log_dir: str, kubeconfig: str | None, context: str | None,
             detach: bool, proxy: bool | None = None, metrics: Any = None) -> Backend:
    if kind == "local":
        from sweeper.backends.local import LocalBackend

        return LocalBackend(Path(log_dir) / spec.name, proxy=proxy, metrics=metrics)
    return _kubernetes_backend(kubeconfig, context, detach)


def _kubernetes_backend(kubeconfig: str | None, context: str | None, detach: bool) -> Backend:
    import os

    from sweeper.backends.kubernetes import KubernetesBackend

    clients = _clients(kubeconfig, context)
    clients.api_client()  # a missing or broken kubeconfig fails here, before storage is touched
    return KubernetesBackend(clients, detach=detach,
                             poll_interval_s=protocol.env_float(
                                 os.environ, protocol.ENV_POLL_INTERVAL,
                                 protocol.DEFAULT_POLL_INTERVAL_S),
                             echo=lambda line: click.echo(line, err=True))


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _launch(spec: Any, url: str, backend: Backend) -> None:
    """Create or resume the sweep of ``spec`` (its parallelism included: the backend reads it
    from ``sweep.spec``), run what is unfinished, and exit as the outcome says."""
    from sweeper.report import Progress
    from sweeper.study import (
        create_or_resume,
        index_table,
        open_storage,
        redact,
        unfinished_indexes,
    )

    storage = open_storage(url)
    sweep, created = create_or_resume(storage, spec)
    todo = unfinished_indexes(index_table(storage, spec, sweep.study_id))
    # SIGTERM (a CI job cancelled, `kill`) stops the sweep the same orderly way as Ctrl-C.
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    done = spec.trials - len(todo)
    click.echo(f"sweep {spec.name}: {spec.method}, {spec.trials} indexes, parallelism "
               f"{spec.parallelism}, backend {backend.name}, storage {redact(url)}", err=True)
    if not created:
        click.echo(f"resuming: {done} of {spec.trials} indexes already finished", err=True)
    progress = Progress(sweep)
    result = None
    if todo:
        try:
            result = backend.run(sweep, todo, storage_url=url, tick=progress.tick)
        finally:
            progress.close()
    _summary(sweep, url)
    if result is not None and not _report_launch(result, len(todo)):
        return  # detached: the Job runs on, the study is not final yet
    missing = unfinished_indexes(index_table(storage, spec, sweep.study_id))
    if missing:
        raise SweepFailedError(_missing_message(spec.name, backend.name, missing, result))


def _report_launch(result: RunResult, launched: int) -> bool:
    """Print what the backend says of this launch (counts, its messages); exit 130 if it was
    interrupted. False when detached: nothing more can be said until the Job ends."""
    if not result.detached:
        failed = f", {len(result.failed)} failed for good ({_ranges_of(list(result.failed))})" \
            if result.failed else ""
        click.echo(f"this launch: {len(result.finished)} of {launched} indexes finished"
                   f"{failed}", err=True)
    for message in result.messages:
        click.echo(message, err=True)
    if result.detached:
        if result.interrupted:
            sys.exit(EXIT_INTERRUPTED)
        return False
    if result.interrupted:
        click.echo("interrupted: running trials were stopped and marked FAIL; run the same "
                   "command again to finish the missing indexes", err=True)
        sys.exit(EXIT_INTERRUPTED)
    return True


def _missing_message(name: str, backend: str, missing: list[int],
                     result: RunResult | None) -> str:
    """Why ``missing`` indexes have no finished trial. The study is the truth; an index the
    backend saw finish but the study lacks means its runner wrote to another database."""
    reported = set(result.finished) if result is not None else set()
    lost = [i for i in missing if i in reported]
    failed = [i for i in missing if i not in reported]
    parts = [f"{len(failed)} index(es) failed for good: {_ranges_of(failed)}"] if failed else []
    if lost:
        parts.append(f"{len(lost)} index(es) finished on the {backend} backend but have no "
                     f"finished trial in this storage (do the runners use the same database?): "
                     f"{_ranges_of(lost)}")
    return "; ".join(parts) + f"; see `sweeper status {name}`"


def _summary(sweep: Any, url: str) -> None:
    from sweeper.report import format_table, top_trials
    from sweeper.study import redact

    study = sweep.study()
    top = top_trials(study, 5)
    metrics = [o.metric for o in sweep.spec.objectives]
    names = [p.name for p in sweep.spec.parameters]
    if top:
        title = "Pareto-optimal trials" if len(metrics) > 1 else "best trials"
        click.echo(f"\n{title} of {sweep.name}:")
        click.echo(format_table(["trial", "index", *metrics, *names], [
            [t.number, t.user_attrs.get(protocol.INDEX_ATTR), *(t.values or []),
             *(t.params.get(n) for n in names)] for t in top]))
    else:
        click.echo(f"\n{sweep.name}: no complete trial yet")
    shown = redact(url).replace(":***@", ":<password>@")
    storage_flag = "" if url == "sqlite:///sweeps.db" else f" --storage '{shown}'"
    click.echo(f"\ncompare trials: sweeper dashboard {sweep.name}{storage_flag}", err=True)
