"""``best``, ``export`` and ``dashboard``: a stored sweep's results, for people and scripts.

:func:`best` returns a :class:`BestView` (its records are the export's trial records),
rendered by :func:`best_table` and ``BestView.document``;
:func:`export` the export document (:mod:`sweeper.export`), :func:`write_export` writes it
whole or not at all; :func:`serve_dashboard` runs optuna-dashboard on the sweep's storage."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

from sweeper.app.options import StorageOptions
from sweeper.app.sweeps import open_existing, open_sweep
from sweeper.artifacts import (
    dashboard_artifacts_spec,
    describe,
    download_trial,
    open_artifact_store,
)
from sweeper.errors import PortInUseError, SweeperError, SweepFailedError
from sweeper.export import export_document, to_csv, to_json, trial_export_record
from sweeper.report import best_trials, format_table
from sweeper.study import Sweep
from sweeper.study.urls import redact, resolve_storage_url

Say = Callable[[str], None]


@dataclass(frozen=True)
class BestView:
    """The best trial (every Pareto-optimal one for multi-objective sweeps) as export
    records, and what ``download_dir`` received: ``(trial number, path)`` pairs."""

    #: The sweep's name.
    study: str
    #: minimize or maximize, per objective.
    directions: tuple[str, ...]
    #: The objectives' metrics, in order.
    metrics: tuple[str, ...]
    #: The spec's parameters, in order.
    parameters: tuple[str, ...]
    #: One export record per trial (docs/export-formats.md): number, index, values, params...
    records: tuple[dict[str, Any], ...]
    #: ``(trial number, path)`` of every artifact ``download_dir`` received.
    downloaded: tuple[tuple[int, str], ...] = field(default=())

    @property
    def multi_objective(self) -> bool:
        """More than one objective: ``records`` is the Pareto front."""
        return len(self.metrics) > 1

    def document(self) -> dict[str, Any]:
        """The JSON/YAML document: the study, its directions, and the trial's record (or
        ``pareto_front``: every record)."""
        head = {"study": self.study, "directions": list(self.directions)}
        if self.multi_objective:
            return {**head, "pareto_front": list(self.records)}
        return {**head, **self.records[0]}


def best(name: str, storage: StorageOptions = StorageOptions(),
         download_dir: Path | None = None) -> BestView:
    """The best trial(s) of sweep ``name``; with ``download_dir`` their artifacts are fetched
    into it (``trial-N/`` per Pareto-optimal trial). SweepFailedError when no trial is
    complete; SweeperError when there are no artifacts to download."""
    sweep, url = open_sweep(name, storage)
    metrics = tuple(o.metric for o in sweep.spec.objectives)
    trials = best_trials(sweep.study())
    if not trials:
        raise SweepFailedError(f"sweep {sweep.name!r} has no complete trial yet")
    got = _download(sweep, url, trials, download_dir) if download_dir is not None else ()
    return BestView(sweep.name, tuple(o.direction for o in sweep.spec.objectives), metrics,
                    tuple(p.name for p in sweep.spec.parameters),
                    tuple(trial_export_record(t, list(metrics)) for t in trials), got)


def best_table(view: BestView) -> str:
    """``best --format table``: one row per trial, its number, index, values and params."""
    return format_table(["trial", "index", *view.metrics, *view.parameters], [
        [r["number"], r["index"], *(r["values"] or {}).values(),
         *(r["params"].get(n) for n in view.parameters)] for r in view.records])


def _download(sweep: Sweep, url: str, trials: list[FrozenTrial],
              dest: Path) -> tuple[tuple[int, str], ...]:
    store = open_artifact_store(sweep.spec.artifacts, url, create=False)
    multi = sweep.spec.is_multi_objective
    got = tuple((t.number, str(path)) for t in trials
                for path in download_trial(store, t, dest / f"trial-{t.number}" if multi
                                           else dest))
    if not got:
        numbers = ", ".join(f"#{t.number}" for t in trials)
        raise SweeperError(f"trial {numbers} of {sweep.name!r} saved no artifacts "
                           f"(store: {describe(sweep.spec.artifacts, url)})")
    return got


def export(name: str, storage: StorageOptions = StorageOptions()) -> dict[str, Any]:
    """Every trial of sweep ``name`` (all states, all attempts): the export document."""
    sweep, _ = open_sweep(name, storage)
    return export_document(sweep.spec, sweep.study().get_trials(deepcopy=False))


def write_export(doc: dict[str, Any], fmt: str, output: Path) -> None:
    """``doc`` as ``fmt`` (csv or json) into ``output``, whole or not at all (a temporary
    file renamed over it)."""
    text = to_csv(doc) if fmt == "csv" else to_json(doc)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise SweeperError(f"cannot write {output}: {e.strerror}") from None


def export_text(doc: dict[str, Any], fmt: str) -> str:
    return to_csv(doc) if fmt == "csv" else to_json(doc)


# --------------------------------------------------------------------------- dashboard


def serve_dashboard(name: str | None, storage: StorageOptions, host: str, port: int,
                    say: Say) -> None:
    """optuna-dashboard on the storage of sweep ``name`` (None: the storage alone) until
    Ctrl-C. PortInUseError when something listens on ``host:port`` already."""
    path = "/dashboard"
    if name:
        sweep, url = open_sweep(name, storage)
        store: Any = sweep.storage
        path = f"/dashboard/studies/{sweep.study_id}"
        artifacts = sweep.spec.artifacts
    else:
        url = resolve_storage_url(storage.url)
        store = open_existing(url, storage.wait_s)
        artifacts = dashboard_artifacts_spec(store)
    artifact_store = open_artifact_store(artifacts, url, create=False)
    if listening(host, port):
        raise PortInUseError(f"cannot serve on {host}:{port}: something is already "
                             "listening there (pick another --port)")
    # Said once the storage opened (a bad one stays a one-line error), before the slow part.
    say(f"starting optuna-dashboard on http://{host}:{port} ...")
    ready = _Announcer(
        host, port, f"optuna-dashboard for {redact(url)} on http://{host}:{port}{path} "
                    f"(artifacts: {describe(artifacts, url)}; Ctrl-C to stop)", say)
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


def probe_host(host: str) -> str:
    """Where to connect to reach a server bound to ``host`` (the wildcard: this machine)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def listening(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((probe_host(host), port), timeout=timeout_s):
            return True
    except OSError:
        return False


class _Announcer:
    """Says ``line`` once the port accepts connections (a thread; the server itself blocks
    the main one). ``stop`` ends the wait and lets a started line finish."""

    def __init__(self, host: str, port: int, line: str, say: Say, poll_s: float = 0.1) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._wait, args=(host, port, line, say, poll_s),
                                        name="dashboard-ready", daemon=True)
        self._thread.start()

    def _wait(self, host: str, port: int, line: str, say: Say, poll_s: float) -> None:
        while not self._stopped.is_set():
            if listening(host, port):
                say(line)
                return
            self._stopped.wait(poll_s)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
