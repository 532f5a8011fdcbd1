"""The processes of the local cluster: started detached (in a session of their own, not
children of whoever started them: a test session's own children stay its own) with their
output in a log file, recorded in ``run/pids/NAME.json`` so that another process (``make
cluster-down``, after a crash of anything) can find and stop them, and never mistaken for a
process that reused the pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
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

    @classmethod
    def start(cls, name: str, argv: list[str], run: Path, cwd: Path,
              env: dict[str, str] | None = None, exe: str | None = None) -> Proc:
        """Start ``argv`` in the background of a short-lived shell, so that it is nobody's
        child here (init reaps it) and leads no process group of ours. ``exe``: what the
        process's argv[0] becomes, when ``argv`` execs another program (``nsenter ... CMD``)."""
        log = run / f"{name}.log"
        shell = subprocess.run(
            ["sh", "-c", 'log=$1; shift; "$@" >>"$log" 2>&1 </dev/null & echo $!', "sh",
             str(log), *argv], cwd=cwd, env={**os.environ, **(env or {})},
            capture_output=True, text=True, start_new_session=True, check=True)
        proc = cls(name, int(shell.stdout.split()[-1]), exe or argv[0], log)
        proc.wait_exec()
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

    def wait_exec(self, timeout: float = 10.0) -> None:
        """Until the shell's child has become ``exe`` (or died): before its exec the pid
        still shows the shell, and ``ours`` would call a starting process gone."""
        deadline = time.monotonic() + timeout
        while alive(self.pid) and not self.ours() and time.monotonic() < deadline:
            time.sleep(0.01)

    def ours(self) -> bool:
        """Still the process we started (not a pid reused by another program)."""
        try:
            argv0 = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            return False
        return argv0 == self.exe and alive(self.pid)

    def running(self) -> bool:
        return self.ours()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(self.pid), sig)  # the session the shell started


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
            deadline = time.monotonic() + 5
            while p.running() and time.monotonic() < deadline:
                time.sleep(0.05)
    return [p.name for p in running]
