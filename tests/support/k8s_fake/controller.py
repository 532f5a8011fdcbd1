"""The Job controller and garbage collector of the fake (Kubernetes 1.33 semantics).

What it mirrors from pkg/controller/job: Indexed and NonIndexed completion, parallelism,
lowest-index-first pod creation, podReplacementPolicy, podFailurePolicy (FailJob,
FailIndex, Ignore, Count on exit codes and pod conditions), backoffLimit,
backoffLimitPerIndex / maxFailedIndexes, suspend/resume, activeDeadlineSeconds, the
interim FailureTarget / SuccessCriteriaMet conditions followed by Failed / Complete once
no pod is left running, status counters and the compact index-interval strings, and the
pod finalizer `batch.kubernetes.io/job-tracking`. Not simulated: the exponential back-off
between retries (replacements start at once), successPolicy, managedBy, pod-template
changes of a running Job, and several pods racing for one index.
"""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .kubelet import Kubelet
from .store import EVENTS, JOBS, PODS, Obj, Store, generate_name, now_rfc3339
from .validation import (
    COMPLETION_INDEX_KEY,
    INDEX_FAILURE_COUNT_KEY,
    INDEX_IGNORED_FAILURE_COUNT_KEY,
    JOB_TRACKING_FINALIZER,
)

TERMINAL = ("Succeeded", "Failed")
MSG_COMPLETE = "Reached expected number of succeeded pods"
MSG_BACKOFF = "Job has reached the specified backoff limit"
MSG_DEADLINE = "Job was active longer than specified deadline"
MSG_FAILED_INDEXES = "Job has failed indexes"
MSG_MAX_FAILED_INDEXES = "Job has exceeded the specified maximal number of failed indexes"


def format_intervals(indexes: set[int] | list[int]) -> str:
    """`{0,1,2,3,5,7,8,9}` -> "0-3,5,7-9"; two neighbours stay a list ("0,1"), as the
    real controller writes completedIndexes / failedIndexes."""
    out: list[str] = []
    items = sorted(set(indexes))
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        first, last = items[i], items[j]
        if last == first:
            out.append(str(first))
        elif last == first + 1:
            out.append(f"{first},{last}")
        else:
            out.append(f"{first}-{last}")
        i = j + 1
    return ",".join(out)


def parse_intervals(text: str | None) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        else:
            out.add(int(part))
    return out


