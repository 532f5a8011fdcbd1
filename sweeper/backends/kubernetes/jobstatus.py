"""Pure: Job and Pod objects (JSON as the API returns them) -> what sweeper reports.

A Job's status speaks in job indexes (``completedIndexes: "0-3,5"``); a sparse resume Job or
one with several indexes per pod maps them to sweep indexes through the annotations
:mod:`sweeper.backends.manifests` writes, decoded with :mod:`sweeper.protocol` (the same map the
runner reads). Pod helpers say which sweep indexes a pod ran and what its exit code means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sweeper import protocol
from sweeper.backends import manifests as m
from sweeper.backends.kubernetes.errors import first_line
from sweeper.spec import MAX_INDEXES

Obj = dict[str, Any]

#: Label the Job controller puts on its pods.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: Pod annotations counting earlier failed pods of the same index (backoffLimitPerIndex).
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
#: Pod waiting reasons that will not fix themselves while we watch (surface them at once).
STUCK_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError")
#: The runner's log format: "2026-01-01 12:00:00,123 ERROR trial_runner: message".
_LOG_PREFIX_RE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,.]+ [A-Z]+ [\w.]+: ")


@dataclass(frozen=True)
class JobInfo:
    """A sweep Job as ``status``/``logs``/``cancel`` need it, indexes mapped to the sweep's.

    An open-ended sweep's Job (``stride`` set) is made of slots: its completion index j runs
    the sweep indexes ``j, j+stride, ...`` one after the other, as many as the budget pays
    for, so what its status says of job indexes is said of slots: ``indexes``, ``completed``
    and ``failed_indexes`` then hold slot numbers (a slot completes once its pod is through)."""

    name: str
    namespace: str
    launch: int
    state: str  # Running, Complete, Failed, Deleting
    reason: str | None
    message: str | None
    active: int
    ready: int
    succeeded: int
    failed: int
    indexes: tuple[int, ...]  # the sweep indexes this Job covers
    completed: tuple[int, ...]  # sweep indexes whose job index completed
    failed_indexes: tuple[int, ...]
    per_pod: int
    mapping: tuple[int, ...] | None
    created: str
    trials: int
    #: An open-ended sweep's Job: its slots' stride (None: job indexes map to sweep indexes).
    stride: int | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("Complete", "Failed")

    @property
    def active_job(self) -> bool:
        return self.state == "Running"

    def sweep_indexes(self, job_index: int) -> list[int]:
        """The sweep indexes job index ``job_index`` runs ([] for a slot: as many as the
        budget pays for, known to the study only)."""
        if self.stride is not None:
            return []
        return protocol.chunk(job_index, self.per_pod, self.mapping, self.trials)

    def job_index(self, index: int) -> int | None:
        """The job index whose pod runs sweep index ``index`` (None: not in this Job); in an
        open-ended sweep's Job the slot ``index % stride``."""
        if self.stride is not None:
            return index % self.stride if 0 <= index < self.trials else None
        return protocol.job_index_of(index, self.per_pod, self.mapping, self.trials)

    def runs(self, job_index: int) -> str:
        """What job index ``job_index`` runs, in words: ``index 3``, ``indexes 4,5``, or a
        slot's ``slot 1 (indexes 1, 5, 9, ...)``."""
        if self.stride is not None:
            k, s = job_index, self.stride
            return f"slot {k} (indexes {k}, {k + s}, {k + 2 * s}, ...)"
        indexes = self.sweep_indexes(job_index)
        return f"index{'es' if len(indexes) > 1 else ''} {','.join(map(str, indexes)) or '?'}"

    def unfinished(self) -> tuple[int, ...]:
        """Sweep indexes that failed for good: a failed job index, or (the Job failed as a
        whole) any index that did not complete."""
        completed, failed = set(self.completed), set(self.failed_indexes)
        return tuple(i for i in self.indexes if i in failed
                     or (self.state == "Failed" and i not in completed))


def parse_intervals(text: str | None) -> list[int]:
    """``"0-3,5,7-8"`` (Job status completedIndexes/failedIndexes) -> [0,1,2,3,5,7,8]."""
    out: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def job_state(job: Obj) -> tuple[str, str | None, str | None]:
    """(state, reason, message): the Job's true Complete/Failed condition, else Running;
    Deleting once it has a deletionTimestamp (whatever its conditions say)."""
    state, reason, message = "Running", None, None
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
            state, reason, message = c["type"], c.get("reason"), c.get("message")
    if state == "Running" and (job.get("spec") or {}).get("suspend"):
        reason = "Suspended"
        message = "waiting for admission: a queued Job runs once Kueue admits it (its " \
                  "ClusterQueue has quota for it)"
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        state = "Deleting"
    return state, reason, message


