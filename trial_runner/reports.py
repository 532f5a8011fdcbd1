"""A running trial's reports and attributes, written behind.

``ctx.report`` used to be a round trip of its own, and the usual last one comes right before
the objective returns, so the finish followed it at once: two round trips where one does.
Here a report (and a ``ctx.set``, and the attributes of a dict result) is kept and written
``delay_s`` after it was made, all that is pending in one statement; the finish of the trial
takes whatever is still pending into its own statement (PostgreSQL). A pruning decision, a
FAIL and the end of the trial write what is pending first, so nothing is written out of order
and nothing is left behind; what others read (the dashboard, another trial's pruner) is at
most ``delay_s`` old. A runner killed outright loses at most that much of its reports: its
trial is unfinished, and its retry starts from its checkpoint, not from them.

Where the finish is not one statement (SQLite, the storage proxy) or ``delay_s`` is 0, every
write happens when it is made, as before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import optuna

from sweeper._optuna_compat import update_cached_trial
from sweeper.study.trials import new_report, riding_with_finish, store, store_of, write_trial
from sweeper.study.values import NextTake
from trial_runner.background import WRITES, Job

logger = logging.getLogger(__name__)


class ReportWriter:
    """The pending writes of one trial (thread-safe: the process's report thread,
    :data:`trial_runner.background.WRITES`, writes them when they are due)."""

    def __init__(self, trial: optuna.Trial, delay_s: float) -> None:
        self.trial = trial
        self._rides = delay_s > 0 and store_of(trial).rides()
        self.delay_s = delay_s if self._rides else 0.0
        self._lock = threading.RLock()
        self._attrs: dict[str, Any] = {}
        self._reports: list[tuple[int, float]] = []
        self._job: Job | None = None

    def add(self, *, user_attrs: Mapping[str, Any] | None = None,
            report: tuple[int, float] | None = None) -> None:
        """Record ``user_attrs`` and an intermediate value ``report`` (step, finite value). The
        trial's own copy shows them at once (a second report of a step is ignored, with
        Optuna's warning); a value that is not JSON raises here, not when it is written."""
        if not self._rides:
            write_trial(self.trial, user_attrs=user_attrs, report=report)
            return
        for value in (user_attrs or {}).values():
            json.dumps(value)
        with self._lock:
            report = new_report(self.trial, report)
            update_cached_trial(self.trial, user_attrs=user_attrs,
                                reports=[report] if report is not None else [])
            self._attrs.update(user_attrs or {})
            if report is not None:
                self._reports.append(report)
            if self._job is None and (self._attrs or self._reports):
                self._job = WRITES.after(self.delay_s, self._on_timer)

    def flush(self) -> None:
        """Write what is pending now (the storage's retries; its errors propagate, and what
        was pending stays pending)."""
        with self._lock:
            self._cancel_timer()
            attrs, reports = self._take()
            if not attrs and not reports:
                return
            try:
                store(self.trial, user_attrs=attrs, reports=reports)
            except BaseException:
                self._attrs, self._reports = {**attrs, **self._attrs}, reports + self._reports
                raise

    def flush_quietly(self) -> None:
        """:meth:`flush` before the trial is failed, and when it is over (what is left, the
        timer stopped): a write that fails is logged; what happens next matters more."""
        try:
            self.flush()
        except Exception as e:  # noqa: BLE001 - see above
            logger.warning("could not write the trial's last reports: %s", e)

    @contextlib.contextmanager
    def finishing(self, then: Callable[[], NextTake | None] | None = None) -> Iterator[None]:
        """Around the trial's finish: what is pending goes in the finishing statement (or, where
        it cannot, is written first), and so does the take ``then`` asks for, if any
        (trial_runner.ahead). A finish that raises leaves them pending, for the :meth:`flush`
        before the FAIL."""
        with self._lock:
            self._cancel_timer()
            if not self._rides:
                yield
                return
            attrs, reports = self._take()
            try:
                with riding_with_finish(self.trial, attrs, reports,
                                        then() if then is not None else None) as rides:
                    if not rides and (attrs or reports):
                        store(self.trial, user_attrs=attrs, reports=reports)
                    yield
            except BaseException:  # not finished here: they are written before the FAIL
                self._attrs, self._reports = {**attrs, **self._attrs}, reports + self._reports
                raise

    def _take(self) -> tuple[dict[str, Any], list[tuple[int, float]]]:
        attrs, reports = self._attrs, self._reports
        self._attrs, self._reports = {}, []
        return attrs, reports

    def _cancel_timer(self) -> None:
        if self._job is not None:
            WRITES.cancel(self._job)
            self._job = None

    def _on_timer(self) -> None:
        with self._lock:
            # Cancelled (written or finished) after it came due, before it got the lock: what
            # is pending now, if anything, has a job of its own.
            if self._job is None or self._job.cancelled:
                return
            self._job = None
            try:
                self.flush()
            except Exception as e:  # noqa: BLE001 - kept pending: the next write retries them
                logger.warning("could not write the trial's reports yet (kept for its next "
                               "write or its finish): %s", e)
