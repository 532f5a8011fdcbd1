"""Commands that launch a sweep: run, resume; the launch itself and its summary."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sweeper import protocol
from sweeper.cli._common import (
    DEFAULT_LOG_DIR,
    _clients,
    _cluster_options,
    _errors,
    _job_options,
    _load,
    _load_target,
    _open,
    _ranges_of,
    _target,
    name_storage_option,
    set_option,
    storage_option,
)
from sweeper.cli._group import cli
from sweeper.cli._proxy import proxy_options, run_extras
from sweeper.cli._stop import ignore_stop_option, may_launch, report_stop
from sweeper.errors import EXIT_INTERRUPTED, SweeperError, SweepFailedError

if TYPE_CHECKING:
    from sweeper.backends.base import Backend, RunResult
    from sweeper.study import IndexStatus

#: Failed indexes whose reason and log lines run's summary shows (the rest: sweeper status).
FAILURES_SHOWN = 10
#: Lines of each failed index's log that run's summary shows.
FAILURE_LOG_LINES = 5

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


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@storage_option
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Trials at once (default: the spec's parallelism).")
@click.option("--backend", type=click.Choice(["local", "kubernetes"]), default="local",
              show_default=True)
@click.option("--log-dir", type=click.Path(file_okay=False), default=DEFAULT_LOG_DIR,
              show_default=True, help="Local backend: one log file per index under NAME-UID8/.")
@_job_options
@_cluster_options
@click.option("--detach", is_flag=True,
              help="Kubernetes: create the Job and return without watching it.")
@set_option
@allow_cpu_option
@run_format_option
@ignore_stop_option
@code_option
@proxy_options
@_errors
def run(spec_file: str, storage: str | None, parallelism: int | None, backend: str,
        log_dir: str, image: str | None, namespace: str | None, storage_secret: str | None,
        storage_proxy: str | None, kubeconfig: str | None, context: str | None, detach: bool,
        overrides: tuple[str, ...], allow_cpu: bool, fmt: str, ignore_stop: bool,
        code_choice: str | None, proxy: bool | None, metrics_port: int | None) -> None:
    """Create (or resume) the sweep and run every index that has no finished trial."""
    from sweeper.backends.manifests import with_kubernetes
    from sweeper.study import resolve_storage_url

    spec = _load(spec_file, check_entrypoint=backend == "local", overrides=overrides)
    spec = spec.with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret,
                           storage_proxy=storage_proxy)
    _durable(spec, backend)
    url = resolve_storage_url(storage, spec)
    extras = run_extras(backend, proxy, metrics_port, url, spec.name)
    _launch(spec, url, _backend(backend, spec, log_dir, kubeconfig, context, detach,
                                allow_cpu, **extras), fmt, ignore_stop, code_choice == "new")


@cli.command()
@click.argument("name")
@name_storage_option
@click.option("--backend", type=click.Choice(["local", "kubernetes"]), default=None,
              help="Default: where the sweep was last launched (kubernetes or local).")
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Trials at once (default: the stored spec's parallelism).")
@click.option("--log-dir", type=click.Path(file_okay=False), default=DEFAULT_LOG_DIR,
              show_default=True, help="Local backend: one log file per index under NAME-UID8/.")
@_job_options
@_cluster_options
@click.option("--detach", is_flag=True,
              help="Kubernetes: create the Job and return without watching it.")
@allow_cpu_option
@run_format_option
@ignore_stop_option
@code_option
@_errors
def resume(name: str, storage: str | None, backend: str | None, parallelism: int | None,
           log_dir: str, image: str | None, namespace: str | None, storage_secret: str | None,
           storage_proxy: str | None, kubeconfig: str | None, context: str | None,
           detach: bool, allow_cpu: bool, fmt: str, ignore_stop: bool,
           code_choice: str | None) -> None:
    """Run only the indexes of a stored sweep that have no finished trial (its spec comes from
    the study; on Kubernetes a new, sparse Job NAME-r<N>). NAME may be the sweep's spec file
    (name and storage: are read from it; `run` applies a changed file, resume does not)."""
    from sweeper.backends.manifests import with_kubernetes

    target = _target(name, storage)
    sweep, url = _load_target(target), target.url
    if target.spec is not None and target.spec.spec_hash != sweep.spec.spec_hash:
        click.echo(f"note: {name} differs from the stored sweep {sweep.name}; resume runs the "
                   f"stored one (`sweeper run {name}` applies the file)", err=True)
    spec = sweep.spec.with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret,
                           storage_proxy=storage_proxy)
    if backend is None:
        attrs = sweep.storage.get_study_user_attrs(sweep.study_id)
        backend = attrs.get(protocol.BACKEND_ATTR) or (
            "kubernetes" if attrs.get(protocol.LAUNCHES_ATTR) else "local")
    _durable(spec, str(backend))
    _launch(spec, url, _backend(str(backend), spec, log_dir, kubeconfig, context, detach,
                                allow_cpu), fmt, ignore_stop, code_choice == "new")


def _durable(spec: Any, backend: str) -> None:
    """A scheduler's paused trials resume in another pod: on Kubernetes their checkpoints must
    outlive the pod (SpecError before anything is written)."""
    from sweeper.spec import durable_checkpoints_error

    if backend == "kubernetes" and (e := durable_checkpoints_error(spec)) is not None:
        raise e


def _backend(kind: str, spec: Any, log_dir: str, kubeconfig: str | None, context: str | None,
             detach: bool, allow_cpu: bool = False, proxy: bool | None = None,
             metrics: Any = None) -> Backend:
    if kind == "local":
        from sweeper.backends.local.backend import LocalBackend
        from sweeper.backends.local.gpus import check_gpus

        warning = check_gpus(spec, allow_cpu=allow_cpu)
        if warning:
            click.echo(f"warning: {warning}", err=True)
        return LocalBackend(Path(log_dir), keyed=True, proxy=proxy, metrics=metrics)
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


def _launch(spec: Any, url: str, backend: Backend, fmt: str = "text",
            ignore_stop: bool = False, new_code: bool = False) -> None:
    """Create or resume the sweep of ``spec`` (its parallelism included: the backend reads it
    from ``sweep.spec``), run what is unfinished, and exit as the outcome says."""
    from sweeper.report import Progress
    from sweeper.study import (
        indexes_to_run,
        unfinished_indexes,
    )

    code = _code_before(spec, url, backend.name)  # before any storage is created
    storage = _open(url)
    sweep, created = _create_with_code(spec, storage, url, code, backend.name, new_code)
    if not may_launch(sweep, ignore_stop):
        return
    todo = indexes_to_run(sweep, created=created)
    # SIGTERM (a CI job cancelled, `kill`) stops the sweep the same orderly way as Ctrl-C.
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    _launch_header(spec, sweep, backend.name, url, created=created, todo=len(todo))
    progress = Progress(sweep)
    result = None
    if todo:
        try:
            result = backend.run(sweep, todo, storage_url=url, tick=progress.tick)
        finally:
            progress.close()
    table = storage.index_table(sweep.study_id, spec.index_count)
    if fmt == "json":
        click.echo(json.dumps(_summary_record(sweep, url, backend.name, table, result),
                              indent=2))
    else:
        _summary(sweep)
    _dashboard_hint(sweep, url)
    if result is not None and not _report_launch(result, None if spec.open_ended else len(todo)):
        return  # detached: the Job runs on, the study is not final yet
    missing = unfinished_indexes(table)
    if report_stop(sweep, missing, bool(result is not None and result.failed)):
        return
    if missing:
        reported = set(result.finished) if result is not None else set()
        _report_failures(sweep, url, backend,
                         [s for s in table if s.index in missing and s.index not in reported])
        raise SweepFailedError(_missing_message(spec.name, backend.name, missing, result))


def _code_before(spec: Any, url: str, backend: str, storage: Any = None) -> Any:
    """The launch's code snapshot (sweeper.code.launch), packed before anything is written;
    on Kubernetes its size is checked against its store's limit and what it holds printed."""
    from sweeper.code.launch import check_fits, prepare, summary

    code = prepare(spec, storage)
    if code is None or backend != "kubernetes":
        return code
    check_fits(spec, code, url)
    click.echo(summary(code), err=True)
    for warning in code.snapshot.warnings:
        click.echo(f"warning: the code snapshot: {warning}", err=True)
    return code


