"""``sweeper logs --index I`` on Kubernetes under promotion ASHA (``scheduler:``): the segments
of index I's attempt that ran in other pods.

A paused trial is resumed by whichever pod claimed its promotion, and that pod's log holds the
segment under a header naming index I and the rung it was promoted from
(:func:`sweeper.protocol.encode_log_header`). Reading every pod of a big sweep would be slow, so
the store decides first: only an attempt it shows promoted (:func:`was_promoted`) is looked for
elsewhere, and only in the pods whose container ran while the trial could have
(:func:`in_window`: from the start of the pod that ran its first segment to as long after as the
trial lasted, by the store's clock, plus a margin). Nothing records which pod ran a promotion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from optuna.trial import TrialState

from sweeper.backends import manifests as m
from sweeper.backends.kubernetes.client import KubeClient, Obj
from sweeper.backends.kubernetes.jobstatus import pod_name
from sweeper.errors import BackendError
from sweeper.protocol import ATTEMPT_ATTR, PAUSED_ATTR, RUNG_ATTR
from sweeper.runlogs import Section, segments_of, split_attempts
from sweeper.study import Sweep

#: Added to how long the trial lasted: its first pod's container started before the trial
#: did (imports, the claim), and the nodes' clocks may differ a little.
MARGIN = timedelta(minutes=5)


@dataclass(frozen=True)
class Promoted:
    """An attempt that ran in segments (paused at a rung, promoted), as the store has it."""

    attempt: int
    trial_number: int
    #: From its first run's start to its end (None: not ended, paused or running).
    lasted: timedelta | None


def was_promoted(user_attrs: Mapping[str, Any], state: TrialState, last_step: int | None,
                 rung_steps: tuple[int, ...]) -> bool:
    """Whether a trial ran after a pause: a promotion, in whichever pod claimed it. It paused
    at rung ``sweeper:rung`` last; above rung 0 it was promoted from rung 0 at least; at rung 0
    it was if it is running or ended after its pause (not ended PRUNED by the sweep's end), or
    reported a step after the rung's."""
    rung = user_attrs.get(RUNG_ATTR)
    if rung is None:
        return False  # never paused: one segment, in its own pod
    if int(rung) > 0:
        return True
    if state in (TrialState.RUNNING, TrialState.COMPLETE, TrialState.FAIL):
        return not (state == TrialState.RUNNING and user_attrs.get(PAUSED_ATTR))
    return last_step is not None and bool(rung_steps) and last_step > rung_steps[0]


def promoted_attempt(sweep: Sweep, index: int, attempt: int | None) -> Promoted | None:
    """Attempt ``attempt`` of ``index`` (None: its latest) if it ran promoted segments: two
    queries, only under promotion ASHA."""
    scheduler = sweep.spec.scheduler
    if scheduler.type != "asha" or scheduler.mode != "promotion":
        return None
    found = [a for a in sweep.storage.attempts(sweep.study_id, index)
             if attempt is None or a.attempt == attempt]
    if not found:
        return None
    t = sweep.storage.get_trial(found[-1].trial_id)
    if not was_promoted(t.user_attrs, t.state, t.last_step, scheduler.rung_steps):
        return None
    start, end = t.datetime_start, t.datetime_complete
    return Promoted(int(t.user_attrs.get(ATTEMPT_ATTR, found[-1].attempt)), t.number,
                    end - start if start is not None and end is not None else None)


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def lifetime(pod: Obj) -> tuple[datetime | None, datetime | None]:
    """(start, end) of the pod's trial container (end None: still running; start None: not
    known, e.g. not started); else the pod's start time."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == m.CONTAINER_NAME:
            state = cs.get("state") or {}
            ran = state.get("running") or state.get("terminated") or {}
            return (_time(ran.get("startedAt")) or _time(status.get("startTime")),
                    _time((state.get("terminated") or {}).get("finishedAt")))
    return _time(status.get("startTime")), None


def in_window(pod: Obj, since: datetime | None, until: datetime | None) -> bool:
    """Whether the pod's container ran at some time in [since, until] (None: unbounded); a
    pod whose times are not known is read (never left out by a guess)."""
    start, end = lifetime(pod)
    if since is not None and end is not None and end < since:
        return False
    return not (until is not None and start is not None and start > until)


def window(first: Obj, promoted: Promoted) -> tuple[datetime | None, datetime | None]:
    """From the start of ``first`` (the pod of the attempt's first segment) to as long after
    as the trial lasted, plus :data:`MARGIN` (open-ended while it has not ended)."""
    since = lifetime(first)[0]
    if since is None or promoted.lasted is None:
        return since, None
    return since, since + promoted.lasted + MARGIN


def started(pod: Obj) -> str:
    """When the pod's container started, as a key that sorts in time ('' if not known)."""
    start = lifetime(pod)[0]
    return start.isoformat() if start is not None else ""


def other_segments(api: KubeClient, namespace: str, sweep_name: str, index: int,
                   promoted: Promoted, first: Obj, skip: set[str]
                   ) -> list[tuple[str, str, Section]]:
    """The promoted segments of the attempt in the sweep's pods other than ``skip`` (index
    ``index``'s own, read already): (when the pod started, its name, the segment)."""
    since, until = window(first, promoted)
    found: list[tuple[str, str, Section]] = []
    for pod in api.list_pods(namespace, m.selector(sweep_name)):
        name = pod_name(pod)
        phase = (pod.get("status") or {}).get("phase")
        if name in skip or phase == "Pending" or not in_window(pod, since, until):
            continue
        try:
            text = api.read_pod_log(namespace, name, container=m.log_container(pod))
        except BackendError:
            continue  # its log is gone (the node, or the pod deleted meanwhile)
        mine = segments_of(split_attempts(text), index, promoted.attempt)
        found += [(started(pod), name, s) for s in mine
                  if s.header is not None and s.header.promoted_from is not None
                  and s.header.trial_number == promoted.trial_number]
    return found
