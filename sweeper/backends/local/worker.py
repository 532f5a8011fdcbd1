"""A worker process of the local backend (sweeper.backends.local): its record, how it is
started, how it is asked to stop, and how its exit is described."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sweeper import messages, protocol
from sweeper.backends.local.forked import RUNNER_ARGS, RUNNER_MODULE, ForkedProcess, fork_worker
from sweeper.study import InheritedSweep

#: A worker process: exec'd (Popen) or forked from this one.
Process = subprocess.Popen[bytes] | ForkedProcess


@dataclass
class Worker:
    """A worker process of the local backend and what the backend knows of it."""

    slot: int
    proc: Process
    cmd: IO[str]
    res: IO[bytes]
    buffer: bytes = b""
    ready: bool = False
    index: int | None = None
    #: The next index, handed over while ``index`` runs
    #: (:meth:`sweeper.backends.local.run.LocalRun.prefetch`).
    queued: int | None = None
    trial_id: int | None = None
    started_at: float = 0.0
    #: Told to exit (nothing left to run): not replaced when it does.
    retired: bool = False
    #: Its first index is handed over no sooner than this (time.monotonic()).
    not_before: float = 0.0
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Launcher:
    """How one run of the local backend starts its workers: the environment they share, the
    GPUs of each slot, where they log, and the sweep a forked worker takes over (None: it
    opens its own, as an exec'd one does)."""

    env: dict[str, str]
    log_dir: Path
    #: ``CUDA_VISIBLE_DEVICES`` of each worker slot (None: left as it is); one per worker.
    slots: tuple[str | None, ...]
    inherit: InheritedSweep | None = None

    def spawn(self, slot: int, *, fork: bool) -> Worker:
        """Start the worker of ``slot``, its command and result pipes open (the result end
        non-blocking, for the run's selector)."""
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        env = dict(self.env, **{protocol.ENV_CMD_FD: str(cmd_r),
                                protocol.ENV_RESULT_FD: str(res_w)})
        gpus = self.slots[slot]
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        try:
            proc = self._start(env, (cmd_r, res_w), self.log_path(slot), fork)
        finally:
            os.close(cmd_r)
            os.close(res_w)
        worker = Worker(slot, proc, os.fdopen(cmd_w, "w", buffering=1), os.fdopen(res_r, "rb",
                                                                                   buffering=0))
        os.set_blocking(res_r, False)
        return worker

    def _start(self, env: dict[str, str], fds: tuple[int, int], log_path: Path,
               fork: bool) -> Process:
        """Fork the worker from this process (its imports already done), or exec a new
        interpreter where forking is not safe (sweeper.backends.local.forked)."""
        if fork:
            return fork_worker(env, fds, log_path, inherit=self.inherit)
        with open(log_path, "ab") as log:
            # A new session: Ctrl-C reaches only this parent, which stops workers in order.
            return subprocess.Popen([sys.executable, "-m", RUNNER_MODULE, *RUNNER_ARGS],
                                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    pass_fds=fds, start_new_session=True)

    def log_path(self, slot: int) -> Path:
        return self.log_dir / f"worker-{slot}.log"

    def tail(self, slot: int) -> str:
        """The line of a worker's log that says best why it ended: its last error, else its
        last line."""
        try:
            lines = self.log_path(slot).read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        errors = [line for line in lines if "ERROR" in line or "Error" in line]
        return (errors or lines or ["no output"])[-1].strip()[:500]


def ask_to_stop(w: Worker) -> None:
    """An idle worker is told to exit; a busy one gets SIGINT (its trial ends resumable). Not
    SIGTERM: that is what a runner takes for preemption from outside (:func:`preempted`)."""
    if w.proc.poll() is None:
        try:
            if w.index is None:
                w.cmd.write(messages.encode_message(messages.Exit()))
            else:
                w.proc.send_signal(signal.SIGINT)
        except OSError:
            pass


def close_pipes(w: Worker) -> None:
    for f in (w.cmd, w.res):
        try:
            f.close()
        except OSError:
            pass


def preempted(code: int | None) -> bool:
    """Whether a worker's exit code says SIGTERM stopped it: sweeper's own stops send SIGINT,
    so this came from outside (``kill``, a node's shutdown), like a pod's preemption: its
    index is retried without using a retry."""
    return code in (-signal.SIGTERM, protocol.EXIT_SIGNAL_BASE + signal.SIGTERM)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    if code > protocol.EXIT_SIGNAL_BASE:
        try:
            return f"was killed by {signal.Signals(code - protocol.EXIT_SIGNAL_BASE).name}"
        except ValueError:
            pass
    return f"exited with code {code} ({protocol.EXIT_NAMES.get(code, 'error')})"
