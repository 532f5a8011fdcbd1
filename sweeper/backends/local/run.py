"""One run of the local backend (sweeper.backends.local), built per ``LocalBackend.run`` call:
its workers, the indexes still to hand out, the attempts handed out per index, and what
finished and what failed for good, all attributes of one :class:`LocalRun`.

Its loop starts workers (exec'd ones ``max_starting`` at a time), reads their messages,
replaces the ones that exited while there is work, hands out indexes (the next one to a busy
worker ahead of time while plenty are left), retires idle workers once nothing is left, and
now and then kills frozen workers, asks the stop rules and calls the caller's ``tick``. Failed
indexes are retried up to ``trial.retries`` times; Ctrl-C stops the workers so that their
trials end FAIL (resumable by running the same command again).
"""

from __future__ import annotations

import logging
import selectors
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from optuna.trial import TrialState

from sweeper import messages, protocol
from sweeper.backends.base import RunResult, Tick
from sweeper.backends.local.proxy import LocalProxy
from sweeper.backends.local.worker import (
    Launcher,
    Worker,
    ask_to_stop,
    close_pipes,
    describe_exit,
    preempted,
)
from sweeper.errors import BackendError, SpecError
from sweeper.study import Sweep
from sweeper.study.stop import before_start, brake

#: The local backend's logger: these lines keep the name they had before they moved here.
logger = logging.getLogger("sweeper.backends.local")
#: Workers in a row that die before they are ready before the sweep gives up.
MAX_STARTUP_FAILURES = 5
#: Seconds a worker may take from being handed an index to claiming its trial.
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RunSettings:
    """What a run takes from its backend (sweeper.backends.local.LocalBackend)."""

    grace_period_s: float
    stop_timeout_s: float
    #: Exec'd workers starting (importing, connecting) at once.
    max_starting: int
    #: Seconds between the first indexes of forked workers (sweeper.backends.local.STAGGER_S).
    stagger_s: float
    #: Whether the first workers are forked (sweeper.backends.local.forked) rather than exec'd.
    fork: bool


def _no_tick() -> None:
    pass


