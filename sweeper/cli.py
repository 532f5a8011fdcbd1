"""The ``sweeper`` command. Click only: parse arguments, call the library, print.

Results go to stdout, diagnostics and progress to stderr. Every SweeperError becomes one line
and its exit code (2: bad input or unreachable storage, 1: some index failed, 3: backend);
no traceback for user mistakes (``-v`` shows them).
"""

from __future__ import annotations

import functools
import json
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sweeper import __version__, protocol
from sweeper.errors import SpecError, SweeperError, SweepFailedError

logger = logging.getLogger("sweeper")
F = TypeVar("F", bound=Callable[..., Any])
EXIT_INTERRUPTED = 130


def _errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SweeperError as e:
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                logger.exception("details")
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)

    return wrapper  # type: ignore[return-value]


storage_option = click.option(
    "--storage", metavar="URL",
    help="Study storage: sqlite:///file.db or postgresql://user:pw@host/db "
         "(default: $SWEEPER_STORAGE, then the spec's storage:, then sqlite:///sweeps.db).")
format_option = click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]),
                             default="table", show_default=True, help="Output format.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sweeper")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv: debug).")
def cli(verbose: int) -> None:
    """Hyperparameter sweeps: a YAML search space -> an Optuna study -> indexed trial runners,
    on local processes or as one Kubernetes Indexed Job."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("sweeper").setLevel(min(level, logging.INFO) if verbose else level)
    for noisy in ("sqlalchemy", "alembic", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING if verbose < 2 else logging.INFO)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING if verbose < 2 else optuna.logging.INFO)


# --------------------------------------------------------------------------- validate / plan


def _load(path: str, *, check_entrypoint: bool) -> Any:
    from sweeper.spec import load_spec

    spec = load_spec(path)
    if check_entrypoint and spec.trial.entrypoint:
        from sweeper.entrypoint import load_entrypoint

        load_entrypoint(spec.trial.entrypoint, source=spec.source)
    if check_entrypoint and spec.trial.command:
        import shutil

        exe = spec.trial.command[0]
        if "{" not in exe and shutil.which(exe) is None and not Path(exe).exists():
            raise SpecError(f"command {exe!r} not found on PATH", source=spec.source,
                            field="trial.command")
    return spec


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--no-import", is_flag=True,
              help="Do not import the entrypoint (it lives only in the trial image).")
@_errors
def validate(spec_file: str, no_import: bool) -> None:
    """Check a spec file: schema, ranges, grid size, entrypoint importable."""
    spec = _load(spec_file, check_entrypoint=not no_import)
    what = spec.trial.entrypoint or "command " + " ".join(spec.trial.command)
    what = what.splitlines()[0][:60] + ("..." if len(what) > 60 or "\n" in what else "")
    click.echo(f"ok: {spec.name}: {spec.method}, {spec.trials} indexes, "
               f"{len(spec.parameters)} parameters, objective "
               + ", ".join(f"{o.direction} {o.metric}" for o in spec.objectives)
               + f", trial {what}")


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--limit", type=int, default=None, help="Show only the first N indexes.")
@_errors
def plan(spec_file: str, fmt: str, limit: int | None) -> None:
    """Show JOB_ID -> hyperparameter set (grid, random); tpe is adaptive."""
    from sweeper.space import planned_sets

    spec = _load(spec_file, check_entrypoint=False)
    names = [p.name for p in spec.parameters]
    if spec.is_adaptive:
        if fmt == "json":
            click.echo(json.dumps({"name": spec.name, "method": spec.method,
                                   "indexes": spec.trials, "adaptive": True}, indent=2))
            return
        click.echo(f"{spec.name}: {spec.trials} indexes, method {spec.method}: adaptive "
                   "(each runner asks the sampler when it starts)")
        click.echo(_ranges(spec))
        return
    sets = []
    for i, params in planned_sets(spec):
        if limit is not None and i >= limit:
            break
        sets.append((i, params))
    if fmt == "json":
        click.echo(json.dumps({"name": spec.name, "method": spec.method,
                               "indexes": spec.trials, "adaptive": False,
                               "sets": [{"job_id": i, "params": p} for i, p in sets]},
                              indent=2))
        return
    from sweeper.report import format_table

    click.echo(format_table(["JOB_ID", *names], [[i, *(p[n] for n in names)] for i, p in sets]))
    if limit is not None and limit < spec.trials:
        click.echo(f"... {spec.trials - limit} more")


def _ranges(spec: Any) -> str:
    from sweeper.report import format_table

    rows = []
    for p in spec.parameters:
        if p.values is not None or p.choices is not None:
            rows.append([p.name, p.type, ", ".join(map(str, p.values or p.choices)), "", ""])
        else:
            rows.append([p.name, p.type, f"[{p.low}, {p.high}]", p.step or "", "yes" if p.log
                         else ""])
    return format_table(["parameter", "type", "range", "step", "log"], rows)


# --------------------------------------------------------------------------- run


def _job_options(fn: F) -> F:
    """Overrides of the spec's kubernetes: section (render, run, resume)."""
    for option in reversed([
        click.option("--image", metavar="IMAGE", help="Kubernetes: trial-runner image "
                     "(default: the spec's kubernetes.image)."),
        click.option("--namespace", "-n", metavar="NS",
                     help="Kubernetes: namespace (default: the spec's, else sweeper)."),
        click.option("--storage-secret", metavar="NAME",
                     help="Kubernetes: Secret whose key (kubernetes.storage_secret_key, "
                          "default url) holds the storage URL the pods use."),
    ]):
        fn = option(fn)
    return fn


