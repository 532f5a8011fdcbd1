"""What every backend offers the application layer: run a sweep's indexes, show an index's
log (its tail, or following it), cancel what runs, delete what the backend keeps of a sweep,
and describe what runs where. The application layer picks a backend object once
(:mod:`sweeper.app.backends`) and never branches on its name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sweeper.study import Sweep

#: Where text goes: a log's text (stdout) or a line about it (stderr).
Write = Callable[[str], None]
Tick = Callable[[], None]


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


@dataclass(frozen=True)
class SweepRef:
    """A sweep as the commands that work without its storage know it (logs, cancel): its
    name, and its stored record when the storage is at hand."""

    name: str
    sweep: Sweep | None = None

    @property
    def trials(self) -> int | None:
        return self.sweep.spec.trials if self.sweep is not None else None


@dataclass(frozen=True)
class IndexLog:
    """An attempt's log as shown: lines that say where it comes from and what it is (for
    stderr) and its text (ending in a newline unless empty or cut mid-line)."""

    notes: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Cancelled:
    """What a cancel stopped: ``lines`` say it in words (deleted Jobs, pods); the trial numbers
    of promoted RUNNING trials put back paused at their rung and of RUNNING trials marked
    FAIL (only with the sweep's record at hand)."""

    lines: tuple[str, ...]
    paused_trials: tuple[int, ...] = ()
    failed_trials: tuple[int, ...] = ()


@dataclass(frozen=True)
class Holding:
    """What a backend keeps of a sweep, for deleting it: ``what`` in words (for the question
    before deleting), ``workloads`` when it runs the sweep's trials (those go before the
    study, which their runners write to; files go after it), ``warnings`` when it could not
    look (an unreachable cluster that was not required: then it deletes nothing)."""

    what: tuple[str, ...] = ()
    workloads: bool = False
    warnings: tuple[str, ...] = ()
    #: What delete removes, as (kind, name): ("Job", NAME), ("logs", PATH), ...
    items: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Deleted:
    """What a backend's delete removed (lines in words) and what it could not (warnings)."""

    lines: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workload:
    """One thing that runs (or ran) a sweep's indexes: a Kubernetes Job, with its pods'
    counts and the sweep indexes it covers, completed and failed; an open-ended sweep's Job
    (``stride`` set) covers slots, each running index after index: ``indexes``,
    ``completed`` and ``failed_indexes`` then hold slot numbers."""

    kind: str
    name: str
    namespace: str
    state: str
    reason: str | None
    active: int
    ready: int
    succeeded: int
    failed: int
    indexes: tuple[int, ...]
    completed: tuple[int, ...]
    failed_indexes: tuple[int, ...]
    #: An open-ended sweep's Job: the slots' stride (slot j runs indexes j, j+stride, ...).
    stride: int | None = None


@dataclass(frozen=True)
class Description:
    """What runs a sweep where now (``sweeper status``); ``note`` when it could not be read
    and that was not required."""

    workloads: tuple[Workload, ...] = ()
    note: str | None = None
    #: (index, pod): the pod that ran each index asked about most recently (a slot's pod
    #: for an open-ended sweep: the newest pod of the index's slot).
    pods: tuple[tuple[int, str], ...] = ()


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

    def logs(self, ref: SweepRef, index: int, *, attempt: int | None,
             tail: int | None) -> IndexLog:
        """Attempt ``attempt`` of ``index`` (None: the latest), its last ``tail`` lines (None:
        all). Raises SweeperError when there is no such log."""
        ...

    def follow(self, ref: SweepRef, index: int, *, tail: int | None, write: Write,
               say: Write) -> None:
        """The latest attempt's log of ``index`` as it is written, to ``write``, until it ends
        (or Ctrl-C); lines about it go to ``say``."""
        ...

    def cancel(self, ref: SweepRef, *, wait_s: float) -> Cancelled:
        """Stop what runs the sweep here, waiting up to ``wait_s`` for it to be gone; with the
        record at hand, its RUNNING trials end (FAIL, or paused again when promoted) so that a
        resume runs them at once."""
        ...

    def holding(self, sweep: Sweep, *, required: bool) -> Holding:
        """What :meth:`delete` would remove. ``required``: failing to look is an error
        (else a warning in the result)."""
        ...

    def delete(self, sweep: Sweep, holding: Holding, *, wait_s: float,
               required: bool) -> Deleted:
        """Remove what :meth:`holding` found (not the study)."""
        ...

    def describe(self, sweep: Sweep, *, required: bool,
                 indexes: Sequence[int] = ()) -> Description:
        """What runs the sweep here now, and where each of ``indexes`` ran."""
        ...
