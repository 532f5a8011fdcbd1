"""The pure decisions of `sweeper logs` on Kubernetes under promotion ASHA: which attempts ran
promoted segments (in other pods), and which pods could hold them. (End to end:
tests/backends/test_kubernetes_logs.py.)"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper.backends import manifests as m
from sweeper.backends.kubernetes.promoted import (
    MARGIN,
    Promoted,
    in_window,
    lifetime,
    started,
    was_promoted,
    window,
)
from sweeper.protocol import PAUSED_ATTR, RUNG_ATTR

STEPS = (1, 3)  # rung 0 ends at step 1, rung 1 at step 3


@pytest.mark.parametrize(("attrs", "state", "last_step", "promoted"), [
    ({}, TrialState.COMPLETE, 9, False),  # never paused: one segment
    ({}, TrialState.RUNNING, 0, False),
    ({RUNG_ATTR: 0, PAUSED_ATTR: True}, TrialState.WAITING, 1, False),  # paused, waiting
    ({RUNG_ATTR: 0}, TrialState.PRUNED, 1, False),  # pruned by the sweep's end at its rung
    ({RUNG_ATTR: 0, PAUSED_ATTR: False}, TrialState.RUNNING, 1, True),  # just claimed
    ({RUNG_ATTR: 0, PAUSED_ATTR: True}, TrialState.RUNNING, 1, False),  # pausing
    ({RUNG_ATTR: 0}, TrialState.COMPLETE, 9, True),
    ({RUNG_ATTR: 0}, TrialState.FAIL, 1, True),  # failed in its promotion
    ({RUNG_ATTR: 0}, TrialState.PRUNED, 2, True),  # its own code pruned it after a promotion
    ({RUNG_ATTR: 1, PAUSED_ATTR: True}, TrialState.WAITING, 3, True),  # promoted from rung 0
    ({RUNG_ATTR: 1}, TrialState.PRUNED, 3, True),
])
def test_was_promoted(attrs: dict[str, Any], state: TrialState, last_step: int,
                      promoted: bool) -> None:
    assert was_promoted(attrs, state, last_step, STEPS) is promoted


def _pod(start: str | None = None, end: str | None = None, *, pod_start: str | None = None,
         container: str = m.CONTAINER_NAME) -> dict[str, Any]:
    status: dict[str, Any] = {"startTime": pod_start} if pod_start else {}
    if start is not None:
        state = {"terminated": {"startedAt": start, "finishedAt": end}} if end else \
            {"running": {"startedAt": start}}
        status["containerStatuses"] = [{"name": container, "state": state}]
    return {"metadata": {"name": "p"}, "status": status}


def t(minute: int) -> datetime:
    return datetime(2026, 1, 1, 0, minute, tzinfo=timezone.utc)


def test_lifetime_of_the_trial_container_else_the_pod() -> None:
    assert lifetime(_pod("2026-01-01T00:01:00Z", "2026-01-01T00:04:00Z")) == (t(1), t(4))
    assert lifetime(_pod("2026-01-01T00:01:00Z")) == (t(1), None)  # running
    assert lifetime(_pod(pod_start="2026-01-01T00:02:00Z")) == (t(2), None)  # no status yet
    assert lifetime(_pod("2026-01-01T00:01:00Z", container="sidecar",
                         pod_start="2026-01-01T00:00:00Z")) == (t(0), None)
    assert lifetime(_pod()) == (None, None)
    assert started(_pod("2026-01-01T00:01:00Z")) < started(_pod("2026-01-01T00:02:00Z"))
    assert started(_pod()) == ""


def test_only_the_pods_that_ran_while_the_trial_could_are_read() -> None:
    first = _pod("2026-01-01T00:10:00Z", "2026-01-01T00:11:00Z")
    since, until = window(first, Promoted(0, 7, timedelta(minutes=20)))
    assert (since, until) == (t(10), t(30) + MARGIN)
    assert window(first, Promoted(0, 7, None)) == (t(10), None)  # not ended: open
    assert window(_pod(), Promoted(0, 7, timedelta(minutes=20))) == (None, None)
    assert not in_window(_pod("2026-01-01T00:01:00Z", "2026-01-01T00:09:00Z"), since, until)
    assert in_window(_pod("2026-01-01T00:01:00Z", "2026-01-01T00:12:00Z"), since, until)
    assert in_window(_pod("2026-01-01T00:01:00Z"), since, until)  # still running
    assert in_window(_pod("2026-01-01T00:30:00Z", "2026-01-01T00:50:00Z"), since, until)
    assert not in_window(_pod("2026-01-01T00:40:00Z", "2026-01-01T00:50:00Z"), since, until)
    assert in_window(_pod("2026-01-01T00:40:00Z"), since, None)
    assert in_window(_pod(), since, until)  # times not known: read, never guessed away
