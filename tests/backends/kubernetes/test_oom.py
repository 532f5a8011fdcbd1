"""An OOM-killed pod's reason (sweeper.backends.kubernetes.oom): what the kubelet's status says,
in words, and its write on the attempt the pod ran (a SQLite store);
tests/backends/test_oom_k8s.py runs a sweep over its memory limit on the real node."""

from __future__ import annotations

from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper._optuna_compat import trial_id_of
from sweeper.backends import manifests as m
from sweeper.backends.kubernetes.oom import oom_reason, record_oom
from sweeper.protocol import INDEX_ATTR, RUNG_ATTR
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec


def _pod(reason: str, name: str = m.CONTAINER_NAME, limits: dict[str, str] | None = None
         ) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": name, "resources": {"limits": limits or {}}}]},
            "status": {"containerStatuses": [{"name": name, "state": {"terminated": {
                "reason": reason, "exitCode": 137}}}]}}


def test_only_an_oom_killed_trial_container_has_a_reason() -> None:
    reason = oom_reason(_pod("OOMKilled", limits={"memory": "2Gi"}))
    assert reason is not None and reason.startswith(
        "OOMKilled: the trial's container went over its memory limit (2Gi) and the kernel "
        "killed it (exit code 137)")
    assert "ran out of memory" in (oom_reason(_pod("OOMKilled")) or "")  # no limit known
    assert oom_reason(_pod("Error")) is None  # a SIGKILL from elsewhere, same exit code
    assert oom_reason(_pod("OOMKilled", name="sidecar")) is None  # not the trial's container
    assert oom_reason({"status": {}}) is None


@pytest.fixture
def sweep(sqlite_url: str) -> Any:
    spec = make_spec(name="oom", parameters={"a": {"type": "int", "low": 0, "high": 2}})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    return sweep


def test_the_attempt_the_pod_ran_is_failed_with_the_reason(sweep: Any) -> None:
    store = sweep.storage
    ids = {t.user_attrs[INDEX_ATTR]: trial_id_of(t) for t in sweep.study().trials}
    assert store.claim(ids[0]) and store.claim(ids[1])
    failed = record_oom(store, sweep.study_id, [0], 0, "OOMKilled: over")
    trials = {t.user_attrs[INDEX_ATTR]: t for t in sweep.study().trials}
    assert failed == [trials[0].number]
    assert trials[0].state == TrialState.FAIL
    assert trials[0].user_attrs["sweeper:fail_reason"] == "OOMKilled: over"
    assert trials[1].state == TrialState.RUNNING  # another index: untouched
    assert record_oom(store, sweep.study_id, [0], 0, "OOMKilled: over") == []  # once
    assert record_oom(store, sweep.study_id, [2], 0, "OOMKilled: over") == []  # not running


def test_a_newer_attempt_than_the_pod_is_left_alone(sweep: Any) -> None:
    """A replacement pod's runner that already retries the index: its attempt is not the one
    the OOM-killed pod ran."""
    store = sweep.storage
    (first,) = store.attempts(sweep.study_id, 0)
    assert store.claim(first.trial_id)
    assert store.mark_failed(first.trial_id, "heartbeat older than 5s: runner presumed dead")
    (first,) = store.attempts(sweep.study_id, 0)
    assert store.new_attempt(sweep.study_id, 0, after=first, params=None) is not None
    assert record_oom(store, sweep.study_id, [0], 0, "OOMKilled: over") == []
    states = [a.state for a in store.attempts(sweep.study_id, 0)]
    assert states == [TrialState.FAIL, TrialState.RUNNING]


def test_a_slot_pod_fails_the_index_of_its_slot_it_was_running(sqlite_url: str) -> None:
    """An open-ended sweep's slot pod runs index after index: the OOM kill fails the latest
    attempt of the slot's running index, not another slot's, not a promoted trial's."""
    from sweeper.backends.kubernetes.oom import running_in_slot

    spec = make_spec(name="oom-open", method="tpe", trials=None, parallelism=2,
                     budget={"steps": 100})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    store = sweep.storage
    study = sweep.study()
    for _ in range(4):
        study.ask()  # RUNNING
    for index, t in zip((1, 2, 3, 5), sweep.study().trials, strict=True):
        store.set_trial_user_attr(trial_id_of(t), INDEX_ATTR, index)
    by_index = {t.user_attrs[INDEX_ATTR]: t for t in sweep.study().trials}
    store.set_trial_user_attr(trial_id_of(by_index[5]), RUNG_ATTR, 0)  # promoted
    assert running_in_slot(store, sweep.study_id, 1, 2) == [1, 3]
    assert running_in_slot(store, sweep.study_id, 0, 2) == [2]
    assert record_oom(store, sweep.study_id, [3], None, "OOMKilled: over") == \
        [by_index[3].number]
