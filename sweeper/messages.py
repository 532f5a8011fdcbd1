"""The local backend's worker messages: what ``sweeper run`` and each ``python -m trial_runner
--serve`` worker say to each other over two pipes, one line per message.
Orchestrator -> worker: ``run I`` / ``exit``. Worker -> orchestrator: ``ready``,
``start I TRIAL_ID NUMBER``, ``done I EXIT_CODE STATE NUMBER``, ``error TEXT``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    """Orchestrator -> worker: run this index."""

    index: int


@dataclass(frozen=True)
class Exit:
    """Orchestrator -> worker: no more work; exit cleanly."""


@dataclass(frozen=True)
class Ready:
    """Worker -> orchestrator: imported and connected; send work."""


@dataclass(frozen=True)
class Start:
    """Worker -> orchestrator: it owns trial ``trial_id`` (number ``number``) for ``index``."""

    index: int
    trial_id: int
    number: int


@dataclass(frozen=True)
class Done:
    """Worker -> orchestrator: ``index`` ended with this exit code and state."""

    index: int
    exit_code: int
    state: str
    trial_number: int | None


@dataclass(frozen=True)
class Error:
    """Worker -> orchestrator: a configuration error no retry can fix (one line)."""

    message: str


Message = Run | Exit | Ready | Start | Done | Error


def encode_message(msg: Message) -> str:
    """One line, newline included."""
    if isinstance(msg, Run):
        return f"run {msg.index}\n"
    if isinstance(msg, Exit):
        return "exit\n"
    if isinstance(msg, Ready):
        return "ready\n"
    if isinstance(msg, Start):
        return f"start {msg.index} {msg.trial_id} {msg.number}\n"
    if isinstance(msg, Done):
        number = msg.trial_number if msg.trial_number is not None else -1
        return f"done {msg.index} {msg.exit_code} {msg.state} {number}\n"
    text = " ".join(msg.message.split())  # one line, whatever the message held
    return f"error {text}\n"


def parse_message(line: str) -> Message:
    """Inverse of :func:`encode_message`. Raises ValueError on a line it does not know."""
    kind, _, rest = line.strip().partition(" ")
    args = rest.split()
    try:
        if kind == "run" and len(args) == 1:
            return Run(int(args[0]))
        if kind == "exit" and not args:
            return Exit()
        if kind == "ready" and not args:
            return Ready()
        if kind == "start" and len(args) == 3:
            return Start(int(args[0]), int(args[1]), int(args[2]))
        if kind == "done" and len(args) == 4:
            number = int(args[3])
            return Done(int(args[0]), int(args[1]), args[2], None if number < 0 else number)
        if kind == "error":
            return Error(rest.strip())
    except ValueError:
        pass
    raise ValueError(f"not a worker message: {line.strip()[:80]!r}")

