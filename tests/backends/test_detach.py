"""The lines `run --backend kubernetes` prints when it leaves a Job or JobSet running
(--detach, Ctrl-C), word for word: both backends print them through one helper."""

from __future__ import annotations

from sweeper.backends.base import RunResult
from sweeper.backends.kubernetes.detach import watch_unless_detached


def _interrupted() -> RunResult:
    raise KeyboardInterrupt


def test_detached_says_how_to_follow_and_stop_it() -> None:
    for what in ("Job sweeper/s-0", "JobSet sweeper/s-0"):
        result = watch_unless_detached(what, "s", True, _interrupted)
        assert result == RunResult(detached=True, messages=(
            f"detached: {what} runs on; follow it with `sweeper status s`, stop it with "
            "`sweeper cancel s`",))


def test_ctrl_c_stops_the_watching_not_the_workload() -> None:
    job = watch_unless_detached("Job sweeper/s-0", "s", False, _interrupted,
                                status_when_interrupted=True)
    assert job == RunResult(interrupted=True, detached=True, messages=(
        "stopped watching; Job sweeper/s-0 keeps running: `sweeper status s` shows it, "
        "`sweeper cancel s` stops it",))
    gangs = watch_unless_detached("JobSet sweeper/s-0", "s", False, _interrupted)
    assert gangs.messages == ("stopped watching; JobSet sweeper/s-0 keeps running: "
                              "`sweeper cancel s` stops it",)


def test_watched_to_the_end_returns_what_the_watch_returns() -> None:
    done = RunResult(finished=(0, 1))
    assert watch_unless_detached("Job sweeper/s-0", "s", False, lambda: done) is done
