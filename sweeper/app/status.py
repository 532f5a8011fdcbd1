"""``status``: a sweep's counts, stop, spending, what runs it on a cluster, and one row per
index, as a :class:`StatusView`; beside it the two renderings, :func:`status_record` (the
``--format json`` document) and :func:`status_lines` (the table for people)."""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeper import protocol
from sweeper.app.backends import describe
from sweeper.app.options import ClusterOptions, StorageOptions
from sweeper.app.sweeps import open_sweep
from sweeper.backends.base import Description, Workload
from sweeper.report import Rung, format_table, ranges_of, rung_cell, rungs_line, rungs_of
from sweeper.spending import Spending, index_record, shown_state, spending_of, summary_lines
from sweeper.spending import summary_record as spending_record
from sweeper.study import Sweep
from sweeper.study.stop import StopState
from sweeper.study.values import IndexStatus, RungTrial


@dataclass(frozen=True)
class StatusOptions:
    """Where the sweep is stored, and whether to read its Kubernetes Jobs (``kubernetes``
    None: when it was launched there and a cluster is configured; True: required)."""

    storage: StorageOptions = field(default_factory=StorageOptions)
    kubernetes: bool | None = None
    cluster: ClusterOptions = field(default_factory=ClusterOptions)


@dataclass(frozen=True)
class IndexView:
    """One index's row: its latest trial, how it is shown (``preempted`` included), what it
    spent, and under a scheduler its rung; under PBT its lineage."""

    #: The index's latest trial, from the index table.
    status: IndexStatus
    #: The state shown: the trial's, or ``PREEMPTED`` where the attempt was preempted.
    state: str
    #: What the index spent (the ``usage`` of ``--format json``).
    usage: dict[str, Any]
    #: Under a scheduler: the trial's rung and pause.
    rung: RungTrial | None = None
    #: Under PBT: the trial's lineage (``sweeper:pbt``), as stored.
    pbt: Any = None


@dataclass(frozen=True)
class StatusView:
    """What ``status`` shows of a sweep: its identity and counts, its stop, the code snapshot
    it runs, what it spent (:class:`~sweeper.spending.Spending`), one :class:`IndexView` per
    index, and where the spec has them the scheduler's rungs, PBT lineages and the cluster's
    workloads. What a part of sweeper adds to the status is a field holding its own view (as
    ``spending`` and ``cluster`` do), rendered by :func:`status_record` and
    :func:`status_lines`."""

    name: str
    #: The spec's ``method:`` (grid, random, tpe, ...).
    method: str
    #: None: open-ended (as many indexes as the budget pays for).
    indexes: int | None
    #: The objectives' metrics, in order: the names of each row's values.
    metrics: tuple[str, ...]
    #: Indexes whose latest attempt is COMPLETE or PRUNED.
    finished_indexes: int
    #: Every trial (every attempt of every index) counted by state.
    trials_by_state: dict[str, int]
    #: The recorded stop (a stop rule that fired, or a budget), if any.
    stop: StopState | None
    #: The code snapshot the sweep runs (``sha256:...``), when it ships one.
    code: str | None
    #: What the sweep spent, against its budget and price.
    spending: Spending
    #: One row per index, by index.
    rows: tuple[IndexView, ...]
    #: The scheduler's rungs (``scheduler:`` with rungs), else None.
    rungs: tuple[Rung, ...] | None = None
    #: A PBT sweep: each row's ``pbt`` holds its lineage.
    pbt: bool = False
    #: What runs the sweep on a cluster (None: not asked for, or never launched there).
    cluster: Description | None = None