def _cluster_options(fn: F) -> F:
    """How to reach the cluster (default: $KUBECONFIG or ~/.kube/config, else in-cluster)."""
    fn = click.option("--context", metavar="NAME", help="Kubernetes: kubeconfig context.")(fn)
    return click.option("--kubeconfig", type=click.Path(dir_okay=False), metavar="PATH",
                        help="Kubernetes: kubeconfig file.")(fn)


def _clients(kubeconfig: str | None, context: str | None, timeout_s: float = 30.0) -> Any:
    from sweeper.backends.kubernetes import ClientFactory

    return ClientFactory(kubeconfig, context, request_timeout_s=timeout_s)


def _kubernetes_backend(kubeconfig: str | None, context: str | None, detach: bool) -> Any:
    import os

    from sweeper.backends.kubernetes import KubernetesBackend

    clients = _clients(kubeconfig, context)
    clients.api_client()  # a missing or broken kubeconfig fails here, before storage is touched
    return KubernetesBackend(clients, detach=detach,
                             poll_interval_s=protocol.env_float(
                                 os.environ, protocol.ENV_POLL_INTERVAL,
                                 protocol.DEFAULT_POLL_INTERVAL_S),
                             echo=lambda line: click.echo(line, err=True))


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
@_errors
def run(spec_file: str, storage: str | None, parallelism: int | None, backend: str,
        log_dir: str, image: str | None, namespace: str | None, storage_secret: str | None,
        kubeconfig: str | None, context: str | None, detach: bool) -> None:
    """Create (or resume) the sweep and run every index that has no finished trial."""
    from sweeper.backends.manifests import with_kubernetes
    from sweeper.study import resolve_storage_url

    spec = _load(spec_file, check_entrypoint=backend == "local")
    spec = spec.with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret)
    url = resolve_storage_url(storage, spec)
    _launch(spec, url, _backend(backend, spec, log_dir, kubeconfig, context, detach))


def _backend(kind: str, spec: Any, log_dir: str, kubeconfig: str | None, context: str | None,
             detach: bool) -> Any:
    if kind == "local":
        from sweeper.backends.local import LocalBackend

        return LocalBackend(Path(log_dir) / spec.name)
    return _kubernetes_backend(kubeconfig, context, detach)


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _launch(spec: Any, url: str, backend: Any) -> None:
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
            result = backend.run(sweep, todo, storage_url=url, parallelism=spec.parallelism,
                                 tick=progress.tick)
        finally:
            progress.close()
    _summary(sweep, url)
    for message in result.messages if result is not None else ():
        click.echo(message, err=True)
    if result is not None and result.detached:
        if result.interrupted:
            sys.exit(EXIT_INTERRUPTED)
        return
    if result is not None and result.interrupted:
        click.echo("interrupted: running trials were stopped and marked FAIL; run the same "
                   "command again to finish the missing indexes", err=True)
        sys.exit(EXIT_INTERRUPTED)
    missing = unfinished_indexes(index_table(storage, spec, sweep.study_id))
    if missing:
        raise SweepFailedError(f"{len(missing)} index(es) failed for good: "
                               f"{_ranges_of(missing)}; see `sweeper status {spec.name}`")