class LocalRun:
    """The state of one run, and the steps of its loop as methods that change it (public, so
    that a test can take a run through them one at a time and a subclass can note when they
    happen: sweeper.backends.local.LocalBackend.run_type)."""

    def __init__(self, sweep: Sweep, settings: RunSettings, launcher: Launcher,
                 proxy: LocalProxy) -> None:
        self.sweep = sweep
        self.settings = settings
        self.launcher = launcher
        self.proxy = proxy
        #: Workers started from now on are forked; False once a proxy's threads exist.
        self.fork = settings.fork
        self.pending: deque[int] = deque()
        #: Attempts handed out per index (one handed over but never started is taken back).
        self.dispatched: dict[int, int] = {}
        self.finished: list[int] = []
        self.failed: list[int] = []
        self.workers: list[Worker] = []
        #: Slots whose worker is still to start.
        self.unstarted: list[int] = []
        #: Workers in a row that exited before they were ready.
        self.startup_failures = 0
        self.sel = selectors.DefaultSelector()
        self.tick: Tick = _no_tick
        self.last_tick = self.last_stale = 0.0

    def run(self, indexes: Sequence[int], tick: Tick) -> RunResult:
        """Run ``indexes`` to completion, or until Ctrl-C (interrupted, resumable)."""
        self.pending.extend(indexes)
        self.tick = tick
        try:
            self.start_first()
            if self.proxy.start_reserved():
                self.fork = False  # from now on this process has gRPC's threads
            return self._loop()
        except KeyboardInterrupt:
            busy = {w.index for w in self.workers if w.index is not None}  # before stop_all
            self.stop_all()
            return self._result(interrupted=True,
                                messages=(f"stopped {len(busy)} running trial(s)",))
        finally:
            self.stop_all()
            self.sel.close()
            self.proxy.close()  # after the workers: stopping ones still mark trials FAIL

    def _result(self, *, interrupted: bool = False, messages: tuple[str, ...] = ()) -> RunResult:
        return RunResult(finished=tuple(sorted(self.finished)),
                         failed=tuple(sorted(self.failed)), interrupted=interrupted,
                         messages=messages)

    def _loop(self) -> RunResult:
        self.last_tick = self.last_stale = 0.0
        while self.pending or self._busy():
            self.start_more()
            for key, _ in self.sel.select(timeout=self.wait_s()):
                self.read(key.data)
            self.replace_exited()
            self.dispatch_ready()
            self.prefetch()
            self.retire_idle()
            self.periodic()
        self.tick()
        return self._result()

    def _busy(self) -> bool:
        return any(w.index is not None for w in self.workers)

    # ---------------------------------------------------------------- workers

    def _spawn(self, slot: int) -> None:
        worker = self.launcher.spawn(slot, fork=self.fork)
        self.sel.register(worker.res, selectors.EVENT_READ, worker)
        self.workers.append(worker)

    def start_first(self) -> None:
        """Forked workers start in milliseconds: all at once, before a proxy's gRPC threads
        exist, their first indexes spread out (sweeper.backends.local.STAGGER_S). Exec'd ones
        start in the loop, ``max_starting`` at a time."""
        slots = range(len(self.launcher.slots))
        if not self.fork:
            self.unstarted = list(slots)
            return
        for slot in slots:
            self._spawn(slot)
        start = time.monotonic()
        for w in self.workers:
            w.not_before = start + w.slot * self.settings.stagger_s

    def start_more(self) -> None:
        while self.unstarted and self.pending and \
                sum(not w.ready for w in self.workers) < self.settings.max_starting:
            self._spawn(self.unstarted.pop(0))

    def wait_s(self) -> float:
        """How long the loop may wait for a worker's message: 0.2 s, or until the next
        worker whose first index is held back may have it."""
        now = time.monotonic()
        due = [w.not_before - now for w in self.workers
               if w.index is None and w.not_before > now]
        return max(0.0, min([0.2, *due]))

    def retire_idle(self) -> None:
        """Nothing left to hand out: idle workers exit now, while the last trials run, rather
        than all together at the end. A retry that comes back later goes to a worker that is
        still busy now (or, if that one dies, to a replacement)."""
        if self.pending:
            return
        for w in self.workers:
            if w.ready and w.index is None and not w.retired:
                w.retired = True
                try:
                    w.cmd.write(messages.encode_message(messages.Exit()))
                except OSError:
                    pass

    def replace_exited(self) -> None:
        """Reap the workers that exited; start another in the slot while there is work."""
        for w in list(self.workers):
            if w.proc.poll() is not None:
                self.reap(w)
                self.workers.remove(w)
                if not w.retired and (self.pending or self._busy()):
                    self._spawn(w.slot)

    # ---------------------------------------------------------------- indexes

    def dispatch_ready(self) -> None:
        for w in self.workers:
            if w.ready and not w.retired and w.index is None and self.pending and \
                    w.not_before <= time.monotonic():
                self.dispatch(w, self.pending.popleft())

    def dispatch(self, w: Worker, index: int) -> None:
        self.dispatched[index] = self.dispatched.get(index, 0) + 1
        w.index, w.trial_id, w.started_at = index, None, time.monotonic()
        _send_run(w, index)

    def prefetch(self) -> None:
        """Hand a busy worker its next index while its trial runs, so that it starts it as
        soon as it is done instead of waiting for this loop to read its Done and answer. Only
        while more indexes are pending than there are workers: at the end of a sweep every
        index goes to whichever worker is free first. Never under PBT: its population trains
        at the same time, and an index queued behind another would start only after it."""
        if getattr(self.sweep.spec.scheduler, "type", None) == "pbt":
            return
        for w in self.workers:
            if len(self.pending) <= len(self.workers):
                return
            if w.ready and not w.retired and w.index is not None and w.queued is None:
                index = self.pending.popleft()
                self.dispatched[index] = self.dispatched.get(index, 0) + 1
                w.queued = index
                _send_run(w, index)

    def read(self, w: Worker, *, reaping: bool = False) -> None:
        try:
            chunk = w.res.read(65536)
        except BlockingIOError:
            return
        if not chunk:
            return
        w.buffer += chunk
        *lines, w.buffer = w.buffer.split(b"\n")
        for raw in lines:
            self._on_message(w, messages.parse_message(raw.decode(errors="replace")), reaping)

    def _on_message(self, w: Worker, msg: messages.Message, reaping: bool) -> None:
        if isinstance(msg, messages.Ready):
            w.ready = True
            self.startup_failures = 0
        elif isinstance(msg, messages.Start):
            w.trial_id = msg.trial_id
        elif isinstance(msg, messages.Done):
            # The worker goes on with the index it was handed meanwhile, if any.
            w.index, w.queued, w.trial_id = w.queued, None, None
            w.started_at = time.monotonic()
            if msg.state == protocol.STOPPED:  # the sweep stopped: start no other index
                self.pending.clear()
            else:
                self.settle(msg.index, msg.exit_code, reaping)
        elif isinstance(msg, messages.Error):
            raise SpecError(msg.message, source=self.sweep.spec.source)

    def settle(self, index: int, code: int, reaping: bool) -> None:
        """An attempt of ``index`` ended with ``code``: finished, retried, or failed for good.
        ``reaping``: its worker has exited; as the run has always done, an index finished
        then is not counted in ``finished``, and the brake is asked whatever finished."""
        sweep = self.sweep
        if code == protocol.EXIT_OK:
            if not reaping:
                self.finished.append(index)
        elif code == protocol.EXIT_CONFIG:
            log = self.launcher.log_dir / f"index-{index}.log"
            raise SpecError(f"index {index}: the runner reported a configuration error; see "
                            f"{log}", source=sweep.spec.source)
        elif (reaping or not self.finished) and \
                brake(sweep.storage, sweep.study_id, sweep.spec):
            self.pending.clear()  # every attempt so far failed: start no new one (the brake)
        elif code != protocol.EXIT_NO_RETRY and \
                self.dispatched.get(index, 0) <= sweep.spec.trial.retries:
            logger.info("index %d failed (attempt %d); retrying", index, self.dispatched[index])
            self.pending.append(index)
        else:
            self.failed.append(index)

    def reap(self, w: Worker) -> None:
        """A worker exited. If it held an index, its attempt died with it."""
        self.read(w, reaping=True)
        self.sel.unregister(w.res)
        w.res.close()
        try:
            w.cmd.close()
        except OSError:
            pass
        if w.queued is not None:  # handed over but never started: next in line, uncounted
            self.dispatched[w.queued] -= 1
            self.pending.appendleft(w.queued)
            w.queued = None
        code = w.proc.returncode
        if w.index is None:
            if not w.ready:
                self.died_starting(w.slot, code)
            return
        index = w.index
        reason = describe_exit(code)
        self._fail_running(index, f"runner process {reason}")
        logger.warning("index %d: runner process %s", index, reason)
        if preempted(code):  # stopped from outside: retried without using a retry
            self.dispatched[index] -= 1
        self.settle(index, protocol.EXIT_NO_RETRY if code == protocol.EXIT_NO_RETRY
                     else protocol.EXIT_RETRY, reaping=True)

    def died_starting(self, slot: int, code: int | None) -> None:
        """The worker of ``slot`` exited before it was ready: a runner that cannot start is a
        configuration error; one killed while starting (OOM killer, a chaos test) is replaced,
        but a worker that can never start must not loop forever."""
        if code == protocol.EXIT_CONFIG:
            raise SpecError(f"the trial runner could not start: {self.launcher.tail(slot)}",
                            source=self.sweep.spec.source)
        self.startup_failures += 1
        if self.startup_failures >= MAX_STARTUP_FAILURES:
            raise BackendError(f"worker {slot} exited with code {code} before "
                               f"starting: {self.launcher.tail(slot)}")
        logger.warning("worker %d %s while starting; starting another", slot,
                       describe_exit(code))

    # ---------------------------------------------------------------- now and then, and the end

    def periodic(self) -> None:
        """The loop's slower duties: frozen workers, stop rules, the caller's progress."""
        now = time.monotonic()
        if now - self.last_stale > max(1.0, self.settings.grace_period_s / 4):
            self.last_stale = now
            self.kill_frozen()
        if now - self.last_tick >= 1.0:
            self.last_tick = now
            sweep = self.sweep
            if self.pending and before_start(sweep.storage, sweep.study_id, sweep.spec):
                self.pending.clear()  # a stop rule fired: running trials finish, no new one
            self.tick()

    def kill_frozen(self) -> None:
        """Fail trials whose heartbeat went stale and SIGKILL the workers that held them (a
        frozen process cannot be trusted to come back); reap then retries the index."""
        grace = self.settings.grace_period_s
        stale = set(self.sweep.storage.fail_stale_trials(self.sweep.study_id, grace))
        now = time.monotonic()
        for w in self.workers:
            if w.trial_id is not None and w.trial_id in stale:
                logger.warning("index %s: heartbeat stale; killing worker %d", w.index, w.slot)
                w.proc.kill()
            elif w.index is not None and w.trial_id is None and \
                    now - w.started_at > max(grace, START_TIMEOUT_S):
                # Handed an index but never claimed it: frozen before it could (no trial is
                # RUNNING, so no heartbeat can go stale). Unless another runner holds the
                # index and is alive, the worker is killed and the index handed out again.
                if self._running_elsewhere(w.index):
                    w.started_at = now
                    continue
                logger.warning("index %s: worker %d did not start it; killing the worker",
                               w.index, w.slot)
                w.proc.kill()

    def _running_elsewhere(self, index: int) -> bool:
        """Whether the latest attempt of ``index`` is RUNNING with a fresh heartbeat."""
        sweep = self.sweep
        latest = sweep.storage.attempts(sweep.study_id, index)[-1:]
        return bool(latest) and latest[0].state == TrialState.RUNNING and \
            (latest[0].heartbeat_age_s or 0.0) <= self.settings.grace_period_s

    def stop_all(self) -> None:
        for w in self.workers:
            ask_to_stop(w)
        deadline = time.monotonic() + self.settings.stop_timeout_s
        for w in self.workers:
            try:
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            if w.index is not None:
                self._fail_running(w.index, "sweep stopped; resumable")
                w.index = None
        for w in self.workers:
            close_pipes(w)

    def _fail_running(self, index: int, reason: str) -> None:
        sweep = self.sweep
        for a in sweep.storage.attempts(sweep.study_id, index):
            if a.state == TrialState.RUNNING:
                sweep.storage.mark_failed(a.trial_id, reason)


def _send_run(w: Worker, index: int) -> None:
    try:
        w.cmd.write(messages.encode_message(messages.Run(index)))
    except (BrokenPipeError, OSError):
        pass  # the worker died; reap puts the index back
