"""How ``run --backend kubernetes`` leaves a workload it does not watch to its end: detached
(``--detach``) or interrupted (Ctrl-C), the Job or JobSet runs on, and the lines say how to
follow it and stop it. One place for the Job and the JobSet, so that both say the same."""

from __future__ import annotations

from collections.abc import Callable

from sweeper.backends.base import RunResult


def watch_unless_detached(what: str, sweep_name: str, detach: bool,
                          watch: Callable[[], RunResult], *,
                          status_when_interrupted: bool = False) -> RunResult:
    """``watch()``'s result, unless ``detach``: then a result that says ``what`` (``Job
    NS/NAME``, ``JobSet NS/NAME``) runs on. Ctrl-C while watching stops the watching, never
    the workload; ``status_when_interrupted``: that line names ``sweeper status`` too."""
    if detach:
        return RunResult(detached=True, messages=(
            f"detached: {what} runs on; follow it with `sweeper status {sweep_name}`, stop it "
            f"with `sweeper cancel {sweep_name}`",))
    try:
        return watch()
    except KeyboardInterrupt:
        shows = f"`sweeper status {sweep_name}` shows it, " if status_when_interrupted else ""
        return RunResult(interrupted=True, detached=True, messages=(
            f"stopped watching; {what} keeps running: {shows}`sweeper cancel {sweep_name}` "
            "stops it",))