def _create_with_code(spec: Any, storage: Any, url: str, code: Any, backend: str,
                      new_code: bool) -> tuple[Any, bool]:
    """create_or_resume, with the launch's snapshot compared to what the sweep recorded
    first (on Kubernetes a change is refused without ``--code new``: CodeError, nothing
    launched; locally it is noted), then stored for the pods and recorded."""
    import dataclasses

    from sweeper.code.launch import check_change, publish, recorded_code
    from sweeper.study import create_or_resume

    if code is None:  # a stored spec (resume NAME): its spec file's name is in the record
        code = _code_before(spec, url, backend, storage)
    line = None
    if code is not None:
        recorded, ran = recorded_code(storage, spec.name)
        code = dataclasses.replace(code, recorded=recorded, ran=ran)
        line = check_change(spec.name, code, new_code=new_code, refuse=backend == "kubernetes")
    sweep, created = create_or_resume(storage, spec)  # a changed spec is said first
    if line:
        click.echo(f"note: {line}", err=True)
    if code is not None:
        publish(sweep, code, url, upload=backend == "kubernetes")
    return sweep, created



def _launch_header(spec: Any, sweep: Any, backend: str, url: str, *, created: bool,
                   todo: int) -> None:
    """The lines a launch starts with: what runs where, what grew, what is resumed."""
    from sweeper.study import redact

    done = spec.trials - todo
    size = "open-ended (until the budget is spent)" if spec.open_ended else \
        f"{spec.trials} indexes"
    click.echo(f"sweep {spec.name}: {spec.method}, {size}, parallelism "
               f"{spec.parallelism}, backend {backend}, storage {redact(url)}", err=True)
    if sweep.grown_from is not None:
        click.echo(f"grew the sweep from {sweep.grown_from} to {spec.trials} indexes (new: "
                   f"{_ranges_of(list(range(sweep.grown_from, spec.trials)))})", err=True)
    if not created and not spec.open_ended:
        click.echo(f"resuming: {done} of {spec.trials} indexes already finished", err=True)


