"""The runner beside a ``trial.command`` program in another container of the pod (the split
pod, :mod:`sweeper.shim`): it hands each program over to the shim in the user's container
through files in a shared emptyDir, follows its output, stops it by signalling its process
(the pod shares one process namespace) and, once it has run its indexes, tells the shim the
exit code that container must end with.

:class:`RemoteProgram` stands in for the ``subprocess.Popen`` of a program the runner starts
itself (:mod:`trial_runner.command` uses either): ``pid``, ``poll``, ``wait``, and ``stdout``
and ``stderr`` as iterators of lines.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from sweeper import protocol, shim
from trial_runner.outcome import Interrupted

logger = logging.getLogger(__name__)

#: How often the runner looks at the shim's files.
_POLL_S = 0.02
#: How long the status of a program whose process is gone may take to appear before the
#: shim (the user's container) counts as dead.
_STATUS_GRACE_S = 2.0
#: The exit status a program reads as when its container died before the shim wrote one.
LOST = protocol.EXIT_SIGNAL_BASE + signal.SIGKILL
_SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT}
#: How long the runner waits for the kubelet's SIGTERM once the shim has exited.
_AFTER_SHIM_S = 10.0


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists in this (the pod's shared) process namespace and has not
    exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (what stopping the program must reach: a shell
    script's python, torchrun's workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _line(path: Path) -> str | None:
    """The file's first line once it is complete (newline-terminated), else None."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return text.split("\n", 1)[0] if "\n" in text else None


