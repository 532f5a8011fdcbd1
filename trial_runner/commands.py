"""A local worker's command pipe (``run I`` lines in, :mod:`sweeper.messages`), read line by
line, with a look at the next command once it has arrived: the runner takes a prefetched
index in the finish of the trial before it (:mod:`trial_runner.ahead`)."""

from __future__ import annotations

import os
import select
from collections import deque

from sweeper import messages


class Commands:
    """The commands on file descriptor ``fd``; the end of the pipe reads as ``Exit``."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lines: deque[str] = deque()
        self._partial = b""
        self._ended = False

    def next(self) -> messages.Message:
        """The next command, waiting for it."""
        while not self._lines and not self._ended:
            self._read()
        return self._parse(self._lines.popleft()) if self._lines else messages.Exit()

    def peek(self) -> messages.Message | None:
        """The next command if it has arrived (it stays next), else None, without waiting."""
        while not self._lines and not self._ended and \
                select.select([self._fd], [], [], 0)[0]:
            self._read()
        return self._parse(self._lines[0]) if self._lines else None

    def next_index(self) -> int | None:
        """The index of the next command, if that is a ``run`` that has arrived."""
        msg = self.peek()
        return msg.index if isinstance(msg, messages.Run) else None

    def _read(self) -> None:
        chunk = os.read(self._fd, 65536)
        if not chunk:
            self._ended = True
            return
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        self._lines.extend(line.decode(errors="replace") for line in lines)

    @staticmethod
    def _parse(line: str) -> messages.Message:
        return messages.parse_message(line) if line.strip() else messages.Exit()
