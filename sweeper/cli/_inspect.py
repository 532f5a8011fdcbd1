"""Commands that read a stored sweep: status, best, export, dashboard. NAME may be the sweep's
spec file; nothing here creates a storage."""

from __future__ import annotations

import errno
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from sweeper import protocol
from sweeper.cli._common import (
    _clients,
    _cluster_options,
    _errors,
    _open_existing,
    _open_sweep,
    _ranges_of,
    name_storage_option,
)
from sweeper.cli._group import cli
from sweeper.errors import PortInUseError, SweeperError, SweepFailedError


@cli.command()
@click.argument("name")
@name_storage_option
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
    """Trial counts by state, the sweep's Kubernetes Jobs, and the per-index table.

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
    from sweeper.report import format_table, rung_cell, rungs_line
    from sweeper.spending import (
        index_record,
        shown_state,
        spending_of,
        summary_lines,
        summary_record,
    )

    sweep, _ = _open_sweep(name, storage)
    counts = sweep.storage.state_counts(sweep.study_id)
    table = sweep.storage.index_table(sweep.study_id, sweep.spec.index_count)
    metrics = [o.metric for o in sweep.spec.objectives]
    finished = sum(1 for s in table if s.state in ("COMPLETE", "PRUNED"))
    jobs = _status_jobs(sweep, kube, namespace, kubeconfig, context)

    stopped = sweep.storage.stop_state(sweep.study_id)
    code = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.CODE_ATTR)
    sched = _scheduler_view(sweep)
    pbt = _pbt_view(sweep)
    spent = spending_of(sweep)
    if fmt == "json":
        click.echo(json.dumps({
            "name": sweep.name, "method": sweep.spec.method,
            "indexes": sweep.spec.index_count,
            "finished_indexes": finished, "trials_by_state": counts,
            "stop": stopped.to_json() if stopped is not None else None, "code": code,
            "spending": summary_record(spent),
            **({"kubernetes_jobs": [_job_record(j) for j in jobs]} if jobs is not None else {}),
            "per_index": [{"index": s.index, "state": shown_state(spent, s),
                           "attempts": s.attempts,
                           "trial_number": s.trial_number,
                           "values": dict(zip(metrics, s.values, strict=False))
                           if s.values else None,
                           "fail_reason": s.fail_reason, "code": s.code,
                           "usage": index_record(spent, s.index),
                           **(_rung_record(sched[0].get(s.trial_number)) if sched else {}),
                           **({"pbt": pbt.get(s.trial_number)} if pbt is not None else {})}
                          for s in table],
            **({"rungs": [asdict(r) for r in sched[1]]} if sched else {})}, indent=2))
        return
    _status_header(sweep, finished, counts, code, stopped, jobs)
    headers = ["index", "state", "attempts", "trial", *metrics]
    rows = [[s.index, shown_state(spent, s), s.attempts, s.trial_number,
             *(s.values or [None] * len(metrics))] for s in table]
    if sched:
        click.echo(rungs_line(sched[1]))
        headers.append("rung")
        for row, s in zip(rows, table, strict=True):
            row.append(rung_cell(sched[0].get(s.trial_number)))
    if pbt is not None:  # PBT: the lineage's last copy, "from #3 at step 7"
        from sweeper.pbt_lineage import describe

        headers.append("pbt")
        for row, s in zip(rows, table, strict=True):
            row.append(describe(pbt.get(s.trial_number)))
    if len({s.code for s in table if s.code}) > 1:  # which ran which: 12 hex digits
        headers.append("code")
        for row, s in zip(rows, table, strict=True):
            row.append(s.code[7:19] if s.code else "")
    if any(s.fail_reason for s in table):
        headers.append("reason")
        width = _reason_width(format_table(headers[:-1], rows))
        for row, s in zip(rows, table, strict=True):
            row.append(_clip(s.fail_reason, width) if s.fail_reason else "")
    click.echo(format_table(headers, rows))
    for line in summary_lines(spent):  # what was spent, under the table
        click.echo(line)


def _status_header(sweep: Any, finished: int, counts: dict[str, int], code: Any, stopped: Any,
                   jobs: Any) -> None:
    """The lines above status's table: counts (and the code snapshot), the stop, the Jobs."""
    of = "" if sweep.spec.open_ended else f"/{sweep.spec.trials}"
    ended = " (open-ended: as many as the budget pays for)" if sweep.spec.open_ended else ""
    click.echo(f"{sweep.name}: {finished}{of} indexes finished{ended}; trials: "
               + ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items()))
               + (f"; code {code}" if code else ""))
    if stopped is not None:
        click.echo(("stopped: " if stopped.stopped else "stop ignored (--ignore-stop): ")
                   + stopped.describe())
    for j in jobs or []:
        click.echo(f"Job {j.namespace}/{j.name}: {j.state}"
                   + (f" ({j.reason})" if j.reason else "")
                   + f"; pods active {j.active}, succeeded {j.succeeded}, failed {j.failed}; "
                   f"indexes completed {_ranges_of(list(j.completed)) or '-'}, failed "
                   f"{_ranges_of(list(j.failed_indexes)) or '-'} (of {len(j.indexes)})")


def _scheduler_view(sweep: Any) -> tuple[dict[int | None, Any], list[Any]] | None:
    """A scheduler's sweep: its trials by number (rung, paused) and its rungs; else None."""
    from sweeper.report import rungs_of

    steps = list(sweep.spec.scheduler.rung_steps)
    if not steps:
        return None
    trials = sweep.storage.rung_trials(sweep.study_id, steps)
    return {t.number: t for t in trials}, rungs_of(trials, steps)