def is_terminal(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") in TERMINAL


def pod_index(pod: Obj) -> int | None:
    raw = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def condition(obj: Obj, ctype: str) -> Obj | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def job_finished(job: Obj) -> bool:
    return any(
        (c := condition(job, t)) is not None and c.get("status") == "True"
        for t in ("Complete", "Failed")
    )


def match_pod_failure_policy(job: Obj, pod: Obj) -> tuple[str | None, str]:
    """First matching rule's action and the controller's message, or (None, "")."""
    pfp = job["spec"].get("podFailurePolicy")
    if not pfp:
        return None, ""
    ns, name = pod["metadata"].get("namespace", ""), pod["metadata"]["name"]
    status = pod.get("status", {})
    statuses = (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or [])
    for i, rule in enumerate(pfp.get("rules") or []):
        action = rule.get("action")
        codes = rule.get("onExitCodes")
        if codes is not None:
            for cs in statuses:
                term = (cs.get("state") or {}).get("terminated")
                if not term:
                    continue
                if codes.get("containerName") and cs.get("name") != codes["containerName"]:
                    continue
                code = term.get("exitCode", 0)
                if code == 0:
                    continue
                if (code in (codes.get("values") or [])) == (codes.get("operator") == "In"):
                    return action, (
                        f"Container {cs.get('name')} for pod {ns}/{name} failed with exit code "
                        f"{code} matching {action} rule at index {i}")
            continue
        for pattern in rule.get("onPodConditions") or []:
            for cond in status.get("conditions") or []:
                if cond.get("type") == pattern.get("type") and \
                        cond.get("status") == pattern.get("status", "True"):
                    return action, (f"Pod {ns}/{name} has condition {cond['type']} matching "
                                    f"{action} rule at index {i}")
    return None, ""


def delete_pod(store: Store, kubelet: Kubelet, pod: Obj, grace: int | None = None) -> None:
    """Graceful deletion: deletionTimestamp now, the kubelet sends SIGTERM then SIGKILL."""
    meta = pod["metadata"]
    if grace is None:
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
    if meta.get("deletionTimestamp"):
        if grace < int(meta.get("deletionGracePeriodSeconds") or 0):
            meta["deletionGracePeriodSeconds"] = grace
            store.touch(PODS, pod)
        if grace == 0:
            kubelet.kill_now(pod)
        return
    meta["deletionTimestamp"] = now_rfc3339()
    meta["deletionGracePeriodSeconds"] = grace
    if is_terminal(pod) and not meta.get("finalizers"):
        store.remove(PODS, pod)
        return
    if grace == 0:
        kubelet.kill_now(pod)
    store.touch(PODS, pod)


def drop_finalizer(store: Store, pod: Obj, finalizer: str = JOB_TRACKING_FINALIZER) -> None:
    meta = pod["metadata"]
    fins = meta.get("finalizers") or []
    if finalizer not in fins:
        return
    fins = [f for f in fins if f != finalizer]
    if fins:
        meta["finalizers"] = fins
    else:
        meta.pop("finalizers", None)
    if meta.get("deletionTimestamp") and not fins and is_terminal(pod):
        store.remove(PODS, pod)
    else:
        store.touch(PODS, pod)


def record_event(
    store: Store, obj: Obj, reason: str, message: str, etype: str = "Normal",
    component: str = "job-controller",
) -> None:
    meta = obj["metadata"]
    ts = now_rfc3339()
    store.create(EVENTS, {
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                     "namespace": meta.get("namespace", "default")},
        "involvedObject": {"kind": obj.get("kind"), "namespace": meta.get("namespace"),
                           "name": meta["name"], "uid": meta.get("uid"),
                           "apiVersion": obj.get("apiVersion"),
                           "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message, "type": etype,
        "source": {"component": component}, "reportingComponent": component,
        "reportingInstance": "", "firstTimestamp": ts, "lastTimestamp": ts, "count": 1,
    })


@dataclass
class JobTrack:
    """What the real controller keeps in status + pod annotations, kept on the side."""

    accounted: set[str] = field(default_factory=set)
    succeeded_indexes: set[int] = field(default_factory=set)
    failed_indexes: set[int] = field(default_factory=set)
    index_failures: dict[int, int] = field(default_factory=dict)
    index_ignored: dict[int, int] = field(default_factory=dict)
    failed: int = 0
    succeeded: int = 0
    #: (final condition type, reason, message) once decided; written as the interim
    #: condition at once and as the final one when no pod is left running.
    finished: tuple[str, str, str] | None = None
    active_since: float | None = None
    finished_at: float | None = None
    suspended_pods: set[str] = field(default_factory=set)


class JobController:
    def __init__(self, store: Store, kubelet: Kubelet, honour_ttl: bool = False) -> None:
        self.store = store
        self.kubelet = kubelet
        self.honour_ttl = honour_ttl
        self.tracks: dict[str, JobTrack] = {}

    def sync(self) -> None:
        jobs = self.store.list(JOBS)
        live = {j["metadata"]["uid"] for j in jobs}
        for uid in list(self.tracks):
            if uid not in live:
                del self.tracks[uid]
        for job in jobs:
            self._sync_job(job)
        self._collect_garbage()

    # ----------------------------------------------------------------- garbage collector

    def _collect_garbage(self) -> None:
        jobs = {j["metadata"]["uid"]: j for j in self.store.list(JOBS)}
        for pod in self.store.list(PODS):
            refs = [r for r in pod["metadata"].get("ownerReferences") or []
                    if r.get("kind") == "Job"]
            if not refs:
                if is_terminal(pod) or pod["metadata"].get("deletionTimestamp"):
                    drop_finalizer(self.store, pod)  # orphaned pods lose the tracking finalizer
                continue
            owner = jobs.get(refs[0].get("uid", ""))
            if owner is not None and not owner["metadata"].get("deletionTimestamp"):
                continue
            if not pod["metadata"].get("deletionTimestamp"):
                delete_pod(self.store, self.kubelet, pod)
            drop_finalizer(self.store, pod)
        owned: dict[str, int] = {}
        for pod in self.store.list(PODS):  # what is left after this round
            for ref in pod["metadata"].get("ownerReferences") or []:
                owned[ref.get("uid", "")] = owned.get(ref.get("uid", ""), 0) + 1
        for uid, job in jobs.items():
            fins = job["metadata"].get("finalizers") or []
            if job["metadata"].get("deletionTimestamp") and "foregroundDeletion" in fins \
                    and not owned.get(uid):
                self.store.remove(JOBS, job)

    # ----------------------------------------------------------------- job sync

    def _sync_job(self, job: Obj) -> None:
        meta, spec = job["metadata"], job["spec"]
        status = job.setdefault("status", {})
        if meta.get("deletionTimestamp"):
            return
        track = self.tracks.setdefault(meta["uid"], JobTrack())
        if job_finished(job):
            self._maybe_ttl(job, track)
            return
        before = repr(status)
        now = time.monotonic()
        indexed = spec.get("completionMode") == "Indexed"
        completions: int | None = spec.get("completions")
        per_index: int | None = spec.get("backoffLimitPerIndex") if indexed else None
        suspended = bool(spec.get("suspend"))
        pods = [p for p in self.store.list(PODS, meta.get("namespace"))
                if any(r.get("uid") == meta["uid"] and r.get("controller")
                       for r in p["metadata"].get("ownerReferences") or [])]

        # suspend / resume
        if suspended:
            _set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended")
            track.active_since = None
            for pod in pods:
                if not is_terminal(pod) and not pod["metadata"].get("deletionTimestamp"):
                    track.suspended_pods.add(pod["metadata"]["uid"])
                    delete_pod(self.store, self.kubelet, pod)
        else:
            susp = _find_condition(status, "Suspended")
            if susp is not None and susp["status"] == "True":
                _set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
                status["startTime"] = now_rfc3339()
                track.active_since = now
                record_event(self.store, job, "Resumed", "Job resumed")
            if not status.get("startTime"):
                status["startTime"] = now_rfc3339()
                track.active_since = now
            if track.active_since is None:
                track.active_since = now

        # account for pods that reached a terminal phase
        for pod in sorted(pods, key=_finished_at):
            puid = pod["metadata"]["uid"]
            if puid in track.accounted or not is_terminal(pod):
                continue
            track.accounted.add(puid)
            idx = pod_index(pod) if indexed else None
            if pod["status"]["phase"] == "Succeeded":
                if not indexed:
                    track.succeeded += 1
                elif idx is not None and 0 <= idx < (completions or 0) \
                        and idx not in track.failed_indexes:
                    track.succeeded_indexes.add(idx)
            elif puid not in track.suspended_pods:
                self._account_failure(job, pod, idx, per_index, track)
            drop_finalizer(self.store, pod)

        # terminal decisions, in the real controller's order
        if track.finished is None:
            if self._exceeds_backoff(job, pods, track):
                track.finished = ("Failed", "BackoffLimitExceeded", MSG_BACKOFF)
            elif not suspended and spec.get("activeDeadlineSeconds") is not None and \
                    track.active_since is not None and \
                    now - track.active_since >= spec["activeDeadlineSeconds"]:
                track.finished = ("Failed", "DeadlineExceeded", MSG_DEADLINE)
        if track.finished is None and per_index is not None and completions is not None:
            n_failed = len(track.failed_indexes)
            max_failed = spec.get("maxFailedIndexes")
            if max_failed is not None and n_failed > max_failed:
                track.finished = ("Failed", "MaxFailedIndexesExceeded", MSG_MAX_FAILED_INDEXES)
            elif n_failed and n_failed + len(track.succeeded_indexes) >= completions:
                track.finished = ("Failed", "FailedIndexes", MSG_FAILED_INDEXES)
        if track.finished is None:
            if indexed:
                done = len(track.succeeded_indexes) >= (completions or 0)
            elif completions is not None:
                done = track.succeeded >= completions
            else:
                done = track.succeeded > 0 and not any(not is_terminal(p) for p in pods)
            if done:
                track.finished = ("Complete", "CompletionsReached", MSG_COMPLETE)

        if track.finished is not None:
            final, reason, message = track.finished
            interim = "FailureTarget" if final == "Failed" else "SuccessCriteriaMet"
            if _find_condition(status, interim) is None:
                _set_condition(status, interim, "True", reason, message)
                for pod in pods:
                    if not is_terminal(pod) and not pod["metadata"].get("deletionTimestamp"):
                        delete_pod(self.store, self.kubelet, pod)
            if all(is_terminal(p) for p in pods):
                if final == "Complete":
                    status["completionTime"] = now_rfc3339()
                _set_condition(status, final, "True", reason, message)
                track.finished_at = now
                if final == "Complete":
                    record_event(self.store, job, "Completed", "Job completed")
                else:
                    record_event(self.store, job, reason, message, "Warning")
        elif not suspended:
            self._create_pods(job, pods, track, indexed)
            pods = [p for p in self.store.list(PODS, meta.get("namespace"))
                    if any(r.get("uid") == meta["uid"]
                           for r in p["metadata"].get("ownerReferences") or [])]

        self._write_counts(job, pods, track, indexed, per_index)
        if repr(status) != before:
            self.store.touch(JOBS, job)

    def _account_failure(
        self, job: Obj, pod: Obj, idx: int | None, per_index: int | None, track: JobTrack
    ) -> None:
        action, message = match_pod_failure_policy(job, pod)
        if action == "Ignore":
            if idx is not None:
                track.index_ignored[idx] = track.index_ignored.get(idx, 0) + 1
            return
        track.failed += 1
        if action == "FailJob" and track.finished is None:
            track.finished = ("Failed", "PodFailurePolicy", message)
        if per_index is None or idx is None:
            return
        track.index_failures[idx] = track.index_failures.get(idx, 0) + 1
        if action == "FailIndex" or track.index_failures[idx] > per_index:
            track.failed_indexes.add(idx)

    def _exceeds_backoff(self, job: Obj, pods: list[Obj], track: JobTrack) -> bool:
        limit = job["spec"].get("backoffLimit", 6)
        if track.failed > limit:
            return True
        if job["spec"]["template"]["spec"].get("restartPolicy") != "OnFailure":
            return False
        restarts = 0
        for pod in pods:
            if pod.get("status", {}).get("phase") in ("Pending", "Running"):
                for key in ("initContainerStatuses", "containerStatuses"):
                    restarts += sum(cs.get("restartCount", 0)
                                    for cs in pod["status"].get(key) or [])
        return restarts > 0 if limit == 0 else restarts >= limit

    def _create_pods(self, job: Obj, pods: list[Obj], track: JobTrack, indexed: bool) -> None:
        spec = job["spec"]
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        only_failed = spec.get("podReplacementPolicy") == "Failed"
        running = [p for p in pods if not is_terminal(p)]
        active = [p for p in running if not p["metadata"].get("deletionTimestamp")]
        terminating = len(running) - len(active)
        if len(active) > parallelism:  # parallelism lowered: drop the highest indexes
            extra = sorted(active, key=lambda p: pod_index(p) or 0)[parallelism:]
            for pod in extra:
                delete_pod(self.store, self.kubelet, pod)
            return
        slots = parallelism - len(active) - (terminating if only_failed else 0)
        if indexed:
            busy = {pod_index(p) for p in (running if only_failed else active)}
            todo = [i for i in range(completions or 0)
                    if i not in track.succeeded_indexes and i not in track.failed_indexes
                    and i not in busy]
            for i in todo[: max(0, slots)]:
                self._create_pod(job, i, track)
        else:
            if completions is None:
                want = 0 if track.succeeded else parallelism
            else:
                want = min(parallelism, completions - track.succeeded)
            for _ in range(max(0, min(slots, want - len(active)))):
                self._create_pod(job, None, track)

    def _create_pod(self, job: Obj, index: int | None, track: JobTrack) -> None:
        meta, spec = job["metadata"], job["spec"]
        template = copy.deepcopy(spec["template"])
        tmeta = template.get("metadata") or {}
        pspec = template["spec"]
        labels = dict(tmeta.get("labels") or {})
        annotations = dict(tmeta.get("annotations") or {})
        prefix = f"{meta['name']}-"
        if index is not None:
            prefix = f"{meta['name']}-{index}-"
            labels[COMPLETION_INDEX_KEY] = str(index)
            annotations[COMPLETION_INDEX_KEY] = str(index)
            if spec.get("backoffLimitPerIndex") is not None:
                annotations[INDEX_FAILURE_COUNT_KEY] = str(track.index_failures.get(index, 0))
                ignored = track.index_ignored.get(index, 0)
                if ignored:
                    annotations[INDEX_IGNORED_FAILURE_COUNT_KEY] = str(ignored)
            pspec.setdefault("hostname", f"{meta['name']}-{index}"[:63].rstrip("-"))
            for c in (pspec.get("initContainers") or []) + (pspec.get("containers") or []):
                env = c.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                        "apiVersion": "v1",
                        "fieldPath": f"metadata.annotations['{COMPLETION_INDEX_KEY}']"}}})
        pod: Obj = {
            "metadata": {
                "name": generate_name(prefix),
                "generateName": prefix,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                    "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True,
                }],
                "finalizers": [JOB_TRACKING_FINALIZER],
            },
            "spec": pspec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }
        self.store.create(PODS, pod)
        record_event(self.store, job, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")

    def _write_counts(
        self, job: Obj, pods: list[Obj], track: JobTrack, indexed: bool, per_index: int | None
    ) -> None:
        status = job["status"]
        running = [p for p in pods if not is_terminal(p)]
        active = [p for p in running if not p["metadata"].get("deletionTimestamp")]
        ready = sum(
            1 for p in active
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in p.get("status", {}).get("conditions") or [])
        )
        succeeded = len(track.succeeded_indexes) if indexed else track.succeeded
        _put(status, "active", len(active))
        _put(status, "succeeded", succeeded)
        _put(status, "failed", track.failed)
        status["ready"] = ready
        status["terminating"] = len(running) - len(active)
        if indexed:
            _put(status, "completedIndexes", format_intervals(track.succeeded_indexes))
        if per_index is not None:
            status["failedIndexes"] = format_intervals(track.failed_indexes)
        status["uncountedTerminatedPods"] = {}

    def _maybe_ttl(self, job: Obj, track: JobTrack) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if not self.honour_ttl or ttl is None:
            return
        if track.finished_at is None:
            track.finished_at = time.monotonic()
        if time.monotonic() - track.finished_at >= ttl:
            # the TTL-after-finished controller deletes with Foreground propagation
            job["metadata"]["deletionTimestamp"] = now_rfc3339()
            job["metadata"]["deletionGracePeriodSeconds"] = 0
            job["metadata"]["finalizers"] = [
                *(job["metadata"].get("finalizers") or []), "foregroundDeletion"]
            self.store.touch(JOBS, job)


def _put(status: Obj, key: str, value: Any) -> None:
    """Counters and strings with `omitempty`: absent when zero/empty, like the real JSON."""
    if value:
        status[key] = value
    else:
        status.pop(key, None)


def _finished_at(pod: Obj) -> str:
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term and term.get("finishedAt"):
            return str(term["finishedAt"])
    return ""


def _find_condition(status: Obj, ctype: str) -> Obj | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), None)


def _set_condition(status: Obj, ctype: str, value: str, reason: str, message: str) -> None:
    conds = status.setdefault("conditions", [])
    ts = now_rfc3339()
    for c in conds:
        if c["type"] == ctype:
            if (c["status"], c.get("reason"), c.get("message")) == (value, reason, message):
                return
            if c["status"] != value:
                c["lastTransitionTime"] = ts
            c.update(status=value, reason=reason, message=message, lastProbeTime=ts)
            return
    conds.append({"type": ctype, "status": value, "lastProbeTime": ts,
                  "lastTransitionTime": ts, "reason": reason, "message": message})
