"""What ``sweeper status``, ``logs``, ``cancel`` and ``delete`` ask of the cluster, and what
the Kubernetes backend answers them (:class:`~sweeper.backends.base.Backend`).

Every function takes the :class:`ClientFactory` the CLI built (the client is created on the
first request) and reads only the sweep's own objects, by label selector: a big sweep keeps
thousands of pods, and a namespace may hold other sweeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any

from optuna.trial import TrialState

from sweeper._optuna_compat import trial_id_of
from sweeper.backends import manifests as m
from sweeper.backends.base import (
    Cancelled,
    Deleted,
    Description,
    Holding,
    IndexLog,
    SweepRef,
    Workload,
    Write,
)
from sweeper.backends.kubernetes.client import ClientFactory, KubeClient, Obj
from sweeper.backends.kubernetes.jobstatus import (
    JOB_NAME_LABEL,
    JobInfo,
    job_info,
    pod_attempt,
    pod_job_index,
    pod_name,
)
from sweeper.backends.kubernetes.promoted import Promoted, other_segments, started
from sweeper.errors import BackendError
from sweeper.protocol import CANCELLED_ATTR, INDEX_ATTR, LAUNCHES_ATTR, RUNG_ATTR, LogHeader
from sweeper.runlogs import (
    Section,
    attempts_of,
    in_run_order,
    index_parts,
    last_lines,
    pick,
    segments_of,
    split_attempts,
)
from sweeper.study import Sweep


def sweep_jobs(clients: ClientFactory, namespace: str, sweep_name: str, trials: int | None
               ) -> list[JobInfo]:
    """Every Job of the sweep in ``namespace``, oldest launch first."""
    items = KubeClient(clients, sweep_name).list_jobs(namespace, m.selector(sweep_name))
    jobs = [job_info(j, trials) for j in items]
    return sorted(jobs, key=lambda j: (j.launch, j.created, j.name))


# --------------------------------------------------------------------------- logs


@dataclass(frozen=True)
class PodLog:
    pod: str
    job: str
    phase: str
    attempt: int  # the pod's attempt (the index's failure count in its Job)
    text: str
    #: The runner's header of the attempt shown (None: the log holds none, e.g. tail only).
    header: LogHeader | None = None
    segments: int = 1  # the parts the attempt ran in (promoted after a pause: more than one)
    #: The other pods that ran promoted segments of it (``scheduler:``), in ``text`` too.
    promoted_in: tuple[str, ...] = ()
    #: A slot's pod (it runs index after index): what it runs, ``slot 1 (indexes 1, 4, ...)``.
    slot: str | None = None


@dataclass(frozen=True)
class _PodRun:
    key: tuple[int, int, str, str]  # (launch, pod attempt, created, name): oldest first
    pod: Obj
    job: str  # the Job's name
    #: What the pod runs, in words: ``index 3``, ``slot 1 (indexes 1, 4, 7, ...)``.
    runs: str = ""
    #: The pod runs index after index, each its part of the log (an open-ended sweep's slot,
    #: a multi-node gang): an index's log is its part of the pod that ran it.
    slotted: bool = False


def _run_of(pod: Obj, info: JobInfo, k: int) -> _PodRun:
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    return _PodRun((info.launch, pod_attempt(pod), created, pod_name(pod)), pod, info.name,
                   info.runs(k), slotted=info.stride is not None)


def _pod_runs(clients: ClientFactory, namespace: str, sweep_name: str, trials: int | None,
              index: int) -> list[_PodRun]:
    """Every pod that ran sweep index ``index`` (any of the sweep's Jobs), oldest first; an
    open-ended sweep's: every pod of the index's slot."""
    if trials is not None and not 0 <= index < trials:
        raise BackendError(f"index {index} is outside sweep {sweep_name} (0..{trials - 1})")
    api = KubeClient(clients, sweep_name)
    runs: list[_PodRun] = []
    for info in sweep_jobs(clients, namespace, sweep_name, trials):
        k = info.job_index(index)
        if k is None:
            continue
        selector = (f"{m.selector(sweep_name)},{JOB_NAME_LABEL}={info.name},"
                    f"{m.COMPLETION_INDEX}={k}")
        runs += [_run_of(pod, info, k) for pod in api.list_pods(namespace, selector)]
    runs += [g.run for g in _gangs(api.list_pods(
        namespace, f"{m.selector(sweep_name)},{m.COMPLETION_INDEX}=0"), sweep_name)
        if g.slot == index % g.replicas]
    if not runs:
        raise BackendError(f"no pod of sweep {sweep_name} ran index {index} in namespace "
                           f"{namespace} (the Job may have been deleted: finished Jobs are "
                           "removed after kubernetes.ttl_after_finished, cancelled ones at once)")
    return sorted(runs, key=lambda r: r.key)


@dataclass(frozen=True)
class _GangPod:
    """A multi-node sweep's node-0 pod of gang ``slot`` (of ``replicas``): node 0's log holds
    the trial's runner and the leader rank of the indexes ``slot, slot+replicas, ...``."""

    slot: int
    replicas: int
    run: _PodRun


def _gangs(pods: list[Obj], sweep_name: str) -> list[_GangPod]:
    """The node-0 pods of a multi-node sweep's gangs among ``pods``."""
    from sweeper.backends.jobset import JOB_INDEX, REPLICAS_LABEL, SET_NAME_LABEL

    gangs = []
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if JOB_INDEX not in labels or not str(labels.get(REPLICAS_LABEL, "")).isdigit() or \
                pod_job_index(pod) != 0:
            continue  # a single-node Job's pod, or a follower node
        slot, replicas = int(labels[JOB_INDEX]), max(1, int(labels[REPLICAS_LABEL]))
        launch = m.launch_of(sweep_name, str(labels.get(SET_NAME_LABEL, ""))) or 0
        created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        gangs.append(_GangPod(slot, replicas, _PodRun(
            (launch, 0, created, pod_name(pod)), pod, str(labels.get(JOB_NAME_LABEL, "")),
            f"gang {slot} (indexes {slot}, {slot + replicas}, ...)", slotted=True)))
    return gangs


def _phase(run: _PodRun) -> str:
    return str((run.pod.get("status") or {}).get("phase") or "Unknown")


def _read(api: KubeClient, namespace: str, run: _PodRun, index: int) -> str:
    pname = pod_name(run.pod)
    try:
        return api.read_pod_log(namespace, pname, container=m.log_container(run.pod))
    except BackendError as e:
        if _phase(run) == "Pending":
            raise BackendError(f"pod {pname} (index {index}) has not started yet: {e}") from None
        raise


def index_log(clients: ClientFactory, namespace: str, sweep_name: str, trials: int | None,
              index: int, tail_lines: int | None = None, attempt: int | None = None,
              promoted: Promoted | None = None) -> PodLog:
    """The log of attempt ``attempt`` of sweep index ``index`` (None: the pod that ran it most
    recently), only that index's part of it when the pod ran several. ``promoted``: the store
    says the attempt ran promoted segments (:mod:`.promoted`): those in other pods are shown
    too, each after its header, in the order they ran."""
    api = KubeClient(clients, sweep_name)
    runs = _pod_runs(clients, namespace, sweep_name, trials, index)
    if attempt is None:
        chosen, text, section = _latest_log(api, namespace, runs, index)
    else:
        chosen, text, section = _attempt_log(api, namespace, runs, index, attempt, sweep_name)
    h = section.header if section is not None else None
    parts: list[Section] = []
    others: tuple[str, ...] = ()
    if promoted is not None and h is not None and \
            (h.attempt, h.trial_number) == (promoted.attempt, promoted.trial_number):
        found = other_segments(api, namespace, sweep_name, index, promoted, chosen.pod,
                               {pod_name(r.pod) for r in runs})
        own = segments_of(split_attempts(text), index, h.attempt)
        parts = in_run_order([(started(chosen.pod), s) for s in own]
                             + [(when, s) for when, _, s in found])
        others = tuple(dict.fromkeys(name for _, name, _ in found))
        section = Section(h, "".join(s.text for s in parts))
    shown = section.text if section is not None else text
    return PodLog(pod=pod_name(chosen.pod), job=chosen.job, phase=_phase(chosen),
                  attempt=chosen.key[1], text=last_lines(shown, tail_lines), header=h,
                  segments=max(1, len(parts)), promoted_in=others,
                  slot=chosen.runs if chosen.slotted else None)


def _latest_log(api: KubeClient, namespace: str, runs: list[_PodRun], index: int
                ) -> tuple[_PodRun, str, Section | None]:
    """The pod that ran ``index`` most recently, its log and the latest attempt's part of it
    (None: the log has no part of it, e.g. a runner that failed before its header: the whole
    log is shown). A slot's pods (index after index): the newest whose log holds a part of
    ``index`` (a pod replaced after it ran the index); none is an error (not run yet)."""
    newest, text = runs[-1], _read(api, namespace, runs[-1], index)
    section = pick(split_attempts(text), index, None)
    if section is not None or not newest.slotted:
        return newest, text, section
    for run in reversed(runs[:-1]):
        try:
            older = _read(api, namespace, run, index)
        except BackendError:
            continue  # its log is gone: look at the older pods
        section = pick(split_attempts(older), index, None)
        if section is not None:
            return run, older, section
    raise BackendError(f"index {index} has not run in pod {pod_name(newest.pod)} (Job "
                       f"{newest.job}, {newest.runs}, one after the other) nor in an earlier "
                       f"pod of its slot: not started yet, or never (the sweep ended before it)")


def _attempt_log(api: KubeClient, namespace: str, runs: list[_PodRun], index: int,
                 attempt: int, sweep_name: str) -> tuple[_PodRun, str, Section]:
    """The newest pod whose log holds attempt ``attempt`` of ``index``: the pod, its log and
    that attempt's section of it."""
    for run in reversed(runs):
        try:
            text = _read(api, namespace, run, index)
        except BackendError:
            continue  # not started, or its log is gone: look at the older pods
        section = pick(split_attempts(text), index, attempt)
        if section is not None:
            return run, text, section
    raise BackendError(f"no log of attempt {attempt} of index {index} in the "
                       f"{len(runs)} pod(s) of sweep {sweep_name} that ran it")


def follow_index_log(clients: ClientFactory, namespace: str, sweep_name: str,
                     trials: int | None, index: int, *, tail_lines: int | None = None,
                     poll_s: float = 1.0) -> tuple[PodLog, Iterator[str]]:
    """The pod that ran ``index`` most recently (once it has started: this waits while it is
    Pending) and its log as it is written, until its container ends. A slot's pod (it runs
    index after index): the one whose log holds a part of ``index``, else the newest, and
    only that index's parts of its log, from the start (``tail_lines`` counts the pod's
    lines, not the index's), until the slot goes on to a later index."""
    api = KubeClient(clients, sweep_name)
    while True:
        runs = _pod_runs(clients, namespace, sweep_name, trials, index)
        if _phase(runs[-1]) != "Pending":
            break
        time.sleep(poll_s)
    run = _holding(api, namespace, runs, index) if runs[-1].slotted else runs[-1]
    pod = PodLog(pod=pod_name(run.pod), job=run.job, phase=_phase(run),
                 attempt=run.key[1], text="", slot=run.runs if run.slotted else None)
    stream = api.stream_pod_log(namespace, pod.pod, container=m.log_container(run.pod),
                                tail_lines=None if run.slotted else tail_lines)
    return pod, index_parts(stream, index) if run.slotted else stream


def _holding(api: KubeClient, namespace: str, runs: list[_PodRun], index: int) -> _PodRun:
    """The newest of a slot's pods whose log holds a part of ``index``, else the newest (the
    index has not started: it will there)."""
    for run in reversed(runs):
        try:
            text = _read(api, namespace, run, index)
        except BackendError:
            continue
        if any(s.header is not None for s in attempts_of(split_attempts(text), index)):
            return run
    return runs[-1]


# --------------------------------------------------------------------------- cancel


@dataclass(frozen=True)
class CancelResult:
    jobs: tuple[str, ...]
    pods: int
    failed_trials: tuple[int, ...]  # numbers of the RUNNING trials marked FAIL
    unfinished: bool = False  # a Job was still being deleted when we stopped waiting
    jobsets: tuple[str, ...] = ()  # a multi-node sweep's JobSets deleted
    #: numbers of the promoted RUNNING trials put back paused (WAITING) at their rung
    paused_trials: tuple[int, ...] = ()


def cancel(clients: ClientFactory, name: str, namespace: str, *, sweep: Sweep | None = None,
           wait_s: float = 60.0, poll_s: float = 0.5) -> CancelResult:
    """Delete every Job of sweep ``name`` (their pods go with them), wait for them to be gone,
    and (given the ``sweep`` record) mark the RUNNING trials of their indexes FAIL so that a
    resume retries them at once instead of waiting for their heartbeats to go stale; under a
    scheduler a promoted one goes back to WAITING, paused at its rung, instead
    (:func:`rung_kept`). The launch is marked cancelled first (:func:`mark_cancelled`)."""
    api = KubeClient(clients, name)
    if sweep is not None:
        mark_cancelled(sweep)
    jobs = sweep_jobs(clients, namespace, name, sweep.spec.trials if sweep else None)
    pods = api.list_pods(namespace, m.selector(name))
    indexes: set[int] | None = set()  # None: any index (a slot's, a gang's)
    deleted = []
    for j in jobs:
        # Foreground: the Job object stays until the garbage collector has removed its pods,
        # so "the Job is gone" below means "its pods are gone" too.
        if api.delete_job(namespace, j.name, propagation_policy="Foreground"):
            deleted.append(j.name)
        if not j.finished and indexes is not None:
            indexes = None if j.stride is not None else indexes | set(j.indexes)
    jobsets = _delete_jobsets(api, namespace, name)  # a multi-node sweep's gangs
    if jobsets:
        indexes = None
    remaining = _wait_gone(api, namespace, deleted, wait_s, poll_s)
    remaining |= _wait_gone(api, namespace, jobsets, wait_s, poll_s, read=api.read_jobset)
    paused: list[int] = []
    failed: list[int] = []
    if indexes != set() and sweep is not None:
        paused, failed = stop_running(sweep, indexes)
    return CancelResult(jobs=tuple(deleted), pods=len(pods), failed_trials=tuple(failed),
                        unfinished=bool(remaining), jobsets=tuple(jobsets),
                        paused_trials=tuple(paused))


def mark_cancelled(sweep: Sweep) -> None:
    """Record that the sweep's current launch is being cancelled, before its pods get the
    deletion's SIGTERM: their runners then record their attempts as stopped by sweeper (as
    ``sweeper run``'s SIGINT is locally), not as preempted (``protocol.CANCELLED_ATTR``)."""
    storage = sweep.storage
    launch = storage.get_study_user_attrs(sweep.study_id).get(LAUNCHES_ATTR, 0)
    storage.set_study_user_attr(sweep.study_id, CANCELLED_ATTR, launch)


def _delete_jobsets(api: KubeClient, namespace: str, name: str) -> list[str]:
    """Delete the sweep's JobSets (foreground: their Jobs and pods first); their names."""
    names = [str(o["metadata"]["name"]) for o in api.list_jobsets(namespace, m.selector(name))]
    return [n for n in names if api.delete_jobset(namespace, n)]


def _wait_gone(api: KubeClient, namespace: str, names: list[str], wait_s: float,
               poll_s: float, read: Callable[[str, str], Obj | None] | None = None
               ) -> set[str]:
    """Wait up to ``wait_s`` for the Jobs (or what ``read`` reads) ``names`` to disappear;
    those still there."""
    read = read or api.read_job
    deadline = time.monotonic() + wait_s
    remaining = set(names)
    while remaining and time.monotonic() < deadline:
        for job in list(remaining):
            if read(namespace, job) is None:
                remaining.discard(job)
        if remaining:
            time.sleep(poll_s)
    return remaining


def rung_kept(user_attrs: Mapping[str, Any], *, scheduler: bool) -> int | None:
    """The rung a cancelled RUNNING trial goes back to, paused (None: it is marked FAIL).

    Only a promoted trial has one (``sweeper:rung``, written at its pause): paused there again
    it keeps its reports and checkpoint, and a resume claims the promotion again, as after an
    interrupted promoter or a stale promotion (``requeue_stale``). A trial in its first run
    fails, as an interrupted runner fails it: it has no pause to go back to (a rung it went
    on from at once would rank it again against later trials), and its retry resumes from
    its index's checkpoint."""
    rung = user_attrs.get(RUNG_ATTR) if scheduler else None
    return int(rung) if rung is not None else None


def stop_running(sweep: Sweep, indexes: set[int] | None) -> tuple[list[int], list[int]]:
    """Put back paused the promoted RUNNING trials (of any index: a promotion runs in whichever
    pod of the sweep claimed it) and mark FAIL (cancelled) the other RUNNING trials of
    ``indexes`` (None: of any index); their trial numbers (paused, failed)."""
    scheduler = sweep.spec.scheduler.enabled
    paused: list[int] = []
    failed: list[int] = []
    running = sweep.storage.get_all_trials(sweep.study_id, deepcopy=False,
                                           states=(TrialState.RUNNING,))
    for t in running:
        rung = rung_kept(t.user_attrs, scheduler=scheduler)
        if rung is not None:
            if sweep.storage.pause(trial_id_of(t), rung):
                paused.append(t.number)
        elif (indexes is None or t.user_attrs.get(INDEX_ATTR) in indexes) and \
                sweep.storage.mark_failed(trial_id_of(t), "cancelled (sweeper cancel)"):
            failed.append(t.number)
    return paused, failed


# --------------------------------------------------------------------------- as shown


def shown_log(clients: ClientFactory, namespace: str, ref: SweepRef, index: int,
              attempt: int | None, tail: int | None) -> IndexLog:
    """:func:`index_log` with the lines that say which pod, Job and attempt it comes from
    (and, without the storage, what cannot be shown)."""
    from sweeper.backends.kubernetes.promoted import promoted_attempt

    sweep = ref.sweep
    log = index_log(clients, namespace, ref.name, ref.trials, index, tail_lines=tail,
                    attempt=attempt,
                    promoted=promoted_attempt(sweep, index, attempt) if sweep else None)
    h = log.header
    what = f"attempt {h.attempt}, trial #{h.trial_number}" if h is not None else \
        f"pod attempt {log.attempt}"
    if log.segments > 1:  # promoted after a pause (scheduler:): each part has its header
        what += f", {log.segments} segments"
    of = f" of {log.slot}" if log.slot else ""
    notes = [f"pod {namespace}/{log.pod} (Job {log.job}, index {index}{of}, {what}, "
             f"{log.phase})"]
    if log.promoted_in:
        notes.append(f"promoted segments from pod(s) {', '.join(log.promoted_in)}")
    if sweep is None:
        notes.append("note: the storage is not at hand, so only the pods of this index were "
                     "read: under a promotion scheduler a segment that another pod resumed is "
                     "not shown (give --storage)")
    text = log.text if log.text.endswith("\n") else log.text + "\n"
    return IndexLog(tuple(notes), text)


def follow_shown(clients: ClientFactory, namespace: str, ref: SweepRef, index: int,
                 tail: int | None, write: Write, say: Write) -> None:
    """:func:`follow_index_log`, the pod named first."""
    pod, stream = follow_index_log(clients, namespace, ref.name, ref.trials, index,
                                   tail_lines=tail)
    of = f" of {pod.slot}" if pod.slot else ""
    say(f"pod {namespace}/{pod.pod} (Job {pod.job}, index {index}{of}, {pod.phase}; "
        f"following)")
    written = False
    for text in stream:
        write(text)
        written = True
    if pod.slot and not written:
        say(f"pod {pod.pod} ended without running index {index} (the sweep ended before it)")


def cancelled(result: CancelResult, name: str, namespace: str, wait_s: float) -> Cancelled:
    """A :class:`CancelResult` in words."""
    lines = [] if result.jobs or result.jobsets else \
        [f"no Job of sweep {name} in namespace {namespace}"]
    for kind, names in (("JobSet", result.jobsets), ("Job", result.jobs)):
        lines += [f"deleted {kind} {namespace}/{job}" for job in names]
    if result.jobs or result.jobsets:
        lines.append(f"deleted {result.pods} pod(s)" + (
            f" (still terminating after {wait_s:.0f}s)" if result.unfinished else ""))
    return Cancelled(tuple(lines), result.paused_trials, result.failed_trials)


def jobs_holding(clients: ClientFactory, namespace: str, sweep: Sweep, *,
                 required: bool) -> Holding:
    """The sweep's Jobs, for the question before deleting; an unreachable cluster is a
    warning unless ``required``."""
    try:
        jobs = [j.name for j in sweep_jobs(clients, namespace, sweep.name, sweep.spec.trials)]
    except BackendError as e:
        if required:
            raise
        return Holding(warnings=(f"the sweep's Kubernetes Jobs are not deleted: {e}",))
    what = (f"{len(jobs)} Kubernetes Job(s) in namespace {namespace}: {', '.join(jobs)}",) \
        if jobs else ()
    return Holding(what, workloads=True, items=tuple(("Job", j) for j in jobs))


def delete_jobs(clients: ClientFactory, namespace: str, name: str, wait_s: float, *,
                required: bool) -> Deleted:
    """Delete the sweep's Jobs; their pods, and the spec's ConfigMap that each Job owns, go
    with them through the garbage collector. A ConfigMap nobody owns (applied on its own, by
    GitOps or an older sweeper) is deleted here."""
    api = KubeClient(clients, name)
    configmap = m.spec_configmap_name(name)
    try:
        before = api.read_configmap(namespace, configmap)
        result = cancel(clients, name, namespace, wait_s=wait_s)
    except BackendError as e:
        if required:
            raise
        return Deleted(warnings=(f"the sweep's Kubernetes Jobs are not deleted: {e}",))
    lines = [f"deleted Job {namespace}/{job}" + (" (its pods still terminating)"
                                                 if result.unfinished else "")
             for job in result.jobs]
    if before is None:
        return Deleted(tuple(lines))
    if before["metadata"].get("ownerReferences"):
        lines.append(f"ConfigMap {namespace}/{configmap} goes with its Job (garbage collector)")
    elif api.delete_configmap(namespace, configmap):
        lines.append(f"deleted ConfigMap {namespace}/{configmap}")
    return Deleted(tuple(lines))


def workloads(clients: ClientFactory, namespace: str, sweep: Sweep, *, required: bool,
              indexes: Sequence[int] = ()) -> Description:
    """The sweep's Jobs as :class:`Workload` values, and the pod that ran each of
    ``indexes`` most recently (:func:`index_pods`); unreadable is a note unless
    ``required``."""
    try:
        jobs = sweep_jobs(clients, namespace, sweep.name, sweep.spec.trials)
        pods = index_pods(KubeClient(clients, sweep.name).list_pods(
            namespace, m.selector(sweep.name)), jobs, sweep.name, indexes,
            started=partial(latest_start, sweep)) if indexes else {}
    except BackendError as e:
        if required:
            raise
        return Description(note=f"Kubernetes Jobs not shown: {e}")
    return Description(tuple(
        Workload("Job", j.name, j.namespace, j.state, j.reason, j.active, j.ready, j.succeeded,
                 j.failed, j.indexes, j.completed, j.failed_indexes, j.stride) for j in jobs),
        pods=tuple(sorted(pods.items())))


def latest_start(sweep: Sweep, index: int) -> datetime | None:
    """When the latest attempt of ``index`` started (naive UTC, the runner's clock), if it
    did."""
    attempts = sweep.storage.attempts(sweep.study_id, index)
    if not attempts:
        return None
    return sweep.storage.get_trial(attempts[-1].trial_id).datetime_start


def index_pods(pods: list[Obj], jobs: list[JobInfo], sweep_name: str,
               indexes: Sequence[int],
               started: Callable[[int], datetime | None] | None = None) -> dict[int, str]:
    """Pure but for ``started``: the name of the pod among ``pods`` (the sweep's) that ran
    each of ``indexes`` most recently, without reading logs. Of an open-ended sweep's slot
    that had more than one pod (one replaced after a failure or a preemption), the newest pod
    created by the time the index's latest attempt started (``started(index)``, naive UTC;
    asked only there); else, and of a gang, the newest pod. An index no pod ran is left
    out."""
    by_name = {j.name: j for j in jobs}
    of_job_index: dict[tuple[str, int], list[_PodRun]] = {}
    for pod in pods:
        job = by_name.get(str(((pod.get("metadata") or {}).get("labels") or {})
                              .get(JOB_NAME_LABEL, "")))
        k = pod_job_index(pod)
        if job is not None and k is not None:
            of_job_index.setdefault((job.name, k), []).append(_run_of(pod, job, k))
    gangs = _gangs(pods, sweep_name)
    found = {}
    for i in indexes:
        runs = [_ran(of_job_index[(j.name, k)], i, started) for j in jobs
                if (k := j.job_index(i)) is not None and (j.name, k) in of_job_index]
        runs += [g.run for g in gangs if g.slot == i % g.replicas]
        if runs:
            found[i] = pod_name(max(runs, key=lambda r: r.key).pod)
    return found


def _ran(runs: list[_PodRun], index: int,
         started: Callable[[int], datetime | None] | None) -> _PodRun:
    """Of the pods of one Job index, the one that ran ``index``: the newest, or of a slot's
    pods the newest created by the index's start (clocks agree to the second: a pod's
    creation time has no finer unit)."""
    newest = max(runs, key=lambda r: r.key)
    if len(runs) == 1 or not newest.slotted or started is None:
        return newest
    at = started(index)
    if at is None:
        return newest
    before = [r for r in runs if (created := _created(r.pod)) is not None and created <= at]
    return max(before, key=lambda r: r.key) if before else newest


def _created(pod: Obj) -> datetime | None:
    """A pod's creation time, naive UTC (its metadata's RFC 3339 timestamp)."""
    raw = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).astimezone(
            timezone.utc).replace(tzinfo=None)
    except ValueError:
        return None
