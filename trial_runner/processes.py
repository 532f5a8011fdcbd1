"""The runner's child processes (a ``trial.command`` program, torchrun and its ranks, a gang's
followers): started to die with the runner, stopped by process group, their stderr copied to
the index's log with the tail kept for the failure's reason. Shared by
:mod:`trial_runner.command`, :mod:`trial_runner.launcher` and :mod:`trial_runner.gang`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import IO, Any

#: A Python exception line (``ModuleNotFoundError: No module named 'x'``) or the like.
_EXCEPTION_RE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b")
_ERROR_WORDS = ("error", "can't", "cannot", "no such file", "not found", "permission denied",
                "killed", "fatal", "abort")
#: Lines of the program's stderr kept for the failure reason.
_STDERR_TAIL = 50


def last_error_line(lines: Sequence[str]) -> str | None:
    """The line of a failed program's stderr that says why: the last exception line of a
    traceback, else the last line that reads like an error, else the last line. Pure."""
    clean = [line.strip() for line in lines if line.strip()]
    for pattern in (lambda s: bool(_EXCEPTION_RE.match(s)),
                    lambda s: any(w in s.lower() for w in _ERROR_WORDS),
                    lambda s: True):
        for line in reversed(clean):
            if pattern(line):
                return line[:300]
    return None


class StderrTee:
    """Copies the program's stderr to ours (the index's log) line by line and keeps the tail,
    so a failure's reason can be the program's own error rather than only its exit code."""

    def __init__(self, stream: IO[str] | Iterator[str]) -> None:
        self.tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        self._thread = threading.Thread(target=self._copy, args=(stream,), daemon=True,
                                        name="sweeper-stderr")
        self._thread.start()

    def _copy(self, stream: IO[str] | Iterator[str]) -> None:
        for line in stream:
            sys.stderr.write(line)
            self.tail.append(line)
        sys.stderr.flush()

    def reason(self) -> str | None:
        self._thread.join(timeout=5)
        return last_error_line(list(self.tail))


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``preexec_fn``: on Linux the child is SIGKILLed if the runner dies, so a killed runner
    leaves no orphan; the child leads its own process group (see :func:`terminate`)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setsid()


def terminate(proc: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``grace_s``; nothing if it ended."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