def _pbt_view(sweep: Any) -> dict[int, Any] | None:
    """A PBT sweep's lineages (``sweeper:pbt``) by trial number; else None. The population
    runs at once, so reading every trial reads a few."""
    if sweep.spec.scheduler.type != "pbt":
        return None
    return {t.number: t.user_attrs.get(protocol.PBT_ATTR)
            for t in sweep.study().get_trials(deepcopy=False)}


def _rung_record(t: Any) -> dict[str, Any]:
    return {"rung": t.rung if t is not None else None,
            "paused": bool(t is not None and t.paused)}


def _reason_width(table: str) -> int:
    """What is left of the terminal for the reason column (at least 30 characters)."""
    import shutil

    used = max((len(line) for line in table.splitlines()), default=0)
    return max(30, shutil.get_terminal_size((120, 24)).columns - used - 2)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


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


@cli.command()
@click.argument("name")
@name_storage_option
@click.option("--format", "fmt", type=click.Choice(["json", "yaml", "table"]), default="json",
              show_default=True)
@click.option("--download", "download_dir", type=click.Path(file_okay=False), default=None,
              metavar="DIR", help="Also fetch the best trial's artifacts into DIR "
                                  "(multi-objective: DIR/trial-N/ per Pareto-optimal trial).")
@_errors
def best(name: str, storage: str | None, fmt: str, download_dir: str | None) -> None:
    """The best trial (every Pareto-optimal trial for multi-objective sweeps).

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
    from sweeper.export import trial_export_record
    from sweeper.report import best_trials, dumps, format_table

    sweep, url = _open_sweep(name, storage)
    metrics = [o.metric for o in sweep.spec.objectives]
    trials = best_trials(sweep.study())
    if not trials:
        raise SweepFailedError(f"sweep {sweep.name!r} has no complete trial yet")
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
        data = {"study": sweep.name, "directions": [o.direction for o in sweep.spec.objectives],
                **records[0]}
    else:
        data = {"study": sweep.name, "directions": [o.direction for o in sweep.spec.objectives],
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
@name_storage_option
@click.option("--format", "fmt", type=click.Choice(["csv", "json"]), default="csv",
              show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Write to this file instead of stdout.")
@_errors
def export(name: str, storage: str | None, fmt: str, output: str) -> None:
    """Every trial of the sweep (all states, all attempts) as CSV or JSON, for scripts.

    NAME is the sweep's name or its spec file (name and storage: are read from it)."""
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
    click.echo(f"wrote {len(doc['trials'])} trials of {sweep.name} to {output}", err=True)


@cli.command()
@click.argument("name", required=False)
@name_storage_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8080, show_default=True)
@_errors
def dashboard(name: str | None, storage: str | None, host: str, port: int) -> None:
    """Serve optuna-dashboard on the sweep storage (works while a sweep runs).

    NAME (optional) opens that sweep's page; it may be the sweep's spec file (name and
    storage: are read from it)."""
    from sweeper.artifacts import dashboard_artifacts_spec, describe, open_artifact_store
    from sweeper.study import redact, resolve_storage_url

    path = "/dashboard"
    if name:
        sweep, url = _open_sweep(name, storage)
        store = sweep.storage
        path = f"/dashboard/studies/{sweep.study_id}"
        artifacts = sweep.spec.artifacts
    else:
        url = resolve_storage_url(storage)
        store = _open_existing(url)
        artifacts = dashboard_artifacts_spec(store)
    artifact_store = open_artifact_store(artifacts, url, create=False)
    if _listening(host, port):
        raise PortInUseError(f"cannot serve on {host}:{port}: something is already "
                             "listening there (pick another --port)")
    # Said once the storage opened (a bad one stays a one-line error), before the slow part.
    click.echo(f"starting optuna-dashboard on http://{host}:{port} ...", err=True)
    ready = _Announcer(
        host, port, f"optuna-dashboard for {redact(url)} on http://{host}:{port}{path} "
                    f"(artifacts: {describe(artifacts, url)}; Ctrl-C to stop)")
    import optuna_dashboard

    try:
        optuna_dashboard.run_server(store, host=host, port=port, artifact_store=artifact_store)
    except OSError as e:
        error = PortInUseError if e.errno == errno.EADDRINUSE else SweeperError
        raise error(f"cannot serve on {host}:{port}: {e.strerror}") from None
    except KeyboardInterrupt:
        pass
    finally:
        ready.stop()


def _probe_host(host: str) -> str:
    """Where to connect to reach a server bound to ``host`` (the wildcard: this machine)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _listening(host: str, port: int, timeout_s: float = 0.5) -> bool:
    import socket

    try:
        with socket.create_connection((_probe_host(host), port), timeout=timeout_s):
            return True
    except OSError:
        return False


class _Announcer:
    """Prints ``line`` on stderr once the port accepts connections (a thread; the server
    itself blocks the main one). ``stop`` ends the wait and lets a started print finish."""

    def __init__(self, host: str, port: int, line: str, poll_s: float = 0.1) -> None:
        import threading

        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._wait, args=(host, port, line, poll_s),
                                        name="dashboard-ready", daemon=True)
        self._thread.start()

    def _wait(self, host: str, port: int, line: str, poll_s: float) -> None:
        while not self._stopped.is_set():
            if _listening(host, port):
                click.echo(line, err=True)
                return
            self._stopped.wait(poll_s)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