def status(name: str, options: StatusOptions = StatusOptions()) -> StatusView:
    """The status of sweep ``name`` (or of the sweep of a spec file). Reads the index table
    through the index store (one query), the rungs and PBT lineages only where the spec has
    them. Raises SweeperError (no such sweep, storage unavailable, a required cluster
    unreadable)."""
    sweep, _ = open_sweep(name, options.storage)
    table = sweep.storage.index_table(sweep.study_id, sweep.spec.index_count)
    spent = spending_of(sweep)
    rung_trials, rungs = _scheduler(sweep)
    lineages = _lineages(sweep)
    rows = tuple(IndexView(s, shown_state(spent, s), index_record(spent, s.index),
                           rung_trials.get(s.trial_number),
                           lineages.get(s.trial_number) if lineages is not None else None)
                 for s in table)
    code = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.CODE_ATTR)
    return StatusView(
        name=sweep.name, method=sweep.spec.method, indexes=sweep.spec.index_count,
        metrics=tuple(o.metric for o in sweep.spec.objectives),
        finished_indexes=sum(1 for s in table if s.state in ("COMPLETE", "PRUNED")),
        trials_by_state=sweep.storage.state_counts(sweep.study_id),
        stop=sweep.storage.stop_state(sweep.study_id), code=code, spending=spent, rows=rows,
        rungs=tuple(rungs) if rungs is not None else None, pbt=lineages is not None,
        cluster=describe(sweep, options.kubernetes, options.cluster,
                         [s.index for s in table]))


def _scheduler(sweep: Sweep) -> tuple[dict[int | None, RungTrial], list[Rung] | None]:
    steps = list(sweep.spec.scheduler.rung_steps)
    if not steps:
        return {}, None
    trials = sweep.storage.rung_trials(sweep.study_id, steps)
    return {t.number: t for t in trials}, rungs_of(trials, steps)


def _lineages(sweep: Sweep) -> dict[int | None, Any] | None:
    """A PBT sweep's lineages (``sweeper:pbt``) by trial number; else None. The population
    runs at once, so reading every trial reads a few."""
    if sweep.spec.scheduler.type != "pbt":
        return None
    return {t.number: t.user_attrs.get(protocol.PBT_ATTR)
            for t in sweep.study().get_trials(deepcopy=False)}


# --------------------------------------------------------------------------- JSON


def _workload_record(w: Workload) -> dict[str, Any]:
    record: dict[str, Any] = {
        "job": w.name, "namespace": w.namespace, "state": w.state, "reason": w.reason,
        "active": w.active, "ready": w.ready, "succeeded": w.succeeded, "failed": w.failed}
    if w.stride is not None:  # an open-ended sweep's Job: slots, each index after index
        return {**record, "slots": len(w.indexes), "completed_slots": list(w.completed),
                "failed_slots": list(w.failed_indexes)}
    return {**record, "indexes": len(w.indexes), "completed_indexes": list(w.completed),
            "failed_indexes": list(w.failed_indexes)}


def _pods(view: StatusView) -> dict[int, str] | None:
    """The pod that ran each index (None: the cluster was not read)."""
    if view.cluster is None or view.cluster.note is not None:
        return None
    return dict(view.cluster.pods)


def _index_record(view: StatusView, row: IndexView, pods: dict[int, str] | None
                  ) -> dict[str, Any]:
    s = row.status
    record: dict[str, Any] = {
        "index": s.index, "state": row.state, "attempts": s.attempts,
        "trial_number": s.trial_number,
        "values": dict(zip(view.metrics, s.values, strict=False)) if s.values else None,
        "fail_reason": s.fail_reason, "code": s.code, "usage": row.usage}
    if view.rungs is not None:
        record["rung"] = row.rung.rung if row.rung is not None else None
        record["paused"] = bool(row.rung is not None and row.rung.paused)
    if view.pbt:
        record["pbt"] = row.pbt
    if pods is not None:
        record["pod"] = pods.get(s.index)
    return record


def status_record(view: StatusView) -> dict[str, Any]:
    """The ``--format json`` document."""
    record: dict[str, Any] = {
        "name": view.name, "method": view.method, "indexes": view.indexes,
        "finished_indexes": view.finished_indexes, "trials_by_state": view.trials_by_state,
        "stop": view.stop.to_json() if view.stop is not None else None, "code": view.code,
        "spending": spending_record(view.spending)}
    if view.cluster is not None and view.cluster.note is None:
        record["kubernetes_jobs"] = [_workload_record(w) for w in view.cluster.workloads]
    pods = _pods(view)
    record["per_index"] = [_index_record(view, row, pods) for row in view.rows]
    if view.rungs is not None:
        record["rungs"] = [asdict(r) for r in view.rungs]
    return record


