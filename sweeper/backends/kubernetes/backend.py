"""The Kubernetes backend: one Indexed Job per launch, submitted and (unless detached) watched.

The Job is what :func:`sweeper.backends.manifests.render_job` builds from the spec (the same
objects ``sweeper render`` prints); the storage URL is never sent to the cluster: pods read it
from a Secret. While it watches, the backend reports failed pods once each (which index, what
the exit code means), warns about pods that cannot start, and fails the trials of dead runners
whose heartbeats went stale so that their retries do not wait.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sweeper import protocol
from sweeper.backends import manifests as m
from sweeper.backends.base import (
    Cancelled,
    Deleted,
    Description,
    Holding,
    IndexLog,
    LogTail,
    RunResult,
    SweepRef,
    Tick,
    Write,
)
from sweeper.backends.kubernetes.client import ClientFactory, KubeClient, Obj
from sweeper.backends.kubernetes.detach import watch_unless_detached
from sweeper.backends.kubernetes.errors import first_line
from sweeper.backends.kubernetes.gangs import GangSettings, run_gangs
from sweeper.backends.kubernetes.jobstatus import (
    JOB_NAME_LABEL,
    JobInfo,
    exit_code,
    job_info,
    last_error_line,
    pod_attempt,
    pod_exit,
    pod_indexes,
    pod_job_index,
    pod_name,
    stuck_reasons,
)
from sweeper.backends.kubernetes.oom import oom_reason, record_oom, running_in_slot
from sweeper.backends.kubernetes.ops import (
    cancel,
    cancelled,
    delete_jobs,
    follow_shown,
    index_log,
    jobs_holding,
    shown_log,
    sweep_jobs,
    workloads,
)
from sweeper.errors import BackendError, SpecError
from sweeper.protocol import BACKEND_ATTR, CODE_ATTR, LAUNCHES_ATTR
from sweeper.study import Sweep
from sweeper.study.stop import BRAKE_RULE, brake

logger = logging.getLogger(__name__)
_POD_NAME = re.compile(r'pods "[^"]*" ')

Echo = Callable[[str], None]


@dataclass
class _Watch:
    """What one watch has already said and when it last looked (so each thing is said once)."""

    api: KubeClient
    namespace: str
    name: str
    seen_failures: set[str] = field(default_factory=set)
    warned: set[tuple[str, str]] = field(default_factory=set)
    last_failed: int = 0
    last_pending: float = 0.0
    last_events: float = 0.0
    last_stale: float = 0.0
    suspended: bool | None = None  # as last said (None: nothing said yet)
    braked: bool = False  # the sweep's first attempts all failed: stop the Job


class KubernetesBackend:
    """Creates the sweep's Job and (unless detached) watches it and the study until it ends."""

    name = "kubernetes"

    def __init__(self, clients: ClientFactory, *, detach: bool = False,
                 poll_interval_s: float = 1.0, echo: Echo | None = None,
                 grace_period_s: float | None = None, namespace: str | None = None) -> None:
        self.clients = clients
        #: Where logs, cancel, delete and describe look (None: the sweep's spec's namespace;
        #: a launch always uses the spec's).
        self.namespace = namespace
        self.detach = detach
        self.poll_interval_s = poll_interval_s
        #: How often to look for pods that cannot start (a Pending-pods list call).
        self.stuck_check_interval_s = 5.0
        self.echo: Echo = echo or logger.info
        self.grace_period_s = grace_period_s if grace_period_s is not None else \
            protocol.grace_period_s(os.environ)

    def run(self, sweep: Sweep, indexes: Sequence[int], *, storage_url: str,
            tick: Tick) -> RunResult:
        """Submit one Job for ``indexes`` (``sweep.spec.parallelism`` pods at once) and watch
        it to the end; detached, return once it is created."""
        if not indexes:
            return RunResult()
        spec = sweep.spec
        ns = spec.kubernetes.namespace
        if storage_url.startswith("sqlite"):
            pods_use = f"storage proxy {spec.kubernetes.storage_proxy}" \
                if spec.kubernetes.storage_proxy else \
                f"URL in Secret {spec.kubernetes.storage_secret}"
            self.echo(f"warning: the study is in SQLite on this machine, but the pods use the "
                      f"{pods_use}; both must name the same database (use PostgreSQL)")
        existing = sweep_jobs(self.clients, ns, spec.name, spec.trials)
        if spec.trial.nodes > 1:  # one JobSet of gangs (sweeper.backends.jobset)
            settings = GangSettings(self.poll_interval_s, self.grace_period_s, self.detach)
            return run_gangs(self.clients, sweep, settings, self.echo, tick,
                             self._next_launch(sweep, existing))
        for j in existing:
            if j.active_job:
                raise BackendError(
                    f"Job {ns}/{j.name} of sweep {spec.name} is still running; wait for it "
                    f"(sweeper status {spec.name}) or stop it first (sweeper cancel {spec.name})")
        launch = self._next_launch(sweep, existing)
        code = sweep.storage.get_study_user_attrs(sweep.study_id).get(CODE_ATTR)
        configmap, job = m.render(spec, indexes, launch=launch,
                                  code=code if spec.trial.code is not None else None)
        name = job["metadata"]["name"]
        api = KubeClient(self.clients, spec.name)
        warning = m.checkpoint_warning(spec)
        if warning:
            self.echo(f"warning: {warning}")
        api.apply_configmap(ns, configmap)  # every pod mounts it: created before the Job
        created = api.create_job(ns, job)
        api.own_configmap(ns, configmap["metadata"]["name"], created)
        self._record_launch(sweep, launch)
        completions = job["spec"]["completions"]
        sparse = " (a sparse resume Job)" if m.INDEX_MAP_ANNOTATION in \
            job["metadata"]["annotations"] else ""
        what = "an open-ended sweep (index after index until the budget is spent)" \
            if spec.open_ended else f"{len(indexes)} indexes"
        self.echo(f"created Job {ns}/{name}: {what} in {completions} pods, "
                  f"parallelism {job['spec']['parallelism']}{sparse}")
        return watch_unless_detached(f"Job {ns}/{name}", spec.name, self.detach,
                                     lambda: self._watch(sweep, _Watch(api, ns, name), tick),
                                     status_when_interrupted=True)

    # ---------------------------------------------------------------- launch bookkeeping

    @staticmethod
    def _next_launch(sweep: Sweep, existing: Sequence[JobInfo]) -> int:
        recorded = sweep.storage.get_study_user_attrs(sweep.study_id).get(LAUNCHES_ATTR, 0)
        taken = max((j.launch for j in existing), default=-1) + 1
        return max(int(recorded or 0), taken)

    @staticmethod
    def _record_launch(sweep: Sweep, launch: int) -> None:
        sweep.storage.set_study_user_attr(sweep.study_id, LAUNCHES_ATTR, launch + 1)
        sweep.storage.set_study_user_attr(sweep.study_id, BACKEND_ATTR, "kubernetes")

    def log_tail(self, sweep: Sweep, index: int, lines: int) -> LogTail:
        ns = sweep.spec.kubernetes.namespace
        log = index_log(self.clients, ns, sweep.name, sweep.spec.trials, index,
                        tail_lines=lines)
        return LogTail(f"pod {ns}/{log.pod}", log.text)

    # ---------------------------------------------------------------- managing

    def _ns(self, ref: SweepRef) -> str:
        from sweeper.spec import KubernetesSpec

        spec = ref.sweep.spec.kubernetes if ref.sweep is not None else KubernetesSpec()
        return self.namespace or spec.namespace

    def logs(self, ref: SweepRef, index: int, *, attempt: int | None,
             tail: int | None) -> IndexLog:
        return shown_log(self.clients, self._ns(ref), ref, index, attempt, tail)

    def follow(self, ref: SweepRef, index: int, *, tail: int | None, write: Write,
               say: Write) -> None:
        follow_shown(self.clients, self._ns(ref), ref, index, tail, write, say)

    def cancel(self, ref: SweepRef, *, wait_s: float) -> Cancelled:
        """Delete the sweep's Jobs (JobSets) and their pods; see :func:`.ops.cancel`."""
        ns = self._ns(ref)
        return cancelled(cancel(self.clients, ref.name, ns, sweep=ref.sweep, wait_s=wait_s),
                         ref.name, ns, wait_s)

    def holding(self, sweep: Sweep, *, required: bool) -> Holding:
        return jobs_holding(self.clients, self._ns(SweepRef(sweep.name, sweep)), sweep,
                            required=required)

    def delete(self, sweep: Sweep, holding: Holding, *, wait_s: float,
               required: bool) -> Deleted:
        return delete_jobs(self.clients, self._ns(SweepRef(sweep.name, sweep)), sweep.name,
                           wait_s, required=required)

    def describe(self, sweep: Sweep, *, required: bool,
                 indexes: Sequence[int] = ()) -> Description:
        return workloads(self.clients, self._ns(SweepRef(sweep.name, sweep)), sweep,
                         required=required, indexes=indexes)

    # ---------------------------------------------------------------- watching

    def _watch(self, sweep: Sweep, w: _Watch, tick: Tick) -> RunResult:
        where = f"{w.namespace}/{w.name}"
        while True:
            job = w.api.read_job(w.namespace, w.name)
            if job is None:
                raise BackendError(f"Job {where} was deleted while sweeper watched it; "
                                   f"`sweeper resume {sweep.name}` relaunches what is missing")
            info = job_info(job, sweep.spec.trials)
            self._observe(sweep, w, info)
            if w.braked:  # every attempt so far failed: no pod more (the brake)
                w.api.delete_job(w.namespace, w.name, propagation_policy="Background")
                return RunResult(finished=self._outcome(sweep, info)[0], messages=(
                    f"deleted Job {where}: the sweep stopped at its start",))
            tick()
            if info.finished or info.state == "Deleting":
                break
            time.sleep(self.poll_interval_s)
        if info.state == "Deleting":
            raise BackendError(f"Job {where} is being deleted (sweeper cancel?); "
                               f"`sweeper resume {sweep.name}` relaunches what is missing")
        messages: list[str] = []
        if info.state == "Failed":
            if info.reason == "PodFailurePolicy":
                raise SpecError(f"Job {where} failed: a trial runner reported a "
                                f"configuration error (exit code {protocol.EXIT_CONFIG}): "
                                f"{self._config_error_detail(w, info)}",
                                source=sweep.spec.source)
            messages.append(f"Job {where} failed: {info.reason or 'Failed'}"
                            + (f": {info.message}" if info.message else ""))
        finished, failed = self._outcome(sweep, info)
        return RunResult(finished=finished, failed=failed, messages=tuple(messages))

    @staticmethod
    def _outcome(sweep: Sweep, info: JobInfo) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The sweep indexes the Job finished and those that failed for good: from its
        status, or (an open-ended sweep's slots, whose status does not name indexes) from the
        study's index table."""
        if info.stride is None:
            return info.completed, info.unfinished()
        table = sweep.storage.index_table(sweep.study_id, sweep.spec.index_count)
        return (tuple(s.index for s in table if s.state in ("COMPLETE", "PRUNED")),
                tuple(s.index for s in table if s.state == "FAIL"))

    def _observe(self, sweep: Sweep, w: _Watch, info: JobInfo) -> None:
        """One look at the Job: new failed pods, pods that cannot start, stale trials."""
        now = time.monotonic()
        suspended = info.reason == "Suspended"
        if suspended != bool(w.suspended) and (suspended or w.suspended is not None):
            w.suspended = suspended
            self.echo(f"Job {w.namespace}/{w.name}: {info.message}" if suspended
                      else f"Job {w.namespace}/{w.name} admitted: its pods start")
        if info.failed != w.last_failed:
            w.last_failed = info.failed
            self._report_failures(sweep, w, info)
            state = brake(sweep.storage, sweep.study_id, sweep.spec)
            w.braked = state is not None and state.rule == BRAKE_RULE
        if info.active > info.ready and now - w.last_pending >= self.stuck_check_interval_s:
            w.last_pending = now
            self._report_stuck(w, info)
        if info.active == 0 and not suspended and not info.finished \
                and now - w.last_events >= self.stuck_check_interval_s:
            w.last_events = now
            self._report_failed_creates(w)
        if now - w.last_stale >= max(1.0, self.grace_period_s / 4):
            w.last_stale = now
            sweep.storage.fail_stale_trials(sweep.study_id, self.grace_period_s)

    def _pods(self, w: _Watch, info: JobInfo, phase: str) -> list[Obj]:
        """The Job's pods in one phase (never every pod: a big sweep keeps thousands)."""
        return w.api.list_pods(w.namespace, f"{JOB_NAME_LABEL}={info.name}",
                               field_selector=f"status.phase={phase}")

    def _report_failures(self, sweep: Sweep, w: _Watch, info: JobInfo) -> None:
        """Say once per failed pod which index it ran and what its exit code means; record an
        OOM kill on the trial it ended (sweeper.backends.kubernetes.oom)."""
        for pod in self._pods(w, info, "Failed"):
            pname = pod_name(pod)
            if pname not in w.seen_failures:
                w.seen_failures.add(pname)
                self.echo(f"{pod_indexes(pod, info)}: pod {pname} {pod_exit(pod)}")
                reason, k = oom_reason(pod), pod_job_index(pod)
                if reason is not None and k is not None:
                    failed = self._record_oom(sweep, info, k, pod, reason)
                    self.echo(f"{pod_indexes(pod, info)}: pod {pname} was OOM-killed: "
                              f"over its memory limit; trial(s) "
                              f"{', '.join(f'#{n}' for n in failed) or '-'} marked FAIL")

    @staticmethod
    def _record_oom(sweep: Sweep, info: JobInfo, k: int, pod: Obj, reason: str) -> list[int]:
        """Fail what job index ``k``'s OOM-killed pod ran: its indexes' attempt of the pod;
        a slot's (open-ended sweep) index that was running, its latest attempt."""
        store, study_id = sweep.storage, sweep.study_id
        if info.stride is not None:
            return record_oom(store, study_id, running_in_slot(store, study_id, k, info.stride),
                              None, reason)
        return record_oom(store, study_id, info.sweep_indexes(k), pod_attempt(pod), reason)

    def _report_stuck(self, w: _Watch, info: JobInfo) -> None:
        """Warn (once) about pods that cannot start: a bad image, a missing Secret key."""
        for pod in self._pods(w, info, "Pending"):
            pname = pod_name(pod)
            for reason, message in stuck_reasons(pod):
                if (pname, reason) not in w.warned:
                    w.warned.add((pname, reason))
                    self.echo(f"warning: {pod_indexes(pod, info)}: pod {pname} cannot "
                              f"start: {reason}: {message}")

    def _report_failed_creates(self, w: _Watch) -> None:
        """Warn (once per message) when the Job controller cannot create pods at all: Pod
        Security admission refused them, a quota is spent, a ServiceAccount is missing."""
        try:
            events = w.api.job_events(w.namespace, w.name, "FailedCreate")
        except BackendError as e:  # e.g. a Role from before sweeper read events: not fatal
            logger.debug("cannot read the Job's events: %s", e)
            return
        for event in events:
            # One warning per cause: each event names the pod it could not create.
            message = _POD_NAME.sub("pods ", first_line(str(event.get("message") or "")))
            if ("FailedCreate", message) not in w.warned:
                w.warned.add(("FailedCreate", message))
                self.echo(f"warning: Job {w.namespace}/{w.name} cannot create pods: {message}")

    def _config_error_detail(self, w: _Watch, info: JobInfo) -> str:
        """The runner's own reason, from the log of a pod that exited with EXIT_CONFIG."""
        try:
            for pod in self._pods(w, info, "Failed"):
                if exit_code(pod) == protocol.EXIT_CONFIG:
                    log = w.api.read_pod_log(w.namespace, pod_name(pod),
                                             container=m.log_container(pod), tail_lines=50)
                    return f"{last_error_line(log)} (pod {pod_name(pod)}, " \
                           f"{pod_indexes(pod, info)})"
        except BackendError as e:
            return f"(could not read the pod log: {e})"
        return info.message or "see `sweeper logs`"
