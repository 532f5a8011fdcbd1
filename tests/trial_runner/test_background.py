"""The long-lived threads that run a trial's heartbeats and delayed report writes
(trial_runner.background): due order, repetition, cancelling, failures, fork, and one thread
for any number of trials."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from trial_runner.background import Background


def wait_for(predicate, timeout_s: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_jobs_run_once_when_due_in_due_order_and_repeat_until_cancelled() -> None:
    bg = Background("test-bg")
    calls: list[str] = []
    bg.after(0.15, lambda: calls.append("late"))
    bg.after(0.02, lambda: calls.append("soon"))
    beat = bg.every(0.03, lambda: calls.append("beat"))
    assert wait_for(lambda: "late" in calls)
    assert calls.index("soon") < calls.index("late")
    assert calls.count("soon") == calls.count("late") == 1
    assert calls.count("beat") >= 3  # 0.15 s of a 0.03 s interval
    bg.cancel(beat)
    stopped = calls.count("beat")
    time.sleep(0.1)
    assert calls.count("beat") == stopped


def test_a_cancelled_job_never_runs_and_cancel_waits_for_a_call_under_way() -> None:
    bg = Background("test-bg")
    ran: list[str] = []
    never = bg.after(0.05, lambda: ran.append("never"))
    bg.cancel(never)
    started, release = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(2)
        ran.append("slow done")

    job = bg.after(0.0, slow)
    assert started.wait(2)
    threading.Timer(0.1, release.set).start()
    bg.cancel(job, wait_s=5.0)  # returns once the call under way is over
    assert ran == ["slow done"]
    again = bg.after(0.0, slow)
    release.clear()
    started.clear()
    assert started.wait(2)
    t0 = time.monotonic()
    bg.cancel(again, wait_s=0.05)  # not past its limit
    assert time.monotonic() - t0 < 1.0
    release.set()
    time.sleep(0.1)
    assert "never" not in ran


def test_a_job_that_raises_is_logged_and_the_thread_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    bg = Background("test-bg")
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="trial_runner.background"):
        bg.after(0.0, boom)
        bg.after(0.01, done.set)
        assert done.wait(2)
    assert any("background job failed" in r.getMessage() and r.exc_info for r in caplog.records)


def test_one_thread_serves_every_trial() -> None:
    """What the module is for: many trials' jobs, one thread (not one or two per trial)."""
    bg = Background("test-bg-count")
    before = {t.ident for t in threading.enumerate()}
    done = threading.Semaphore(0)
    for _ in range(50):
        beat = bg.every(0.001, done.release)
        flush = bg.after(0.001, done.release)
        assert done.acquire(timeout=2) and done.acquire(timeout=2)
        bg.cancel(beat, wait_s=1.0)
        bg.cancel(flush)
    mine = [t for t in threading.enumerate()
            if t.ident not in before and t.name == "test-bg-count"]
    assert len(mine) == 1


def test_a_forked_child_runs_its_own_jobs_and_none_of_the_parents() -> None:
    bg = Background("test-bg-fork")
    parent_job = bg.every(0.01, lambda: None)  # its thread now runs in this process
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread and jobs are gone; a new job runs
        code = 1
        try:
            os.close(r)
            bg.after(0.01, lambda: os.write(w, b"child ran"))
            time.sleep(0.5)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    got = os.read(r, 100)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    bg.cancel(parent_job)
    assert got == b"child ran" and os.waitstatus_to_exitcode(status) == 0