# --------------------------------------------------------------------------- text


def _header_lines(view: StatusView) -> list[str]:
    """The lines above the table: counts (and the code snapshot), the stop, the Jobs."""
    of = "" if view.indexes is None else f"/{view.indexes}"
    ended = " (open-ended: as many as the budget pays for)" if view.indexes is None else ""
    lines = [f"{view.name}: {view.finished_indexes}{of} indexes finished{ended}; trials: "
             + ", ".join(f"{k.lower()} {v}" for k, v in sorted(view.trials_by_state.items()))
             + (f"; code {view.code}" if view.code else "")]
    if view.stop is not None:
        lines.append(("stopped: " if view.stop.stopped else "stop ignored (--ignore-stop): ")
                     + view.stop.describe())
    for w in view.cluster.workloads if view.cluster is not None else ():
        reason = f" ({w.reason})" if w.reason else ""
        what = "indexes" if w.stride is None else "slots"
        lines.append(f"Job {w.namespace}/{w.name}: {w.state}{reason}; pods active {w.active}, "
                     f"succeeded {w.succeeded}, failed {w.failed}; {what} completed "
                     f"{ranges_of(list(w.completed)) or '-'}, failed "
                     f"{ranges_of(list(w.failed_indexes)) or '-'} (of {len(w.indexes)})"
                     + (f"; slot j runs indexes j, j+{w.stride}, ... one after the other"
                        if w.stride is not None else ""))
    return lines


def _reason_width(table: str) -> int:
    """What is left of the terminal for the reason column (at least 30 characters)."""
    used = max((len(line) for line in table.splitlines()), default=0)
    return max(30, shutil.get_terminal_size((120, 24)).columns - used - 2)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def _extra_columns(view: StatusView, headers: list[str], rows: list[list[Any]]) -> None:
    """The columns only some sweeps have: rung, PBT lineage, code, the pod (a cluster's),
    failure reason."""
    _scheduler_columns(view, headers, rows)
    if len({r.status.code for r in view.rows if r.status.code}) > 1:  # 12 hex digits
        headers.append("code")
        for row, r in zip(rows, view.rows, strict=True):
            row.append(r.status.code[7:19] if r.status.code else "")
    pods = _pods(view)
    if pods:
        headers.append("pod")
        for row, r in zip(rows, view.rows, strict=True):
            row.append(pods.get(r.status.index, ""))
    if any(r.status.fail_reason for r in view.rows):
        headers.append("reason")
        width = _reason_width(format_table(headers[:-1], rows))
        for row, r in zip(rows, view.rows, strict=True):
            reason = r.status.fail_reason
            row.append(_clip(reason, width) if reason else "")


def _scheduler_columns(view: StatusView, headers: list[str], rows: list[list[Any]]) -> None:
    """A scheduler's rung column, PBT's lineage column."""
    if view.rungs is not None:
        headers.append("rung")
        for row, r in zip(rows, view.rows, strict=True):
            row.append(rung_cell(r.rung))
    if view.pbt:  # PBT: the lineage's last copy, "from #3 at step 7"
        from sweeper.pbt_lineage import describe as lineage

        headers.append("pbt")
        for row, r in zip(rows, view.rows, strict=True):
            row.append(lineage(r.pbt))


def status_lines(view: StatusView) -> list[str]:
    """The text rendering: header lines, the rungs, the per-index table, then what was
    spent."""
    headers = ["index", "state", "attempts", "trial", *view.metrics]
    rows = [[r.status.index, r.state, r.status.attempts, r.status.trial_number,
             *(r.status.values or [None] * len(view.metrics))] for r in view.rows]
    _extra_columns(view, headers, rows)
    lines = _header_lines(view)
    if view.rungs is not None:
        lines.append(rungs_line(view.rungs))
    return [*lines, format_table(headers, rows), *summary_lines(view.spending)]
