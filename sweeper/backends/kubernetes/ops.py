"""What ``sweeper status``, ``sweeper logs`` and ``sweeper cancel`` ask of the cluster.

Every function takes the :class:`ClientFactory` the CLI built (the client is created on the
first request) and reads only the sweep's own objects, by label selector: a big sweep keeps
thousands of pods, and a namespace may hold other sweeps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from optuna.trial import TrialState

from sweeper.backends import manifests as m
from sweeper.backends.kubernetes.client import ClientFactory, KubeClient, Obj
from sweeper.backends.kubernetes.jobstatus import (
    JOB_NAME_LABEL,
    JobInfo,
    job_info,
    pod_attempt,
    pod_name,
)
from sweeper.errors import BackendError
from sweeper.protocol import INDEX_ATTR
from sweeper.study import Sweep, mark_failed, trial_id_of


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
    attempt: int
    text: str


def index_log(clients: ClientFactory, namespace: str, sweep_name: str, trials: int | None,
              index: int, tail_lines: int | None = None) -> PodLog:
    """The log of the pod that ran sweep index ``index`` most recently (any of its Jobs)."""
    if trials is not None and not 0 <= index < trials:
        raise BackendError(f"index {index} is outside sweep {sweep_name} (0..{trials - 1})")
    api = KubeClient(clients, sweep_name)
    candidates: list[tuple[tuple[int, int, str, str], Obj, JobInfo]] = []
    for info in sweep_jobs(clients, namespace, sweep_name, trials):
        k = info.job_index(index)
        if k is None:
            continue
        selector = (f"{m.selector(sweep_name)},{JOB_NAME_LABEL}={info.name},"
                    f"{m.COMPLETION_INDEX}={k}")
        for pod in api.list_pods(namespace, selector):
            created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
            candidates.append(((info.launch, pod_attempt(pod), created, pod_name(pod)),
                               pod, info))
    if not candidates:
        raise BackendError(f"no pod of sweep {sweep_name} ran index {index} in namespace "
                           f"{namespace} (the Job may have been deleted: finished Jobs are "
                           "removed after kubernetes.ttl_after_finished, cancelled ones at once)")
    candidates.sort(key=lambda c: c[0])
    key, pod, info = candidates[-1]
    pname = pod_name(pod)
    phase = (pod.get("status") or {}).get("phase") or "Unknown"
    try:
        text = api.read_pod_log(namespace, pname, container=m.CONTAINER_NAME,
                                tail_lines=tail_lines)
    except BackendError as e:
        if phase == "Pending":
            raise BackendError(f"pod {pname} (index {index}) has not started yet: {e}") from None
        raise
    return PodLog(pod=pname, job=info.name, phase=phase, attempt=key[1], text=text)


# --------------------------------------------------------------------------- cancel


@dataclass(frozen=True)
class CancelResult:
    jobs: tuple[str, ...]
    pods: int
    failed_trials: tuple[int, ...]  # numbers of the RUNNING trials marked FAIL
    unfinished: bool = False  # a Job was still being deleted when we stopped waiting


def cancel(clients: ClientFactory, name: str, namespace: str, *, sweep: Sweep | None = None,
           wait_s: float = 60.0, poll_s: float = 0.5) -> CancelResult:
    """Delete every Job of sweep ``name`` (their pods go with them), wait for them to be gone,
    and (given the ``sweep`` record) mark the RUNNING trials of their indexes FAIL so that a
    resume retries them at once instead of waiting for their heartbeats to go stale."""
    api = KubeClient(clients, name)
    jobs = sweep_jobs(clients, namespace, name, sweep.spec.trials if sweep else None)
    pods = api.list_pods(namespace, m.selector(name))
    indexes: set[int] = set()
    deleted = []
    for j in jobs:
        # Foreground: the Job object stays until the garbage collector has removed its pods,
        # so "the Job is gone" below means "its pods are gone" too.
        if api.delete_job(namespace, j.name, propagation_policy="Foreground"):
            deleted.append(j.name)
        if not j.finished:
            indexes.update(j.indexes)
    remaining = _wait_gone(api, namespace, deleted, wait_s, poll_s)
    failed: list[int] = []
    if indexes and sweep is not None:
        failed = _fail_running(sweep, indexes)
    return CancelResult(jobs=tuple(deleted), pods=len(pods), failed_trials=tuple(failed),
                        unfinished=bool(remaining))


def _wait_gone(api: KubeClient, namespace: str, names: list[str], wait_s: float,
               poll_s: float) -> set[str]:
    """Wait up to ``wait_s`` for the Jobs ``names`` to disappear; those still there."""
    deadline = time.monotonic() + wait_s
    remaining = set(names)
    while remaining and time.monotonic() < deadline:
        for job in list(remaining):
            if api.read_job(namespace, job) is None:
                remaining.discard(job)
        if remaining:
            time.sleep(poll_s)
    return remaining


def _fail_running(sweep: Sweep, indexes: set[int]) -> list[int]:
    """Mark the RUNNING trials of ``indexes`` FAIL (cancelled); their trial numbers."""
    failed: list[int] = []
    running = sweep.storage.get_all_trials(sweep.study_id, deepcopy=False,
                                           states=(TrialState.RUNNING,))
    for t in running:
        if t.user_attrs.get(INDEX_ATTR) in indexes and \
                mark_failed(sweep.storage, trial_id_of(t), "cancelled (sweeper cancel)"):
            failed.append(t.number)
    return failed
