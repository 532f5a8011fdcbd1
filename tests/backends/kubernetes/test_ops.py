"""What ``sweeper cancel`` does with the RUNNING trials of a sweep whose Jobs it deleted
(sweeper.backends.kubernetes.ops): the decision, and its writes on a SQLite store;
tests/backends/test_cancel_promotion_k8s.py runs the command on the cluster. Which pod ran
each index, as ``status`` names it (tests/backends/test_open_ended_k8s.py on the cluster)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper._optuna_compat import trial_id_of
from sweeper.backends import manifests as m
from sweeper.backends.kubernetes import job_info
from sweeper.backends.kubernetes.jobstatus import INDEX_FAILURE_COUNT, JOB_NAME_LABEL
from sweeper.backends.kubernetes.ops import index_pods, latest_start, rung_kept, stop_running
from sweeper.protocol import ATTEMPT_ATTR, INDEX_ATTR, PAUSED_ATTR, RUNG_ATTR
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec


@pytest.mark.parametrize(("attrs", "scheduler", "kept"), [
    # Promoted from rung 1 (claimed: paused false): paused there again, its progress kept.
    ({INDEX_ATTR: 4, RUNG_ATTR: 1, PAUSED_ATTR: False}, True, 1),
    ({INDEX_ATTR: 0, RUNG_ATTR: 0, PAUSED_ATTR: False}, True, 0),  # rung 0 is a rung
    # Its first run (before any rung, or past one it went on from at once): it fails, and a
    # resume retries it from its index's checkpoint.
    ({INDEX_ATTR: 2, ATTEMPT_ATTR: 0}, True, None),
    ({INDEX_ATTR: 2, ATTEMPT_ATTR: 1}, True, None),  # a retry that has not paused yet
    ({INDEX_ATTR: 3, RUNG_ATTR: 1}, False, None),  # no scheduler: nothing to promote it
])
def test_only_a_promoted_trial_goes_back_paused(attrs: dict[str, Any], scheduler: bool,
                                                kept: int | None) -> None:
    assert rung_kept(attrs, scheduler=scheduler) == kept


def test_promoted_trials_of_any_index_go_back_paused_the_others_of_the_jobs_fail(
        sqlite_url: str) -> None:
    spec = make_spec(name="asha-cancel", scheduler={
        "type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9,
        "reduction_factor": 3}, trial={"entrypoint": "tests.support.asha_objectives:curve",
                                       "fixed": {"steps": 9}},
        parameters={"a": {"type": "int", "low": 0, "high": 3}})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    store = sweep.storage
    ids = {t.user_attrs[INDEX_ATTR]: trial_id_of(t) for t in sweep.study().trials}
    number = {t.user_attrs[INDEX_ATTR]: t.number for t in sweep.study().trials}
    assert all(store.claim(ids[i]) for i in range(4))  # every index's first run
    for i, rung in ((0, 0), (3, 1)):  # paused at a rung, then promoted (the promotion's claim)
        assert store.pause(ids[i], rung) and store.claim(ids[i])
        store.set_trial_user_attrs(ids[i], {PAUSED_ATTR: False})

    # The deleted Jobs covered indexes 0 and 1; index 3's promotion ran in one of their pods.
    paused, failed = stop_running(sweep, {0, 1})
    assert (sorted(paused), failed) == (sorted([number[0], number[3]]), [number[1]])
    trials = {t.user_attrs[INDEX_ATTR]: t for t in sweep.study().trials}
    for i, rung in ((0, 0), (3, 1)):
        assert trials[i].state == TrialState.WAITING
        assert (trials[i].user_attrs[PAUSED_ATTR], trials[i].user_attrs[RUNG_ATTR]) == (True, rung)
    assert trials[1].state == TrialState.FAIL
    assert trials[1].user_attrs["sweeper:fail_reason"] == "cancelled (sweeper cancel)"
    assert trials[2].state == TrialState.RUNNING  # not the deleted Jobs' index, not promoted
    assert stop_running(sweep, {0, 1, 2}) == ([], [number[2]])  # nothing twice


def _pod(job: str, k: int, name: str, created: str, failures: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {JOB_NAME_LABEL: job, m.COMPLETION_INDEX: str(k)},
                         "annotations": {INDEX_FAILURE_COUNT: str(failures)}}}


def test_index_pods_names_the_newest_pod_of_each_indexs_slot_or_job_index() -> None:
    open_spec = make_spec(name="open", method="tpe", trials=None, parallelism=2,
                          budget={"steps": 100})
    slots = job_info(m.render_job(open_spec, None), open_spec.trials)
    pods = [_pod(slots.name, 0, "open-0-a", "2026-01-01T00:00:00Z"),
            _pod(slots.name, 1, "open-1-a", "2026-01-01T00:00:00Z"),
            _pod(slots.name, 1, "open-1-b", "2026-01-01T00:01:00Z", failures=1),  # replaced
            _pod("another-sweeps-job", 0, "x-0", "2026-01-01T00:00:00Z")]
    assert index_pods(pods, [slots], "open", [0, 1, 2, 5, 8]) == {
        0: "open-0-a", 1: "open-1-b", 2: "open-0-a", 5: "open-1-b", 8: "open-0-a"}
    # With the indexes' start times, slot 1's indexes that started before its pod was
    # replaced name the first pod; the slot of one pod asks nothing.
    asked: list[int] = []

    def started(i: int) -> datetime | None:
        asked.append(i)
        return {1: datetime(2026, 1, 1, 0, 0, 30), 3: datetime(2026, 1, 1, 0, 1, 0, 500),
                5: datetime(2026, 1, 1, 0, 2)}.get(i)

    assert index_pods(pods, [slots], "open", [0, 1, 2, 3, 5, 7], started) == {
        0: "open-0-a", 1: "open-1-a", 2: "open-0-a", 3: "open-1-b", 5: "open-1-b",
        7: "open-1-b"}  # 7 has not started: the newest
    assert sorted(asked) == [1, 3, 5, 7]

    planned = make_spec(name="plan", trials=4, parallelism=2)
    first = job_info(m.render_job(planned, None, launch=0), planned.trials)
    resume = job_info(m.render_job(planned, [1, 3], launch=1), planned.trials)
    pods = [_pod(first.name, k, f"plan-{k}", "2026-01-01T00:00:00Z") for k in range(4)] + \
        [_pod(resume.name, 1, "plan-r1-1", "2026-01-01T01:00:00Z")]  # job index 1: index 3
    assert index_pods(pods, [first, resume], "plan", range(4)) == {
        0: "plan-0", 1: "plan-1", 2: "plan-2", 3: "plan-r1-1"}


def test_latest_start_is_when_the_latest_attempt_of_an_index_started(storage_url: str) -> None:
    sweep, _ = create_or_resume(open_storage(storage_url), make_spec(trials=3))
    storage = sweep.storage
    waiting = storage.attempts(sweep.study_id, 0)[-1]
    assert latest_start(sweep, 0) is None  # enqueued, not started
    assert storage.claim(waiting.trial_id)
    started = storage.get_trial(waiting.trial_id).datetime_start
    assert started is not None and latest_start(sweep, 0) == started
    assert latest_start(sweep, 7) is None  # no attempt at all
