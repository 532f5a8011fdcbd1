"""Local backend: long-lived worker processes on this machine, at most ``parallelism`` at once.

Each worker is ``python -m trial_runner --serve`` (forked from ``sweeper run`` where that is
safe, see sweeper.backends.forked): it pays interpreter + torch start-up once and then runs
index after index handed to it over a pipe, with ``JOB_ID`` set per index and one GPU slot
(``CUDA_VISIBLE_DEVICES``) per worker. The parent retries failed indexes up to ``trial.retries``
times, fails the trials of workers that die or freeze, and on Ctrl-C stops
the workers so that their trials end FAIL (resumable by running the same command again).
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.base import LogTail, RunResult, Tick
from sweeper.backends.forked import (
    RUNNER_ARGS,
    RUNNER_MODULE,
    fork_safe,
    fork_worker,
)
from sweeper.backends.gpus import detect_gpus, gpu_slots
from sweeper.backends.local_worker import (
    Process,
    Worker,
    ask_to_stop,
    close_pipes,
    describe_exit,
)
from sweeper.errors import BackendError, SpecError
from sweeper.gang import Gang
from sweeper.spec.registry import make_pruner, make_sampler
from sweeper.study import InheritedSweep, Sweep, attempts, fail_stale_trials, mark_failed
from sweeper.study.stop import before_start, brake

logger = logging.getLogger(__name__)
#: Workers in a row that die before they are ready before the sweep gives up.
_MAX_STARTUP_FAILURES = 5
#: Seconds a worker may take from being handed an index to claiming its trial.
_START_TIMEOUT_S = 30.0
#: Seconds between the first indexes of forked workers. Started together, W workers run
#: their trials in step: equal trials end together and all W reach the database and the
#: CPUs at the same moment, each waiting for the others (a 0.5 s trial's round cost 20 ms
#: at first, 10 ms once they had drifted apart; 8 workers, 2 cores). Spread out, they take
#: turns; the sweep ends (W - 1) * STAGGER_S later at most.
STAGGER_S = 0.01


def checkpoint_root() -> Path:
    """Where local workers keep checkpoints (each sweep under its state key): absolute, so
    that every worker and ``sweeper delete`` agree whatever their working directory."""
    return Path(os.environ.get(protocol.ENV_CHECKPOINT_DIR)
                or protocol.DEFAULT_CHECKPOINT_DIR).resolve()


class LocalBackend:
    name = "local"

    def __init__(self, log_dir: Path, *, keyed: bool = False,
                 grace_period_s: float | None = None,
                 stop_timeout_s: float = 15.0, max_starting: int | None = None,
                 stagger_s: float = STAGGER_S,
                 proxy: bool | None = None, metrics: Any = None) -> None:
        #: ``keyed``: ``log_dir`` is the root under which each sweep logs in the directory of its
        #: identity (protocol.state_key: a new sweep under an old name starts a clean log).
        self._log_root = log_dir if keyed else None
        self.log_dir = log_dir
        #: Workers reach the study through an in-process storage proxy: True, False, or None
        #: (when it pays: sweeper.proxy.server.proxy_pays). A Prometheus registry in
        #: ``metrics`` turns it on: claim, tell and heartbeat metrics are observed there.
        self.proxy = proxy
        self.metrics = metrics
        self.grace_period_s = grace_period_s if grace_period_s is not None else \
            protocol.grace_period_s(os.environ)
        self.stop_timeout_s = stop_timeout_s
        self._startup_failures = 0
        #: Workers starting (importing, connecting) at once: W interpreters started together
        #: share the CPUs and all become ready late; in waves of one per core the first ones
        #: run trials while the rest start (on 2 cores and W=8: ~1 s sooner on average).
        self.max_starting = max(1, max_starting or os.cpu_count() or 1)
        self.stagger_s = stagger_s
        self._fork = False
        self._inherit: InheritedSweep | None = None
        self._last_tick = self._last_stale = 0.0
        #: Whether the last run forked its workers (sweeper.backends.forked) or exec'd them.
        self.forked = False

    # ---------------------------------------------------------------- public

    def run(self, sweep: Sweep, indexes: Sequence[int], *, storage_url: str,
            tick: Tick) -> RunResult:
        pending = deque(indexes)
        self._startup_failures = 0
        if not pending:
            return RunResult()
        if self._log_root is not None:
            self.log_dir = self._log_root / sweep.state_key
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._record_launch(sweep)
        n = min(sweep.spec.parallelism, len(pending))
        slots = gpu_slots(detect_gpus(), sweep.spec.trial.resources.gpu, n)
        proxy, reserved, url = self._plan_proxy(storage_url, n)
        self._inherit = InheritedSweep(storage_url, self._inheritable(sweep)) \
            if self._fork and url == storage_url else None
        env = self._env(sweep, url, n)
        dispatched: dict[int, int] = {}
        finished: list[int] = []
        failed: list[int] = []
        sel = selectors.DefaultSelector()
        workers: list[Worker] = []
        try:
            unstarted = self._first_workers(env, slots, sel, workers)
            if reserved is not None:
                proxy = self._start_reserved_proxy(storage_url, reserved)
            self._last_tick = self._last_stale = 0.0

            def spawn(slot: int) -> Worker:
                return self._spawn(slot, env, slots[slot], sel)

            while pending or any(w.index is not None for w in workers):
                while unstarted and pending and \
                        sum(not w.ready for w in workers) < self.max_starting:
                    workers.append(spawn(unstarted.pop(0)))
                for key, _ in sel.select(timeout=self._wait(workers)):
                    self._read(key.data, sweep, pending, dispatched, finished, failed)
                self._replace_exited(workers, sweep, pending, dispatched, failed, sel, spawn)
                self._dispatch_ready(workers, pending, dispatched)
                self._prefetch(workers, pending, dispatched)
                self._retire_idle(workers, pending)
                self._periodic(sweep, workers, pending, tick)
            tick()
            return RunResult(finished=tuple(sorted(finished)), failed=tuple(sorted(failed)))
        except KeyboardInterrupt:
            busy = {w.index for w in workers if w.index is not None}  # before _stop_all clears
            self._stop_all(workers, sweep)
            return RunResult(finished=tuple(sorted(finished)),
                             failed=tuple(sorted(failed)), interrupted=True,
                             messages=(f"stopped {len(busy)} running trial(s)",))
        finally:
            self._stop_all(workers, sweep)
            sel.close()
            if reserved is not None:  # closed already once the proxy serves; not if it did not
                reserved.close()
            if proxy is not None:  # after the workers: stopping ones still mark trials FAIL
                proxy.stop()

    def log_tail(self, sweep: Sweep, index: int, lines: int) -> LogTail:
        from sweeper.runlogs import last_lines, read_local_log

        log = read_local_log(self.log_dir, index)
        return LogTail(f"file {log.path}", last_lines(log.section.text, lines))

    def _record_launch(self, sweep: Sweep) -> None:
        """Where this sweep ran and logged (``sweeper logs`` and ``resume`` read it)."""
        for key, value in ((protocol.BACKEND_ATTR, self.name),
                           (protocol.LOG_DIR_ATTR, str(self.log_dir.resolve())),
                           (protocol.CHECKPOINT_DIR_ATTR,
                            str(checkpoint_root() / sweep.state_key))):
            sweep.storage.set_study_user_attr(sweep.study_id, key, value)

    # ---------------------------------------------------------------- workers

    def _plan_proxy(self, storage_url: str, n_workers: int) -> tuple[Any, Any, str]:
        """(a proxy started now, a port reserved for one started after the workers are
        forked, the URL the workers get). Forking is decided here: gRPC's threads must not
        be inherited, so a proxy starts after the first workers are forked, and replacements
        for workers that die later are exec'd."""
        from sweeper.proxy.client import is_proxy_url, proxy_pays

        wanted = self.proxy if self.proxy is not None else \
            self.metrics is not None or proxy_pays(storage_url, n_workers)
        self._fork = self.forked = fork_safe(os.environ, storage_url)
        if not wanted or is_proxy_url(storage_url):
            return None, None, storage_url
        from sweeper.proxy.server import reserve_local_port, start_local_proxy

        if self._fork:
            reserved = reserve_local_port()
            return None, reserved, f"grpc://127.0.0.1:{reserved.getsockname()[1]}"
        server = start_local_proxy(storage_url, self.metrics)
        logger.info("workers reach the study through the storage proxy on %s", server.url)
        return server, None, server.url

    def _periodic(self, sweep: Sweep, workers: list[Worker], pending: deque[int],
                  tick: Tick) -> None:
        """The run loop's slower duties: frozen workers, stop rules, the caller's progress."""
        now = time.monotonic()
        if now - self._last_stale > max(1.0, self.grace_period_s / 4):
            self._last_stale = now
            self._kill_frozen(sweep, workers)
        if now - self._last_tick >= 1.0:
            self._last_tick = now
            if pending and before_start(sweep.storage, sweep.study_id, sweep.spec):
                pending.clear()  # a stop rule fired: running trials finish, no new one
            tick()

    @staticmethod
    def _inheritable(sweep: Sweep) -> Sweep:
        """What a forked worker takes over (sweeper.study.InheritedSweep): a Sweep
        of its own on this process's storage, the runner's study already loaded in it (each
        worker would otherwise spend its first trial's queries and CPU on that)."""
        mine = Sweep(sweep.storage, sweep.study_id, sweep.spec)
        mine.runner_study(make_sampler(sweep.spec, 0), make_pruner(sweep.spec))
        return mine

    def _first_workers(self, env: dict[str, str], slots: list[str | None],
                       sel: selectors.BaseSelector, workers: list[Worker]) -> list[int]:
        """Forked workers start in milliseconds: all at once, before a proxy's gRPC threads
        exist. Exec'd ones start in the run loop, ``max_starting`` at a time. Returns the
        slots still to start."""
        if not self._fork:
            return list(range(len(slots)))
        workers += [self._spawn(slot, env, gpus, sel) for slot, gpus in enumerate(slots)]
        start = time.monotonic()
        for w in workers:  # first indexes spread out: see STAGGER_S
            w.not_before = start + w.slot * self.stagger_s
        return []

    def _start_reserved_proxy(self, storage_url: str, reserved: Any) -> Any:
        from sweeper.proxy.server import start_local_proxy

        try:
            server = start_local_proxy(storage_url, self.metrics, reserved=reserved)
        finally:
            reserved.close()
        self._fork = False  # from now on this process has gRPC's threads
        logger.info("workers reach the study through the storage proxy on %s", server.url)
        return server

    def _env(self, sweep: Sweep, storage_url: str, n_workers: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update({protocol.ENV_STORAGE: storage_url, protocol.ENV_STUDY: sweep.name,
                    protocol.ENV_LOG_DIR: str(self.log_dir), "PYTHONUNBUFFERED": "1",
                    protocol.ENV_CHECKPOINT_DIR: str(checkpoint_root()),
                    protocol.ENV_PARENT_PID: str(os.getpid())})
        if sweep.spec.trial.nodes > 1:  # each worker is node 0 of its gang (sweeper.gang)
            env.update(Gang(sweep.spec.trial.nodes, local=True).env())
        threads = str(max(1, (os.cpu_count() or 1) // n_workers))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, threads)
        # The spec's directory first: relative paths in the spec resolve against it.
        base = sweep.spec.base_dir
        if base:
            env[protocol.ENV_SPEC_DIR] = base
        path = [base, os.getcwd(), *(env.get("PYTHONPATH") or "").split(os.pathsep)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in path if p))
        return env

    def _spawn(self, slot: int, env: dict[str, str], gpus: str | None,
               sel: selectors.BaseSelector) -> Worker:
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        wenv = dict(env, **{protocol.ENV_CMD_FD: str(cmd_r), protocol.ENV_RESULT_FD: str(res_w)})
        if gpus is not None:
            wenv["CUDA_VISIBLE_DEVICES"] = gpus
        log_path = self.log_dir / f"worker-{slot}.log"
        try:
            proc = self._start(wenv, (cmd_r, res_w), log_path)
        finally:
            os.close(cmd_r)
            os.close(res_w)
        worker = Worker(slot, proc, os.fdopen(cmd_w, "w", buffering=1), os.fdopen(res_r, "rb",
                                                                                   buffering=0))
        os.set_blocking(res_r, False)
        sel.register(worker.res, selectors.EVENT_READ, worker)
        return worker

    def _start(self, env: dict[str, str], fds: tuple[int, int], log_path: Path) -> Process:
        """Fork the worker from this process (its imports already done), or exec a new
        interpreter where forking is not safe (sweeper.backends.forked)."""
        if self._fork:
            return fork_worker(env, fds, log_path, inherit=self._inherit)
        with open(log_path, "ab") as log:
            # A new session: Ctrl-C reaches only this parent, which stops workers in order.
            return subprocess.Popen([sys.executable, "-m", RUNNER_MODULE, *RUNNER_ARGS],
                                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    pass_fds=fds, start_new_session=True)

    @staticmethod
    def _wait(workers: list[Worker]) -> float:
        """How long the run loop may wait for a worker's message: 0.2 s, or until the next
        worker whose first index is held back may have it."""
        now = time.monotonic()
        due = [w.not_before - now for w in workers if w.index is None and w.not_before > now]
        return max(0.0, min([0.2, *due]))

    def _retire_idle(self, workers: list[Worker], pending: deque[int]) -> None:
        """Nothing left to hand out: idle workers exit now, while the last trials run, rather
        than all together at the end. A retry that comes back later goes to a worker that is
        still busy now (or, if that one dies, to a replacement)."""
        if pending:
            return
        for w in workers:
            if w.ready and w.index is None and not w.retired:
                w.retired = True
                try:
                    w.cmd.write(protocol.encode_message(protocol.Exit()))
                except OSError:
                    pass

    def _replace_exited(self, workers: list[Worker], sweep: Sweep, pending: deque[int],
                        dispatched: dict[int, int], failed: list[int],
                        sel: selectors.BaseSelector, spawn: Callable[[int], Worker]) -> None:
        """Reap the workers that exited; start another in the slot while there is work."""
        for w in list(workers):
            if w.proc.poll() is not None:
                self._reap(w, sweep, pending, dispatched, failed, sel)
                workers.remove(w)
                if not w.retired and (pending or any(x.index is not None for x in workers)):
                    workers.append(spawn(w.slot))

    def _dispatch_ready(self, workers: list[Worker], pending: deque[int],
                        dispatched: dict[int, int]) -> None:
        for w in workers:
            if w.ready and not w.retired and w.index is None and pending and \
                    w.not_before <= time.monotonic():
                self._dispatch(w, pending.popleft(), dispatched)

    def _dispatch(self, w: Worker, index: int, dispatched: dict[int, int]) -> None:
        dispatched[index] = dispatched.get(index, 0) + 1
        w.index, w.trial_id, w.started_at = index, None, time.monotonic()
        self._send_run(w, index)

    def _prefetch(self, workers: list[Worker], pending: deque[int],
                  dispatched: dict[int, int]) -> None:
        """Hand a busy worker its next index while its trial runs, so that it starts it as
        soon as it is done instead of waiting for this loop to read its Done and answer. Only
        while more indexes are pending than there are workers: at the end of a sweep every
        index goes to whichever worker is free first."""
        for w in workers:
            if len(pending) <= len(workers):
                return
            if w.ready and not w.retired and w.index is not None and w.queued is None:
                index = pending.popleft()
                dispatched[index] = dispatched.get(index, 0) + 1
                w.queued = index
                self._send_run(w, index)

    @staticmethod
    def _send_run(w: Worker, index: int) -> None:
        try:
            w.cmd.write(protocol.encode_message(protocol.Run(index)))
        except (BrokenPipeError, OSError):
            pass  # the worker died; _reap puts the index back

    def _read(self, w: Worker, sweep: Sweep, pending: deque[int], dispatched: dict[int, int],
              finished: list[int], failed: list[int]) -> None:
        try:
            chunk = w.res.read(65536)
        except BlockingIOError:
            return
        if not chunk:
            return
        w.buffer += chunk
        *lines, w.buffer = w.buffer.split(b"\n")
        for raw in lines:
            msg = protocol.parse_message(raw.decode(errors="replace"))
            if isinstance(msg, protocol.Ready):
                w.ready = True
                self._startup_failures = 0
            elif isinstance(msg, protocol.Start):
                w.trial_id = msg.trial_id
            elif isinstance(msg, protocol.Done):
                # The worker goes on with the index it was handed meanwhile, if any.
                w.index, w.queued, w.trial_id = w.queued, None, None
                w.started_at = time.monotonic()
                if msg.state == protocol.STOPPED:  # the sweep stopped: start no other index
                    pending.clear()
                    continue
                self._settle(msg.index, msg.exit_code, sweep, pending, dispatched, finished,
                             failed)
            elif isinstance(msg, protocol.Error):
                raise SpecError(msg.message, source=sweep.spec.source)

    def _settle(self, index: int, code: int, sweep: Sweep, pending: deque[int],
                dispatched: dict[int, int], finished: list[int], failed: list[int]) -> None:
        if code == protocol.EXIT_OK:
            finished.append(index)
        elif code == protocol.EXIT_CONFIG:
            raise SpecError(f"index {index}: the runner reported a configuration error; see "
                            f"{self.log_dir / f'index-{index}.log'}", source=sweep.spec.source)
        elif not finished and brake(sweep.storage, sweep.study_id, sweep.spec):
            pending.clear()  # every attempt so far failed: start no new one (the brake)
        elif code != protocol.EXIT_NO_RETRY and \
                dispatched.get(index, 0) <= sweep.spec.trial.retries:
            logger.info("index %d failed (attempt %d); retrying", index, dispatched[index])
            pending.append(index)
        else:
            failed.append(index)

    def _reap(self, w: Worker, sweep: Sweep, pending: deque[int], dispatched: dict[int, int],
              failed: list[int], sel: selectors.BaseSelector) -> None:
        """A worker exited. If it held an index, its attempt died with it."""
        try:
            self._read(w, sweep, pending, dispatched, [], failed)
        except SpecError:
            raise
        sel.unregister(w.res)
        w.res.close()
        try:
            w.cmd.close()
        except OSError:
            pass
        if w.queued is not None:  # handed over but never started: next in line, uncounted
            dispatched[w.queued] -= 1
            pending.appendleft(w.queued)
            w.queued = None
        code = w.proc.returncode
        if not w.ready and w.index is None and code == protocol.EXIT_CONFIG:
            raise SpecError(f"the trial runner could not start: {self._tail(w.slot)}",
                            source=sweep.spec.source)
        if w.index is None:
            if not w.ready:
                # Killed while starting (OOM killer, a chaos test): start another, but a
                # worker that can never start must not loop forever.
                self._startup_failures += 1
                if self._startup_failures >= _MAX_STARTUP_FAILURES:
                    raise BackendError(f"worker {w.slot} exited with code {code} before "
                                       f"starting: {self._tail(w.slot)}")
                logger.warning("worker %d %s while starting; starting another", w.slot,
                               describe_exit(code))
            return
        index = w.index
        reason = describe_exit(code)
        _fail_running(sweep, index, f"runner process {reason}")
        logger.warning("index %d: runner process %s", index, reason)
        self._settle(index, protocol.EXIT_NO_RETRY if code == protocol.EXIT_NO_RETRY
                     else protocol.EXIT_RETRY, sweep, pending, dispatched, [], failed)

    def _tail(self, slot: int) -> str:
        try:
            lines = (self.log_dir / f"worker-{slot}.log").read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        errors = [line for line in lines if "ERROR" in line or "Error" in line]
        return (errors or lines or ["no output"])[-1].strip()[:500]

    def _kill_frozen(self, sweep: Sweep, workers: list[Worker]) -> None:
        """Fail trials whose heartbeat went stale and SIGKILL the workers that held them (a
        frozen process cannot be trusted to come back); _reap then retries the index."""
        stale = set(fail_stale_trials(sweep.storage, sweep.study_id, self.grace_period_s))
        now = time.monotonic()
        for w in workers:
            if w.trial_id is not None and w.trial_id in stale:
                logger.warning("index %s: heartbeat stale; killing worker %d", w.index, w.slot)
                w.proc.kill()
            elif w.index is not None and w.trial_id is None and \
                    now - w.started_at > max(self.grace_period_s, _START_TIMEOUT_S):
                # Handed an index but never claimed it: frozen before it could (no trial is
                # RUNNING, so no heartbeat can go stale). Unless another runner holds the
                # index and is alive, the worker is killed and the index handed out again.
                latest = attempts(sweep.storage, sweep.study_id, w.index)[-1:]
                if latest and latest[0].state == TrialState.RUNNING and \
                        (latest[0].heartbeat_age_s or 0.0) <= self.grace_period_s:
                    w.started_at = now
                    continue
                logger.warning("index %s: worker %d did not start it; killing the worker",
                               w.index, w.slot)
                w.proc.kill()

    def _stop_all(self, workers: list[Worker], sweep: Sweep) -> None:
        for w in workers:
            ask_to_stop(w)
        deadline = time.monotonic() + self.stop_timeout_s
        for w in workers:
            try:
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            if w.index is not None:
                _fail_running(sweep, w.index, "sweep stopped; resumable")
                w.index = None
        for w in workers:
            close_pipes(w)


def _fail_running(sweep: Sweep, index: int, reason: str) -> None:
    for a in attempts(sweep.storage, sweep.study_id, index):
        if a.state == TrialState.RUNNING:
            mark_failed(sweep.storage, a.trial_id, reason)
