"""Job and Pod objects -> what sweeper reports (pure: objects built here or by render_job)."""

from __future__ import annotations

from typing import Any

import pytest

from sweeper import protocol
from sweeper.backends import manifests as m
from sweeper.backends.kubernetes import job_info, parse_intervals
from sweeper.backends.kubernetes.jobstatus import (
    INDEX_FAILURE_COUNT,
    INDEX_IGNORED_FAILURE_COUNT,
    job_state,
    last_error_line,
    pod_attempt,
    pod_exit,
    pod_indexes,
    pod_job_index,
    stuck_reasons,
)
from sweeper.spec import SweepSpec, parse_spec


def _spec(n: int = 10, extra: str = "") -> SweepSpec:
    return parse_spec(f"""
name: js
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 2
trial: {{entrypoint: trial_runner.examples.synthetic:quadratic}}
parameters:
  x: {{type: int, low: 0, high: {n - 1}}}
{extra}""")


def _pod(index: int | None = 0, *, code: int | None = None, waiting: str | None = None,
         message: str = "", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    ann = dict(annotations or {})
    if index is not None:
        ann[m.COMPLETION_INDEX] = str(index)
    state: dict[str, Any] = {}
    if code is not None:
        state["terminated"] = {"exitCode": code}
    if waiting is not None:
        state["waiting"] = {"reason": waiting, "message": message}
    return {"metadata": {"name": f"js-{index}-abcde", "annotations": ann},
            "status": {"containerStatuses": [{"name": m.CONTAINER_NAME, "state": state}]}}


@pytest.mark.parametrize(("text", "expected"), [
    ("0-2,5,7-8", [0, 1, 2, 5, 7, 8]), ("3", [3]), ("", []), (None, []), (" 1 , 4-5 ", [1, 4, 5]),
])
def test_parse_intervals(text: str | None, expected: list[int]) -> None:
    assert parse_intervals(text) == expected


def test_job_info_maps_sparse_job_indexes_back() -> None:
    spec = _spec(extra="kubernetes: {indexes_per_pod: 2}")
    job = m.render_job(spec, [1, 3, 4, 8, 9], launch=3)
    job["status"] = {"completedIndexes": "0,2", "failedIndexes": "1", "active": 0,
                     "conditions": [{"type": "Failed", "status": "True",
                                     "reason": "FailedIndexes"}]}
    info = job_info(job, 10)
    assert info.launch == 3 and info.state == "Failed" and info.reason == "FailedIndexes"
    assert info.indexes == (1, 3, 4, 8, 9)
    assert info.completed == (1, 3, 9) and info.failed_indexes == (4, 8)
    assert info.finished and not info.active_job
    assert info.unfinished() == (4, 8)  # the Job failed: every index that did not complete
    assert info.job_index(8) == 1 and info.job_index(2) is None
    assert info.sweep_indexes(1) == [4, 8]


def test_job_info_dense_job_without_the_sweep_size() -> None:
    """``sweeper logs``/``cancel`` without storage: a dense Job covers its completions."""
    job = m.render_job(_spec(n=4), [0, 1, 2, 3], launch=0)
    job["status"] = {"completedIndexes": "0-1", "active": 2, "ready": 1, "succeeded": 2}
    info = job_info(job, None)
    assert (info.state, info.launch, info.trials) == ("Running", 0, 4)
    assert info.indexes == (0, 1, 2, 3) and info.completed == (0, 1)
    assert (info.active, info.ready, info.succeeded, info.failed) == (2, 1, 2, 0)
    assert info.active_job and not info.finished and info.unfinished() == ()


def test_an_open_ended_job_speaks_in_slots() -> None:
    """An open-ended sweep's Job: completion index j is the slot of indexes j, j+S, ...; its
    status's indexes are slots, and any sweep index maps to its slot's pods."""
    from tests.support.helpers import make_spec

    spec = make_spec(name="open", method="tpe", trials=None, parallelism=3,
                     budget={"steps": 100})
    job = m.render_job(spec, None)
    assert job["metadata"]["annotations"][m.INDEX_STRIDE_ANNOTATION] == "3"
    job["status"] = {"completedIndexes": "0,2", "failedIndexes": "1", "succeeded": 2}
    info = job_info(job, spec.trials)
    assert info.stride == 3 and info.indexes == (0, 1, 2)
    assert info.completed == (0, 2) and info.failed_indexes == (1,)
    assert [info.job_index(i) for i in (0, 2, 3, 7, 11)] == [0, 2, 0, 1, 2]
    assert info.job_index(-1) is None and info.job_index(spec.trials) is None
    assert info.sweep_indexes(1) == []  # the study knows which: as many as the budget paid
    assert pod_indexes(_pod(1), info) == "slot 1 (indexes 1, 4, 7, ...)"
    assert job_info(job, None).job_index(7) == 1  # without the storage too


def test_job_state_conditions_and_deletion() -> None:
    assert job_state({}) == ("Running", None, None)
    complete = {"status": {"conditions": [
        {"type": "SuccessCriteriaMet", "status": "True"},
        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "ok"}]}}
    assert job_state(complete) == ("Complete", "CompletionsReached", "ok")
    not_yet = {"status": {"conditions": [{"type": "Failed", "status": "False"}]}}
    assert job_state(not_yet)[0] == "Running"
    deleting = {**complete, "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert job_state(deleting)[0] == "Deleting"


@pytest.mark.parametrize(("code", "expected"), [
    (protocol.EXIT_RETRY, "exited with code 1 (retryable failure)"),
    (protocol.EXIT_NO_RETRY, "exited with code 3 (failed (no retry))"),
    (protocol.EXIT_CONFIG, f"exited with code 4 ({protocol.EXIT_NAMES[protocol.EXIT_CONFIG]})"),
    (137, "exited with code 137 (killed by a signal)"),
    (2, "exited with code 2 (error)"),
])
def test_pod_exit_says_what_the_code_means(code: int, expected: str) -> None:
    assert pod_exit(_pod(code=code)) == expected


def test_pod_exit_without_a_container_exit() -> None:
    evicted = {"metadata": {"name": "p"}, "status": {"reason": "Evicted", "message": "disk"}}
    assert pod_exit(evicted) == "failed (Evicted)"
    assert pod_exit({}) == "failed (unknown reason)"


def test_pod_indexes_and_attempts() -> None:
    info = job_info(m.render_job(_spec(extra="kubernetes: {indexes_per_pod: 3}"),
                                 list(range(10)), launch=0), 10)
    assert pod_job_index(_pod(2)) == 2 and pod_indexes(_pod(2), info) == "indexes 6,7,8"
    assert pod_indexes(_pod(3), info) == "index 9"
    assert pod_job_index(_pod(None)) is None and pod_indexes(_pod(None), info) == "index ?"
    labelled = {"metadata": {"labels": {m.COMPLETION_INDEX: "1"}}}
    assert pod_job_index(labelled) == 1
    assert pod_job_index({"metadata": {"annotations": {m.COMPLETION_INDEX: "x"}}}) is None
    assert pod_attempt(_pod(0)) == 0
    assert pod_attempt(_pod(0, annotations={INDEX_FAILURE_COUNT: "2",
                                            INDEX_IGNORED_FAILURE_COUNT: "1"})) == 3


def test_stuck_reasons_only_for_what_will_not_fix_itself() -> None:
    stuck = _pod(waiting="CreateContainerConfigError",
                 message='secret "x" not found\nmore')
    assert stuck_reasons(stuck) == [("CreateContainerConfigError", 'secret "x" not found')]
    assert stuck_reasons(_pod(waiting="ContainerCreating")) == []
    assert stuck_reasons(_pod(code=0)) == [] and stuck_reasons({}) == []


def test_last_error_line_strips_the_log_prefix() -> None:
    log = ("2026-01-01 12:00:00,123 INFO trial_runner: starting\n"
           "2026-01-01 12:00:01,456 ERROR trial_runner.runner: trial.entrypoint: no module\n"
           "bye\n")
    assert last_error_line(log) == "trial.entrypoint: no module"
    assert last_error_line("just text\nlast one\n") == "last one"
    assert last_error_line("") == "no output"
