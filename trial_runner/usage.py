"""The runner's side of the ledger (:mod:`sweeper.accounting`): the segment of the trial it
runs, opened when it starts and closed once however it ends, on the runner's own clock; and,
under ``budget.on_exhausted: stop``, the watch that stops the trial at its next report once
the budget is spent.

A segment's usage is added to the trial's pending writes (:class:`ReportWriter`) just before
the write that ends the segment (the tell, the FAIL, the pause), so it lands first or with
it: whoever then finds the attempt ended finds its segment closed, and a stale closer that
came first is overwritten by the same key (a segment counts once).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from optuna.exceptions import UpdateFinishedTrialError

from sweeper.accounting import Ending, OpenSegment, spec_resources
from sweeper.protocol import HISTORY_ATTR, SEGMENT_ATTR
from sweeper.study import Sweep
from sweeper.study.ledger import may_start
from trial_runner.outcome import BudgetSpent

if TYPE_CHECKING:
    from sweeper.spec import SweepSpec
    from trial_runner.context import TrialContext
    from trial_runner.reports import ReportWriter

logger = logging.getLogger(__name__)

#: How often a running trial asks whether the budget is spent (``on_exhausted: stop``).
WATCH_INTERVAL_S = 10.0


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def new_segment(spec: SweepSpec, from_step: int = 0) -> OpenSegment:
    """A segment of a trial of ``spec`` that starts now, from ``from_step``."""
    gpus, cpus = spec_resources(spec)
    return OpenSegment(uuid.uuid4().hex[:16], gpus, cpus, from_step, _utcnow())


def last_step_of(history: Mapping[str, Any]) -> int | None:
    """The highest step of a metric history (``sweeper:history``: name -> [[step, value]])."""
    steps = [int(p[0]) for points in history.values() if isinstance(points, list)
             for p in points if isinstance(p, list | tuple) and p]
    return max(steps, default=None)


#: The open segment of each trial this process runs, by trial id (PBT's next interval closes
#: it and opens the next: :meth:`Segment.following`).
_OPEN: dict[int, Segment] = {}


class Segment:
    """The open segment of one trial this runner runs; closed once (:meth:`close`), with the
    steps the trial's context reported (``reread``: read back from the trial, where another
    process reported them: torchrun's rank 0)."""

    def __init__(self, sweep: Sweep, trial_id: int, from_step: int | None, *,
                 reread: bool = False, opened: OpenSegment | None = None) -> None:
        # The claim's segment (its start, its key), where it starts where this one does.
        self.open = opened if opened is not None and opened.from_step == (from_step or 0) \
            else new_segment(sweep.spec, from_step or 0)
        self._sweep, self._tid, self._reread = sweep, trial_id, reread
        # Its wall time counts on this process's monotonic clock from its start (the claim).
        self._t0 = time.monotonic() - max(0.0, (_utcnow() - self.open.started).total_seconds())
        self._closed = False
        self._lock = threading.Lock()
        self._ctx: TrialContext | None = None
        _OPEN[trial_id] = self

    def attrs(self) -> dict[str, Any]:
        """The attribute that opens it (written with the trial's first write)."""
        return {SEGMENT_ATTR: self.open.encode()}

    def bind(self, ctx: TrialContext) -> None:
        """The context whose reports (and checkpoint resumed from) the segment counts."""
        self._ctx = ctx

    def _last_step(self) -> int | None:
        last = self._ctx.last_step if self._ctx is not None else None
        if last is None and self._reread:
            try:
                frozen = self._sweep.storage.get_trial(self._tid)
            except Exception as e:  # noqa: BLE001 - counted without steps, not lost
                logger.warning("could not read the steps of trial %d: %s", self._tid, e)
                return None
            last = max(frozen.intermediate_values, default=None)
            if last is None:
                last = last_step_of(frozen.user_attrs.get(HISTORY_ATTR) or {})
        return last

    def close(self, ending: Ending) -> dict[str, Any]:
        """The attribute that closes it as ``ending`` (empty once closed already): wall time
        on this process's monotonic clock, steps from where it resumed (a checkpoint's step)
        or started to the last one reported."""
        with self._lock:
            if self._closed:
                return {}
            self._closed = True
        _OPEN.pop(self._tid, None)
        resumed = self._ctx.resumed_from_step if self._ctx is not None else None
        segment = self.open if resumed is None else replace(self.open, from_step=resumed)
        end = self.open.started + timedelta(seconds=time.monotonic() - self._t0)
        usage = segment.close(ending, end=end, last_step=self._last_step())
        logger.debug("segment %s closed: %s", self.open.claim, usage)
        return {self.open.key: usage.encode()}

    def close_into(self, writer: ReportWriter, ending: Ending) -> None:
        """Close it into the trial's pending writes (they go before, or with, the write
        that ends the segment)."""
        attrs = self.close(ending)
        if not attrs:
            return
        try:
            writer.add(user_attrs=attrs)
        except UpdateFinishedTrialError:  # a closer failed it first: its figures stand
            logger.info("trial %d ended before its runner closed its segment: the closer's "
                        "figures stand", self._tid)

    @property
    def closed(self) -> bool:
        return self._closed

    def following(self, from_step: int) -> Segment:
        """A PBT member goes on from a donor's checkpoint at ``from_step``: this segment
        closes (paused: its interval ended) and the next opens, in one write; the next."""
        closed = self.close(Ending.PAUSED)
        nxt = Segment(self._sweep, self._tid, from_step, reread=self._reread)
        if self._ctx is not None:
            nxt.bind(self._ctx)
            self._ctx.resumed_from_step = None  # the next counts from the donor's step
        self._sweep.storage.set_trial_user_attrs(self._tid, {**closed, **nxt.attrs()})
        return nxt


def open_segment(trial_id: int) -> Segment | None:
    """The open segment of a trial this process runs (None: none)."""
    return _OPEN.get(trial_id)




class BudgetWatch:
    """Under ``budget.on_exhausted: stop``: asks the budget gate every
    :data:`WATCH_INTERVAL_S` on a thread of its own (a read that waits out a database outage
    must not hold back the heartbeats) and, once it says no, raises :class:`BudgetSpent` at
    the trial's next report (:meth:`check`). Any other sweep's watch does nothing."""

    def __init__(self, sweep: Sweep, interval_s: float | None = None) -> None:
        self._sweep = sweep
        self._interval_s = interval_s or WATCH_INTERVAL_S
        self._spent: str | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def wanted(sweep: Sweep) -> bool:
        budget = sweep.spec.budget
        return budget.enabled and budget.on_exhausted == "stop"

    def _ask(self) -> None:
        try:
            decision = may_start(self._sweep)
        except Exception as e:  # noqa: BLE001 - asked again at the next interval
            logger.warning("could not read the budget: %s", e)
            return
        if not decision.may_start:
            self._spent = decision.reason

    def check(self) -> None:
        """After a report: stop the trial (resumable) if the budget is spent."""
        if self._spent is not None:
            raise BudgetSpent(self._spent)

    def _run(self) -> None:
        while not self._done.wait(self._interval_s) and self._spent is None:
            self._ask()

    def __enter__(self) -> BudgetWatch:
        if not self.wanted(self._sweep):
            return self
        self._thread = threading.Thread(target=self._run, name="sweeper-budget", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
