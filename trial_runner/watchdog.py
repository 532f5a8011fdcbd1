"""How a running trial is watched: its heartbeat (another runner's proof that the attempt is
alive), its timeout (a hung objective cannot be interrupted from Python), and the stop rules
evaluated once a trial ended, by the runner or by the timeout that ended it.
"""

from __future__ import annotations

import logging
import os
import threading

from sweeper import protocol
from sweeper.protocol import FAILED_FOR_GOOD_ATTR
from sweeper.study import Sweep, stop
from trial_runner.background import HEARTBEATS, Job

logger = logging.getLogger(__name__)


class Heartbeat:
    """Records the trial's heartbeat every interval until stopped (on the process's heartbeat
    thread, :data:`trial_runner.background.HEARTBEATS`)."""

    def __init__(self, sweep: Sweep, trial_id: int, interval_s: float) -> None:
        self._args = (sweep, trial_id, interval_s)
        self._job: Job | None = None

    @staticmethod
    def _beat(sweep: Sweep, trial_id: int) -> None:
        try:
            sweep.storage.record_heartbeat(trial_id)
        except Exception as e:  # noqa: BLE001 - keep beating; an outage makes it stale anyway
            logger.warning("heartbeat failed: %s", type(e).__name__)

    def __enter__(self) -> Heartbeat:
        sweep, trial_id, interval_s = self._args
        self._job = HEARTBEATS.every(interval_s, lambda: self._beat(sweep, trial_id))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._job is not None:  # a beat under way may take up to 5 s more
            HEARTBEATS.cancel(self._job, wait_s=5.0)


def after_trial(sweep: Sweep, *, failed: bool = False) -> None:
    """Evaluate the stop rules now that a trial finished, and the brake after a failure (so
    the next runner sees it before it starts, whatever the launcher's poll interval). A
    failure here must not undo the trial, which is finished already: the next runner
    evaluates them again."""
    try:
        stop.after_trial(sweep.storage, sweep.study_id, sweep.spec)
        if failed:
            stop.brake(sweep.storage, sweep.study_id, sweep.spec)
    except Exception as e:  # noqa: BLE001 - the trial's outcome stands; say why, carry on
        logger.warning("could not evaluate the stop rules: %s", e)


def start_timeout(sweep: Sweep, trial_id: int, index: int, number: int,
                   timeout_s: float | None) -> threading.Timer | None:
    """A hung objective cannot be interrupted from Python, so on timeout the trial is marked
    FAIL and the runner process exits (code NO_RETRY); the backend starts a fresh one."""
    if timeout_s is None:
        return None

    def expire() -> None:
        reason = f"timed out after {timeout_s:g}s (trial.timeout)"
        try:
            if sweep.spec.stop.max_failed_trials is not None:  # no retry follows a timeout
                sweep.storage.set_trial_user_attr(trial_id, FAILED_FOR_GOOD_ATTR, True)
            sweep.storage.mark_failed(trial_id, reason)
            after_trial(sweep, failed=True)
        finally:
            logger.error("index %d: trial #%d %s", index, number, reason)
            logging.shutdown()
            os._exit(protocol.EXIT_NO_RETRY)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    return timer