def _report_launch(result: RunResult, launched: int | None) -> bool:
    """Print what the backend says of this launch (counts, its messages); exit 130 if it was
    interrupted. False when detached: nothing more can be said until the Job ends."""
    if not result.detached:
        failed = f", {len(result.failed)} failed for good ({_ranges_of(list(result.failed))})" \
            if result.failed else ""
        of = f" of {launched}" if launched is not None else ""  # None: open-ended
        click.echo(f"this launch: {len(result.finished)}{of} indexes finished"
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


def _report_failures(sweep: Any, url: str, backend: Backend,
                     failed: list[IndexStatus]) -> None:
    """On stderr, for each index that failed for good: why, the last lines of its log (the
    local file or the pod's), and the command that shows the rest."""
    from sweeper.report import failure_lines

    if not failed:
        return
    click.echo("", err=True)
    for s in failed[:FAILURES_SHOWN]:
        try:
            tail = backend.log_tail(sweep, s.index, FAILURE_LOG_LINES)
            where, text, note = tail.where, tail.text, None
        except SweeperError as e:
            where, text, note = None, None, str(e)
        command = f"sweeper logs {sweep.name} --index {s.index}{_storage_flag(url)}"
        for line in failure_lines(s.index, s.attempts, s.fail_reason, where, text, note,
                                  command):
            click.echo(line, err=True)
    rest = [s.index for s in failed[FAILURES_SHOWN:]]
    if rest:
        click.echo(f"... and {len(rest)} more failed index(es): {_ranges_of(rest)}; "
                   f"`sweeper status {sweep.name}` shows every reason", err=True)


def _summary_record(sweep: Any, url: str, backend: str, table: list[IndexStatus],
                    result: RunResult | None) -> dict[str, Any]:
    """``run --format json``: the state of the whole sweep after this launch."""
    from sweeper.export import trial_export_record
    from sweeper.report import best_trials
    from sweeper.study import redact

    metrics = [o.metric for o in sweep.spec.objectives]
    best = [trial_export_record(t, metrics) for t in best_trials(sweep.study())]
    finished = [s.index for s in table if s.state in ("COMPLETE", "PRUNED")]
    record: dict[str, Any] = {
        "sweep": sweep.name, "method": sweep.spec.method, "storage": redact(url),
        "backend": backend, "indexes": sweep.spec.index_count, "finished_indexes": len(finished),
        "trials_by_state": sweep.storage.state_counts(sweep.study_id),
        "unfinished_indexes": [s.index for s in table if s.index not in set(finished)],
        "failed_indexes": [{"index": s.index, "attempts": s.attempts,
                            "trial_number": s.trial_number, "fail_reason": s.fail_reason}
                           for s in table if s.state == "FAIL"],
        "interrupted": bool(result and result.interrupted),
        "detached": bool(result and result.detached),
        "directions": [o.direction for o in sweep.spec.objectives],
    }
    if sweep.spec.is_multi_objective:
        record["pareto_front"] = best
    else:
        record["best"] = best[0] if best else None
    return record


def _storage_flag(url: str) -> str:
    """`` --storage URL`` for a command to copy, the password a placeholder; empty for the
    default storage."""
    from sweeper.study import redact

    shown = redact(url).replace(":***@", ":<password>@")
    return "" if url == protocol.DEFAULT_STORAGE else f" --storage '{shown}'"


def _dashboard_hint(sweep: Any, url: str) -> None:
    click.echo(f"\ncompare trials: sweeper dashboard {sweep.name}{_storage_flag(url)}",
               err=True)


def _summary(sweep: Any) -> None:
    from sweeper.report import format_table, top_trials

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
