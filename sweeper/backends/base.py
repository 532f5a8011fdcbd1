"""What every backend offers the CLI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sweeper.study import Sweep


@dataclass(frozen=True)
class RunResult:
    """How a launch ended. ``failed`` holds indexes that failed for good (retries used up or a
    failure no retry fixes); ``interrupted`` means the user stopped it (resumable)."""

    finished: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    interrupted: bool = False
    detached: bool = False
    messages: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class LogTail:
    """The last lines of what an index's runner wrote (its latest attempt), and where."""

    where: str  # "file PATH" or "pod NAMESPACE/NAME"
    text: str


Tick = Callable[[], None]


class Backend(Protocol):
    name: str

    def run(self, sweep: Sweep, indexes: Sequence[int], *, storage_url: str,
            tick: Tick) -> RunResult:
        """Run ``indexes`` of ``sweep`` to completion (or launch them, when detached), at most
        ``sweep.spec.parallelism`` at once, calling ``tick`` about once a second so the caller
        can show progress. ``storage_url`` is the URL the runners open the study with."""
        ...

    def log_tail(self, sweep: Sweep, index: int, lines: int) -> LogTail:
        """The last ``lines`` lines of the latest attempt of ``index`` (for ``run``'s summary
        of failed indexes). Raises SweeperError when that log cannot be read."""
        ...