class Exchange:
    """The runner's side of the shared directory: orders out, the shim's files in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.next = 0
        while (root / shim.order_file(self.next)).exists():
            self.next += 1
        self.shim_pid: int | None = None

    def signalled(self) -> int | None:
        """The signal the shim was sent (the pod is stopping), if any."""
        name = _line(self.root / shim.SIGNAL)
        return _SIGNALS.get(name.strip()) if name else None

    def wait_ready(self) -> int:
        """Wait until the shim is up (the user's image pulled and started): the runner claims
        nothing before. Its PID."""
        waited = time.monotonic()
        while True:
            line = _line(self.root / shim.READY)
            if line and line.strip().isdigit():
                self.shim_pid = int(line)
                logger.debug("the shim is up after %.2fs", time.monotonic() - waited)
                return self.shim_pid
            time.sleep(_POLL_S)

    def shim_alive(self) -> bool:
        return self.shim_pid is None or alive(self.shim_pid)

    def recover(self) -> bool:
        """After a restart of this runner's container: stop the program the previous runner
        left running (its attempt goes stale and is retried by the index protocol). True when
        the previous runner had already given the shim its exit code."""
        if self.next == 0:
            return False
        last = self.next - 1
        order = _line(self.root / shim.order_file(last)) or ""
        if order.startswith("exit"):
            return True
        program = RemoteProgram(self, last)
        if program.poll() is None:
            logger.warning("stopping program %d, which the previous runner of this pod left "
                           "running", last)
            program.stop()
        return False

    def start(self, argv: list[str], env: dict[str, str]) -> RemoteProgram:
        """Hand the program over to the shim; raises Interrupted when the pod is stopping."""
        signum = self.signalled()
        if signum is not None:
            raise Interrupted(signum)
        n = self.next
        self._write(shim.script_file(n), shim.program_script(argv, env))
        self._write(shim.order_file(n), shim.run_order())
        self.next += 1
        return RemoteProgram(self, n)

    def workdir(self) -> Path:
        """A directory of the shared volume for the next program's files (params, metrics)."""
        path = self.root / f"trial-{self.next}"
        path.mkdir(exist_ok=True)
        path.chmod(0o770)
        return path

    def finish(self, code: int) -> None:
        """Give the shim the exit code its container ends with (what the Job's
        podFailurePolicy reads)."""
        self._write(shim.order_file(self.next), shim.exit_order(code))
        self.next += 1

    def _write(self, name: str, text: str) -> None:
        """Atomically: the shim never reads half an order."""
        tmp = self.root / f".{name}.tmp"
        tmp.write_text(text)
        tmp.chmod(0o664)
        os.replace(tmp, self.root / name)


class RemoteProgram:
    """Program ``n`` of the shim: its PID, exit status and output, read from the shared
    directory."""

    def __init__(self, exchange: Exchange, n: int) -> None:
        self.exchange = exchange
        self.n = n
        self.returncode: int | None = None
        self.lost = False
        self._gone_since: float | None = None
        self._lock = threading.Lock()
        self.stdout = self._follow(shim.stdout_file(n))
        self.stderr = self._follow(shim.stderr_file(n))

    @property
    def pid(self) -> int | None:
        line = _line(self.exchange.root / shim.pid_file(self.n))
        return int(line) if line and line.strip().isdigit() else None

    def poll(self) -> int | None:
        """The exit status once the shim wrote it; :data:`LOST` when the shim died first."""
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            line = _line(self.exchange.root / shim.status_file(self.n))
            if line is not None and line.strip().lstrip("-").isdigit():
                self.returncode = int(line)
            elif self._shim_gone():
                self.lost = True
                self.returncode = LOST
            return self.returncode

    def _shim_gone(self) -> bool:
        """The shim (the user's container) died without writing a status: checked twice, a
        moment apart, as the status may follow the program's end by a little."""
        pid = self.pid
        if self.exchange.shim_alive() and (pid is None or alive(pid)):
            self._gone_since = None
            return False
        if self.exchange.shim_alive():
            return False  # the program ended: the shim writes its status next
        now = time.monotonic()
        if self._gone_since is None:
            self._gone_since = now
        return now - self._gone_since > _STATUS_GRACE_S

    def wait(self) -> int:
        """The exit status; raises Interrupted when the shim was signalled (the pod is
        stopping): the attempt is then resumable, as when the runner itself is signalled."""
        while self.poll() is None:
            time.sleep(_POLL_S)
        assert self.returncode is not None
        signum = self.exchange.signalled()
        if signum is not None:
            raise Interrupted(signum)
        if self.lost:
            logger.error("the trial's container stopped before its program's exit status was "
                         "written (killed?)")
        return self.returncode

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the program and what it started, SIGKILL what is left after ``grace_s``."""
        deadline = time.monotonic() + grace_s
        pid = self.pid
        while pid is None and self.poll() is None and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            pid = self.pid
        if pid is None or self.poll() is not None:
            return
        tree = descendants(pid)
        self._signal(tree, signal.SIGTERM)
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if self.poll() is None:
            self._signal(descendants(pid) + tree, signal.SIGKILL)

    @staticmethod
    def _signal(pids: list[int], signum: int) -> None:
        for p in pids:
            try:
                os.kill(p, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def _follow(self, name: str) -> Iterator[str]:
        """The lines of the file as the program writes them, to its end once it exited."""
        path = self.exchange.root / name
        while not path.exists():
            if self.poll() is not None and not path.exists():
                return
            time.sleep(_POLL_S)
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            partial = ""
            while True:
                chunk = f.readline()
                if chunk:
                    partial += chunk
                    if partial.endswith("\n"):
                        yield partial
                        partial = ""
                    continue
                if self.poll() is not None:
                    rest = partial + f.read()
                    if rest:
                        yield rest
                    return
                time.sleep(_POLL_S)


_current: list[Exchange | None] = []


def current() -> Exchange | None:
    """This pod's exchange (``$SWEEPER_EXCHANGE_DIR``, set in the split pod), or None: the
    runner starts programs itself."""
    if not _current:
        root = os.environ.get(protocol.ENV_EXCHANGE_DIR)
        _current.append(Exchange(Path(root)) if root else None)
    return _current[0]


def wait_for_the_end(exchange: Exchange) -> None:
    """After the exit order: the kubelet stops this sidecar (SIGTERM) once the shim's
    container has ended; exit then, or a while after the shim is gone (a sidecar that ends
    on its own before the kubelet saw the trial's container end is started again)."""
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopped.set())
    while not stopped.wait(_POLL_S * 10):
        if exchange.shim_pid is None:
            line = _line(exchange.root / shim.READY)
            exchange.shim_pid = int(line) if line and line.strip().isdigit() else None
        if exchange.shim_pid is not None and not alive(exchange.shim_pid):
            stopped.wait(_AFTER_SHIM_S)
            return