def job_info(job: Obj, trials: int | None) -> JobInfo:
    """Pure: a Job object (as the API returns it) -> JobInfo. ``trials`` None: the sweep's
    size is not known (no storage at hand); a dense Job then covers its completions."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    ann = meta.get("annotations") or {}
    sweep = (meta.get("labels") or {}).get(m.SWEEP_LABEL, "")
    mapping = protocol.decode_index_map(ann.get(m.INDEX_MAP_ANNOTATION))
    per_pod = int(ann.get(m.INDEXES_PER_POD_ANNOTATION) or 1)
    launch = m.launch_of(sweep, meta.get("name", ""))
    state, reason, message = job_state(job)
    completions = int(spec.get("completions") or 0)
    stride = ann.get(m.INDEX_STRIDE_ANNOTATION)
    size = _size(trials, bool(stride), mapping, completions * per_pod)

    def mapped(job_indexes: Iterable[int]) -> tuple[int, ...]:
        if stride:  # slots, not sweep indexes
            return tuple(sorted(set(job_indexes)))
        return tuple(sorted({i for k in job_indexes
                             for i in protocol.chunk(k, per_pod, mapping, size)}))
    return JobInfo(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""),
        launch=launch if launch is not None else int(ann.get(m.LAUNCH_ANNOTATION) or 0),
        state=state, reason=reason, message=message,
        active=_count(status, "active"), ready=_count(status, "ready"),
        succeeded=_count(status, "succeeded"), failed=_count(status, "failed"),
        indexes=mapped(range(completions)),
        completed=mapped(parse_intervals(status.get("completedIndexes"))),
        failed_indexes=mapped(parse_intervals(status.get("failedIndexes"))),
        per_pod=per_pod, mapping=mapping, created=str(meta.get("creationTimestamp") or ""),
        trials=size, stride=int(stride) if stride and stride.isdigit() else None)


def _size(trials: int | None, slots: bool, mapping: tuple[int, ...] | None, dense: int) -> int:
    """The sweep's size: ``trials``, else what the Job says (an open-ended sweep's ceiling,
    the highest mapped index, or as many as its job indexes cover)."""
    if trials is not None:
        return trials
    if slots:
        return MAX_INDEXES
    return max(mapping) + 1 if mapping else dense


def _count(status: Obj, key: str) -> int:
    """A count of a Job's status (absent while zero)."""
    return int(status.get(key) or 0)


# --------------------------------------------------------------------------- pods


def pod_name(pod: Obj) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def pod_job_index(pod: Obj) -> int | None:
    """The completion index of a Job's pod (annotation, or label on newer clusters)."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(m.COMPLETION_INDEX) \
        or (meta.get("labels") or {}).get(m.COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def pod_indexes(pod: Obj, info: JobInfo) -> str:
    """What the pod ran, in words (:meth:`JobInfo.runs`): ``index 3``, ``indexes 4,5``, a
    slot's ``slot 1 (indexes 1, 5, 9, ...)``; ``index ?`` when unknown."""
    k = pod_job_index(pod)
    return "index ?" if k is None else info.runs(k)


def pod_attempt(pod: Obj) -> int:
    """How many pods of the same index failed before this one (0: the first attempt)."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return int(ann.get(INDEX_FAILURE_COUNT) or 0) + int(ann.get(INDEX_IGNORED_FAILURE_COUNT) or 0)


def exit_code(pod: Obj) -> int | None:
    """The trial container's exit code, None while it has not terminated."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == m.CONTAINER_NAME:
            term = (cs.get("state") or {}).get("terminated") or {}
            if "exitCode" in term:
                return int(term["exitCode"])
    return None


def pod_exit(pod: Obj) -> str:
    """What a failed pod's end means, in words: ``exited with code 1 (retryable failure)``."""
    code = exit_code(pod)
    status = pod.get("status") or {}
    if code is None:
        why = status.get("reason") or status.get("message") or "unknown reason"
        return f"failed ({why})"
    meaning = protocol.EXIT_NAMES.get(code) or \
        ("killed by a signal" if code > protocol.EXIT_SIGNAL_BASE else "error")
    return f"exited with code {code} ({meaning})"


def stuck_reasons(pod: Obj) -> list[tuple[str, str]]:
    """(reason, first message line) for each container waiting on something that will not fix
    itself: a bad image, a missing Secret or key."""
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in STUCK_REASONS:
            out.append((str(reason), first_line(waiting.get("message") or "")))
    return out


def last_error_line(log: str) -> str:
    """The runner's last ERROR line (else its last line) without the logging prefix."""
    lines = [ln for ln in log.splitlines() if "ERROR" in ln] or log.splitlines()
    return _LOG_PREFIX_RE.sub("", lines[-1].strip())[:500] if lines else "no output"