def _ranges_of(indexes: list[int]) -> str:
    out: list[str] = []
    for i in sorted(indexes):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = out[-1].split("-")[0] + f"-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


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


# --------------------------------------------------------------------------- status / best


def _open_sweep(name: str, storage: str | None) -> tuple[Any, str]:
    from sweeper.study import load_sweep, open_storage, resolve_storage_url

    url = resolve_storage_url(storage)
    return load_sweep(open_storage(url), name), url


@cli.command()
@click.argument("name")
@storage_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--kubernetes/--no-kubernetes", "kube", default=None,
              help="Also show the sweep's Jobs (default: when a cluster is configured; "
                   "skipped quietly when none is).")
@click.option("--namespace", "-n", metavar="NS",
              help="Kubernetes: namespace (default: the one the sweep was launched in).")
@_cluster_options
@_errors
def status(name: str, storage: str | None, fmt: str, kube: bool | None, namespace: str | None,
           kubeconfig: str | None, context: str | None) -> None:
    """Trial counts by state, the sweep's Kubernetes Jobs, and the per-index table."""
    from sweeper.report import format_table
    from sweeper.study import index_table, state_counts

    sweep, _ = _open_sweep(name, storage)
    counts = state_counts(sweep.storage, sweep.study_id)
    table = index_table(sweep.storage, sweep.spec, sweep.study_id)
    metrics = [o.metric for o in sweep.spec.objectives]
    finished = sum(1 for s in table if s.state in ("COMPLETE", "PRUNED"))
    jobs = _status_jobs(sweep, kube, namespace, kubeconfig, context)
    if fmt == "json":
        click.echo(json.dumps({
            "name": sweep.name, "method": sweep.spec.method, "indexes": sweep.spec.trials,
            "finished_indexes": finished, "trials_by_state": counts,
            **({"kubernetes_jobs": [_job_record(j) for j in jobs]} if jobs is not None else {}),
            "per_index": [{"index": s.index, "state": s.state, "attempts": s.attempts,
                           "trial_number": s.trial_number,
                           "values": dict(zip(metrics, s.values, strict=False))
                           if s.values else None} for s in table]}, indent=2))
        return
    click.echo(f"{sweep.name}: {finished}/{sweep.spec.trials} indexes finished; trials: "
               + ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())))
    for j in jobs or []:
        click.echo(f"Job {j.namespace}/{j.name}: {j.state}"
                   + (f" ({j.reason})" if j.reason else "")
                   + f"; pods active {j.active}, succeeded {j.succeeded}, failed {j.failed}; "
                   f"indexes completed {_ranges_of(list(j.completed)) or '-'}, failed "
                   f"{_ranges_of(list(j.failed_indexes)) or '-'} (of {len(j.indexes)})")
    click.echo(format_table(["index", "state", "attempts", "trial", *metrics], [
        [s.index, s.state, s.attempts, s.trial_number, *(s.values or [None] * len(metrics))]
        for s in table]))


@cli.command()
@click.argument("name")
@storage_option
@click.option("--format", "fmt", type=click.Choice(["json", "yaml", "table"]), default="json",
              show_default=True)
@click.option("--download", "download_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Also fetch the best trial's artifacts into DIR "
                                  "(multi-objective: DIR/trial-N/ per Pareto-optimal trial).")
@_errors
def best(name: str, storage: str | None, fmt: str, download_dir: str | None) -> None:
    """The best trial (every Pareto-optimal trial for multi-objective sweeps)."""
    from sweeper.export import trial_export_record
    from sweeper.report import best_trials, dumps, format_table

    sweep, url = _open_sweep(name, storage)
    metrics = [o.metric for o in sweep.spec.objectives]
    trials = best_trials(sweep.study())
    if not trials:
        raise SweepFailedError(f"sweep {name!r} has no complete trial yet")
    if download_dir is not None:
        _download(sweep, url, trials, Path(download_dir))
    records = [trial_export_record(t, metrics) for t in trials]
    if fmt == "table":
        names = [p.name for p in sweep.spec.parameters]
        click.echo(format_table(["trial", "index", *metrics, *names], [
            [r["number"], r["index"], *(r["values"] or {}).values(),
             *(r["params"].get(n) for n in names)] for r in records]))
        return
    data: Any = records[0] if len(metrics) == 1 else {"pareto_front": records}
    if len(metrics) == 1:
        data = {"study": name, "directions": [o.direction for o in sweep.spec.objectives],
                **records[0]}
    else:
        data = {"study": name, "directions": [o.direction for o in sweep.spec.objectives],
                "pareto_front": records}
    click.echo(dumps(data, fmt))


