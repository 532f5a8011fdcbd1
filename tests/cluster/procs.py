"""The processes of the local cluster: started in their own session with their output in a
log file, recorded in ``run/pids/NAME.json`` so that another process (``make cluster-down``,
after a crash of anything) can find and stop them, and never mistaken for a process that
reused the pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@dataclass
class Proc:
    name: str
    pid: int
    exe: str  # argv[0]: what /proc/PID/cmdline must start with
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, compare=False)

    @classmethod
    def start(cls, name: str, argv: list[str], run: Path, cwd: Path,
              env: dict[str, str] | None = None) -> Proc:
        log = run / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **(env or {})})
        return cls.adopt(name, popen, run, argv[0], log)

    @classmethod
    def adopt(cls, name: str, popen: subprocess.Popen[bytes], run: Path,
              exe: str | None = None, log: Path | None = None) -> Proc:
        args = popen.args
        argv0 = exe or (str(args[0]) if isinstance(args, list | tuple) else str(args))
        proc = cls(name, popen.pid, argv0, log or run / f"{name}.log", popen)
        (run / "pids").mkdir(parents=True, exist_ok=True)
        (run / "pids" / f"{name}.json").write_text(json.dumps(
            {"name": name, "pid": proc.pid, "exe": proc.exe, "log": str(proc.log)}))
        return proc

    @classmethod
    def load_all(cls, run: Path) -> list[Proc]:
        out = []
        for f in sorted((run / "pids").glob("*.json")) if (run / "pids").is_dir() else []:
            with contextlib.suppress(ValueError, KeyError, OSError):
                d = json.loads(f.read_text())
                out.append(cls(d["name"], int(d["pid"]), d["exe"], Path(d["log"])))
        return out

    def ours(self) -> bool:
        """Still the process we started (not a pid reused by another program)."""
        try:
            argv0 = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            return False
        return argv0 == self.exe and alive(self.pid)

    def running(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.ours()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)  # its own session: the group is its pid


def stop_all(procs: list[Proc], grace: float = 10.0) -> list[str]:
    """SIGTERM in reverse start order, SIGKILL what is left after ``grace``; the names of the
    processes that were running."""
    running = [p for p in reversed(procs) if p.running()]
    for p in running:
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in running:
        while p.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.running():
            p.signal(signal.SIGKILL)
        if p.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=5)
    return [p.name for p in running]
