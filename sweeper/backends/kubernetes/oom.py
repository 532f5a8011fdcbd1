"""Trials whose container the kernel killed for going over its memory limit.

When the trial runs in the runner's own process, the kernel's OOM killer ends the runner with
it (on cgroup v1 it kills the largest process of the container's cgroup, on cgroup v2 the whole
group): the runner writes nothing, and its trial would only go stale. The kubelet reports such a
container ``OOMKilled`` (exit code 137). The watcher of ``sweeper run`` fails the trial with
that as its reason (:data:`sweeper.protocol.FAIL_REASON_ATTR`), which ``sweeper status``,
``export`` and the dashboard show, instead of a stale heartbeat. (A detached sweep has no
watcher: its OOM-killed trials go stale, and the pod's status says OOMKilled.)

A retry runs the same parameters with the same limit, so it usually runs out of memory again:
it is retried like any failure (``trial.retries``) and the index fails when they are spent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from optuna.trial import TrialState

from sweeper.backends import manifests as m
from sweeper.backends.kubernetes.client import Obj
from sweeper.study.store import IndexStore

logger = logging.getLogger(__name__)

#: What the trial's reason starts with.
OOM_PREFIX = "OOMKilled"


def oom_reason(pod: Obj) -> str | None:
    """The failure reason of a pod whose trial container was OOM-killed, else None."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if cs.get("name") == m.CONTAINER_NAME and terminated.get("reason") == "OOMKilled":
            limit = _memory_limit(pod)
            over = f"went over its memory limit ({limit})" if limit else "ran out of memory"
            return (f"{OOM_PREFIX}: the trial's container {over} and the kernel killed it "
                    f"(exit code {terminated.get('exitCode', 137)}); the same parameters "
                    "likely need more: raise trial.resources.memory")
    return None


def _memory_limit(pod: Obj) -> str | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == m.CONTAINER_NAME:
            limits = (container.get("resources") or {}).get("limits") or {}
            return str(limits["memory"]) if "memory" in limits else None
    return None


def record_oom(store: IndexStore, study_id: int, indexes: Sequence[int],
               pod_attempt: int | None, reason: str) -> list[int]:
    """FAIL with ``reason`` each index's attempt that ran in the OOM-killed pod: the attempt
    whose number is the pod's (``pod_attempt``: how many pods of the index failed before it;
    else the latest before it; None: the latest, a slot's pod retries in itself), while it
    is RUNNING. One already failed for a stale heartbeat
    (the grace period ran out before the pod's failure reached the Job) keeps that reason:
    a finished trial's attributes are not rewritten. The numbers of the trials failed."""
    failed = []
    for index in indexes:
        earlier = [a for a in store.attempts(study_id, index)
                   if pod_attempt is None or a.attempt <= pod_attempt]
        if not earlier:
            continue
        ran = max(earlier, key=lambda a: a.attempt)
        if ran.state == TrialState.RUNNING and store.mark_failed(ran.trial_id, reason):
            failed.append(ran.number)
            logger.info("trial #%d: %s", ran.number, reason)
    return failed


def running_in_slot(store: IndexStore, study_id: int, slot: int, stride: int) -> list[int]:
    """The indexes of an open-ended sweep's slot ``slot`` (``slot, slot+stride, ...``) whose
    latest attempt is RUNNING in its first run (a promoted one, with a rung, may run in any
    pod): what the slot's pod was running, one index at a time."""
    promoted = {t.number for t in store.rung_trials(study_id, []) if t.rung is not None}
    return [s.index for s in store.index_table(study_id, None)
            if s.state == "RUNNING" and s.index % stride == slot
            and s.trial_number not in promoted]
