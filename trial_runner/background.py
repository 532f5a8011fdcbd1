"""Long-lived threads for a trial's timed work: its heartbeats and its reports written behind.

Each trial used to start and join two threads of its own (a heartbeat thread, a timer for its
reports). In a local worker that runs trial after trial, that was a sixth of its CPU between
two trials (0.6 of 3.4 ms: 8 workers of 0.5 s trials on 2 cores). Here each kind of work has
one thread per process, started with its first job and reused by every later trial. Two, not
one: a report write that waits out an outage in its retries must not hold back the
heartbeats that tell the watcher this runner is alive.

A job runs on its thread, one at a time, in the order of its due times; an exception it lets
out is logged and the thread goes on. A forked child starts with no jobs and starts its own
thread when it first needs one (threads do not survive ``fork``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class Job:
    """A call due at ``when`` (time.monotonic()), again every ``interval_s`` if given."""

    __slots__ = ("cancelled", "fn", "interval_s", "when")

    def __init__(self, fn: Callable[[], None], when: float, interval_s: float | None) -> None:
        self.fn = fn
        self.when = when
        self.interval_s = interval_s
        self.cancelled = False


class Background:
    """One daemon thread (named ``name``) that runs :class:`Job` s when they are due."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._order = itertools.count()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        """No thread and no jobs yet (at first, and in a forked child, which has neither: a
        lock held by the parent's thread at the fork would never be released here)."""
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Job]] = []
        self._running: Job | None = None
        self._thread: threading.Thread | None = None

    def after(self, delay_s: float, fn: Callable[[], None]) -> Job:
        """Call ``fn`` once, ``delay_s`` from now."""
        return self._add(Job(fn, time.monotonic() + delay_s, None))

    def every(self, interval_s: float, fn: Callable[[], None]) -> Job:
        """Call ``fn`` every ``interval_s``, the first time ``interval_s`` from now."""
        return self._add(Job(fn, time.monotonic() + interval_s, interval_s))

    def cancel(self, job: Job, *, wait_s: float = 0.0) -> None:
        """No further call of ``job``; a call running now may finish within ``wait_s`` seconds
        before this returns (not waited for on the job's own thread)."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            job.cancelled = True
            if threading.current_thread() is self._thread:
                return
            while self._running is job and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)

    def _add(self, job: Job) -> Job:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            # Woken only when the job is due before what it sleeps until now (the earliest job).
            wake = not self._heap or job.when < self._heap[0][0]
            heapq.heappush(self._heap, (job.when, next(self._order), job))
            if wake:
                self._cond.notify()
        return job

    def _next(self) -> Job:
        """The next due job, waiting for it (with the condition held)."""
        while True:
            while self._heap and self._heap[0][2].cancelled:
                heapq.heappop(self._heap)
            now = time.monotonic()
            if self._heap and self._heap[0][0] <= now:
                return heapq.heappop(self._heap)[2]
            self._cond.wait(self._heap[0][0] - now if self._heap else None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                job = self._running = self._next()
            try:
                job.fn()
            except Exception:
                logger.exception("%s: a background job failed", self.name)
            finally:
                with self._cond:
                    self._running = None
                    if job.interval_s is not None and not job.cancelled:
                        job.when = max(job.when + job.interval_s, time.monotonic())
                        heapq.heappush(self._heap, (job.when, next(self._order), job))
                    self._cond.notify_all()


#: A running trial's heartbeats (trial_runner.runner).
HEARTBEATS = Background("sweeper-heartbeat")
#: A running trial's reports written behind (trial_runner.reports).
WRITES = Background("sweeper-reports")