def _download(sweep: Any, url: str, trials: list[Any], dest: Path) -> None:
    from sweeper.artifacts import describe, download_trial, open_artifact_store

    store = open_artifact_store(sweep.spec.artifacts, url, create=False)
    multi = sweep.spec.is_multi_objective
    got = 0
    for t in trials:
        paths = download_trial(store, t, dest / f"trial-{t.number}" if multi else dest)
        got += len(paths)
        for path in paths:
            click.echo(f"trial #{t.number}: {path}", err=True)
    if not got:
        numbers = ", ".join(f"#{t.number}" for t in trials)
        raise SweeperError(f"trial {numbers} of {sweep.name!r} saved no artifacts "
                           f"(store: {describe(sweep.spec.artifacts, url)})")


@cli.command()
@click.argument("name")
@storage_option
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv",
              show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Write to this file instead of stdout.")
@_errors
def export(name: str, storage: str | None, fmt: str, output: str) -> None:
    """Every trial of the sweep (all states, all attempts) as CSV or JSON, for scripts."""
    from sweeper.export import export_document, to_csv, to_json

    sweep, _ = _open_sweep(name, storage)
    doc = export_document(sweep.spec, sweep.study().get_trials(deepcopy=False))
    text = to_csv(doc) if fmt == "csv" else to_json(doc)
    if output == "-":
        click.echo(text, nl=False)
        return
    target = Path(output)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise SweeperError(f"cannot write {output}: {e.strerror}") from None
    click.echo(f"wrote {len(doc['trials'])} trials of {name} to {output}", err=True)


# --------------------------------------------------------------------------- dashboard


@cli.command()
@click.argument("name", required=False)
@storage_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8080, show_default=True)
@_errors
def dashboard(name: str | None, storage: str | None, host: str, port: int) -> None:
    """Serve optuna-dashboard on the sweep storage (works while a sweep runs)."""
    from sweeper.artifacts import dashboard_artifacts_spec, describe, open_artifact_store
    from sweeper.study import load_sweep, open_storage, redact, resolve_storage_url

    url = resolve_storage_url(storage)
    store = open_storage(url)
    path = "/dashboard"
    if name:
        sweep = load_sweep(store, name)
        path = f"/dashboard/studies/{sweep.study_id}"
        artifacts = sweep.spec.artifacts
    else:
        artifacts = dashboard_artifacts_spec(store)
    artifact_store = open_artifact_store(artifacts, url, create=False)
    click.echo(f"optuna-dashboard for {redact(url)} on http://{host}:{port}{path} "
               f"(artifacts: {describe(artifacts, url)}; Ctrl-C to stop)", err=True)
    import optuna_dashboard

    try:
        optuna_dashboard.run_server(store, host=host, port=port, artifact_store=artifact_store)
    except OSError as e:
        raise SweeperError(f"cannot serve on {host}:{port}: {e.strerror}") from None
    except KeyboardInterrupt:
        pass


# --------------------------------------------------------------------------- kubernetes


def _status_jobs(sweep: Any, kube: bool | None, namespace: str | None, kubeconfig: str | None,
                 context: str | None) -> list[Any] | None:
    """The sweep's Jobs for ``status``; None when not asked for or not available. Automatic
    (``kube`` None) only for sweeps launched on Kubernetes, and never fatal."""
    from sweeper.backends.kubernetes import sweep_jobs
    from sweeper.errors import BackendError

    if kube is False:
        return None
    clients = _clients(kubeconfig, context, timeout_s=30.0 if kube else 5.0)
    if kube is None:
        launched = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.LAUNCHES_ATTR)
        if not launched or not clients.configured():
            return None
    ns = namespace or sweep.spec.kubernetes.namespace
    try:
        return list(sweep_jobs(clients, ns, sweep.name, sweep.spec.trials))
    except BackendError as e:
        if kube:
            raise
        click.echo(f"note: Kubernetes Jobs not shown: {e}", err=True)
        return None


