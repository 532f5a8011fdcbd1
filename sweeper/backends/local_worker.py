"""A worker process of the local backend (sweeper.backends.local): its record, how it is
asked to stop, and how its exit is described."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass, field
from typing import IO

from sweeper import protocol
from sweeper.backends.forked import ForkedProcess

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
    #: (:meth:`sweeper.backends.local.LocalBackend._prefetch`).
    queued: int | None = None
    trial_id: int | None = None
    started_at: float = 0.0
    #: Told to exit (nothing left to run): not replaced when it does.
    retired: bool = False
    #: Its first index is handed over no sooner than this (time.monotonic()).
    not_before: float = 0.0
    lines: list[str] = field(default_factory=list)


def ask_to_stop(w: Worker) -> None:
    """An idle worker is told to exit; a busy one gets SIGTERM (its trial ends resumable)."""
    if w.proc.poll() is None:
        try:
            if w.index is None:
                w.cmd.write(protocol.encode_message(protocol.Exit()))
            else:
                w.proc.send_signal(signal.SIGTERM)
        except OSError:
            pass


def close_pipes(w: Worker) -> None:
    for f in (w.cmd, w.res):
        try:
            f.close()
        except OSError:
            pass


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