def _job_record(j: Any) -> dict[str, Any]:
    return {"job": j.name, "namespace": j.namespace, "state": j.state, "reason": j.reason,
            "active": j.active, "ready": j.ready, "succeeded": j.succeeded, "failed": j.failed,
            "indexes": len(j.indexes), "completed_indexes": list(j.completed),
            "failed_indexes": list(j.failed_indexes)}


def _stored_sweep(name: str, storage: str | None) -> Any | None:
    """The sweep record if the storage is at hand (logs/cancel work without it too)."""
    from sweeper.study import resolve_storage_url

    url = resolve_storage_url(storage)
    if url == protocol.DEFAULT_STORAGE and not Path("sweeps.db").exists():
        return None
    try:
        return _open_sweep(name, storage)[0]
    except SweeperError as e:
        click.echo(f"note: {e}", err=True)
        return None


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Pods at once (default: the spec's parallelism).")
@_job_options
@_errors
def render(spec_file: str, parallelism: int | None, image: str | None, namespace: str | None,
           storage_secret: str | None) -> None:
    """Print the Kubernetes objects `run --backend kubernetes` submits, as YAML (no storage,
    no cluster: for kubectl apply -f - or GitOps)."""
    import yaml

    from sweeper.backends.manifests import render as render_objects
    from sweeper.backends.manifests import with_kubernetes

    spec = _load(spec_file, check_entrypoint=False).with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret)
    click.echo(yaml.safe_dump_all(render_objects(spec), sort_keys=False), nl=False)


@cli.command()
@click.argument("name")
@click.option("--index", "-i", type=click.IntRange(min=0), required=True,
              help="The sweep index (JOB_ID) whose pod log to show.")
@click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N",
              help="Only the last N lines.")
@click.option("--namespace", "-n", metavar="NS",
              help="Default: the namespace the sweep was launched in (from the storage).")
@storage_option
@_cluster_options
@_errors
def logs(name: str, index: int, tail: int | None, namespace: str | None, storage: str | None,
         kubeconfig: str | None, context: str | None) -> None:
    """The log of the pod that ran index I (its latest attempt, across resume Jobs)."""
    from sweeper.backends.kubernetes import index_log
    from sweeper.spec import KubernetesSpec

    sweep = _stored_sweep(name, storage)
    ns = namespace or (sweep.spec.kubernetes.namespace if sweep else KubernetesSpec().namespace)
    log = index_log(_clients(kubeconfig, context), ns, name,
                    sweep.spec.trials if sweep else None, index, tail_lines=tail)
    click.echo(f"pod {ns}/{log.pod} (Job {log.job}, index {index}, attempt {log.attempt + 1}, "
               f"{log.phase})", err=True)
    click.echo(log.text, nl=not log.text.endswith("\n"))


@cli.command()
@click.argument("name")
@storage_option
@click.option("--namespace", "-n", metavar="NS",
              help="Default: the namespace the sweep was launched in (from the storage).")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds to wait for the Jobs' pods to be gone.")
@_cluster_options
@_errors
def cancel(name: str, storage: str | None, namespace: str | None, wait_s: float,
           kubeconfig: str | None, context: str | None) -> None:
    """Delete the sweep's Jobs and their pods. The study stays: `sweeper resume NAME` runs
    what is missing."""
    from sweeper.backends.kubernetes import cancel as cancel_jobs
    from sweeper.spec import KubernetesSpec
    from sweeper.study import index_table, unfinished_indexes

    sweep = _stored_sweep(name, storage)
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
           kubeconfig: str | None, context: str | None, detach: bool) -> None:
    """Run only the indexes of a stored sweep that have no finished trial (its spec comes from
    the study; on Kubernetes a new, sparse Job NAME-r<N>)."""
    from sweeper.backends.manifests import with_kubernetes

    sweep, url = _open_sweep(name, storage)
    spec = sweep.spec.with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret)
    if backend is None:
        launched = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.LAUNCHES_ATTR)
        backend = "kubernetes" if launched else "local"
    _launch(spec, url, _backend(backend, spec, log_dir, kubeconfig, context, detach))


def main() -> None:
    cli(prog_name="sweeper")


if __name__ == "__main__":
    main()
