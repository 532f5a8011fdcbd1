"""A pod as this node runs it: each container a process group, started in the kubelet's order
(init containers one by one, sidecars — init containers with ``restartPolicy: Always`` — kept
running, then the main containers), restarted per ``restartPolicy``, stopped on deletion with
SIGTERM, the grace period, then SIGKILL. :func:`sync` advances one pod and says what its
status is now; the caller writes it through the API.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .podenv import ContainerConfigError, Obj, PodEnv
from .status import ContainerRun, pod_status


@dataclass
class PodRuntime:
    uid: str
    dir: Path
    containers: list[ContainerRun]
    volumes: dict[str, Path] | None = None
    term_sent: float | None = None
    kill_at: float | None = None
    finished: bool = False
    log_files: list[IO[bytes]] = field(default_factory=list)

    def by_name(self, name: str) -> ContainerRun | None:
        return next((c for c in self.containers if c.name == name), None)

    @property
    def running(self) -> bool:
        return any(c.running for c in self.containers)


def new_runtime(pod: Obj, root: Path) -> PodRuntime:
    meta = pod["metadata"]
    d = Path(tempfile.mkdtemp(prefix=f"{meta.get('namespace', '')}_{meta['name']}_",
                              dir=root))
    (d / "logs").mkdir()
    (d / "volumes").mkdir()
    containers = [ContainerRun(c["name"], c, True, c.get("restartPolicy") == "Always",
                               d / "logs" / f"{c['name']}.log")
                  for c in pod["spec"].get("initContainers") or []]
    containers += [ContainerRun(c["name"], c, False, False, d / "logs" / f"{c['name']}.log")
                   for c in pod["spec"].get("containers") or []]
    for c in containers:
        c.log_path.touch()
    return PodRuntime(meta["uid"], d, containers)


class Runner:
    """Starts, polls and stops the processes of the pods bound to this node."""

    def __init__(self, base_env: dict[str, str], workdir: Path, shared: Path,
                 max_grace_seconds: float) -> None:
        self.base_env = base_env
        self.workdir = workdir
        self.shared = shared
        self.max_grace_seconds = max_grace_seconds

    def sync(self, pod: Obj, rt: PodRuntime, penv: PodEnv) -> Obj:
        """Advance the pod one step; its status now."""
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if deleting:
            self._terminate(pod, rt)
        else:
            self._advance(pod, rt, penv)
        self._poll(pod, rt, deleting)
        status = pod_status(pod, rt.containers, rt.volumes is not None, deleting)
        if status["phase"] in ("Succeeded", "Failed"):
            self.stop(rt)
            status = pod_status(pod, rt.containers, rt.volumes is not None, deleting)
            rt.finished = True
            self.close(rt)
        return status

    def _terminate(self, pod: Obj, rt: PodRuntime) -> None:
        now = time.monotonic()
        if not rt.running:
            for c in rt.containers:
                if not c.terminated and not c.init:
                    c.finish(137, "ContainerStatusUnknown",
                             "The container could not be located when the pod was deleted.  "
                             "The container used to be Running")
            return
        if rt.term_sent is None:
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
            grace = min(float(grace), self.max_grace_seconds)
            rt.term_sent, rt.kill_at = now, now + grace
            self.signal(rt, signal.SIGKILL if grace <= 0 else signal.SIGTERM)
        elif rt.kill_at is not None and now >= rt.kill_at:
            self.signal(rt, signal.SIGKILL)
            rt.kill_at = now + 3600  # sent once

    def _advance(self, pod: Obj, rt: PodRuntime, penv: PodEnv) -> None:
        if rt.volumes is None:
            try:
                rt.volumes = penv.volumes(rt.dir, self.shared)
            except ContainerConfigError as e:
                for c in rt.containers:
                    c.waiting_reason, c.waiting_message = "ContainerCreating", e.message
                return
        for c in rt.containers:
            if not c.init:
                continue
            if c.sidecar:
                if c.startable() and not self._start(rt, c, penv):
                    return
                continue
            if c.exit_code == 0:
                continue
            if c.startable():
                self._start(rt, c, penv)
            return  # running, or failed (the pod fails or _poll restarts it)
        for c in rt.containers:
            if not c.init and c.startable():
                self._start(rt, c, penv)

    def _poll(self, pod: Obj, rt: PodRuntime, deleting: bool) -> None:
        policy = pod["spec"].get("restartPolicy", "Always")
        for c in rt.containers:
            if c.proc is None or c.exit_code is not None:
                continue
            rc = c.proc.poll()
            if rc is None:
                continue
            # PID 1 of a container exiting takes the rest of the container with it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, signal.SIGKILL)
            code = 128 - rc if rc < 0 else rc
            c.finish(code, "Completed" if code == 0 else "Error")
            if not deleting and _restarts(c, policy, code):
                c.restart()  # started again by _advance once its back-off has passed

    def _start(self, rt: PodRuntime, c: ContainerRun, penv: PodEnv) -> bool:
        assert rt.volumes is not None
        try:
            argv, declared, cwd = penv.launch(c.spec, rt.volumes)
        except ContainerConfigError as e:
            c.waiting_reason, c.waiting_message = e.reason, e.message
            return False
        env = {**self.base_env, **declared}
        log = open(c.log_path, "ab")  # noqa: SIM115 - the child owns it; closed in close()
        rt.log_files.append(log)
        c.mark_started()
        try:
            c.proc = subprocess.Popen(argv, env=env, cwd=cwd or str(self.workdir),
                                      stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            log.write(f"exec {argv[0]!r} failed: {e}\n".encode())
            log.flush()
            c.proc = None
            c.finish(128, "StartError",
                     f'failed to create task: exec: "{argv[0]}": {e.strerror or e}')
            return False
        return True

    def signal(self, rt: PodRuntime, sig: int) -> None:
        for c in rt.containers:
            if c.proc is not None and (c.exit_code is None or sig == signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.proc.pid, sig)

    def stop(self, rt: PodRuntime) -> None:
        """The pod is done: sidecars and any straggler die with it."""
        self.signal(rt, signal.SIGKILL)
        for c in rt.containers:
            if c.proc is not None and c.exit_code is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.proc.wait(timeout=2)
                rc = c.proc.returncode
                code = 137 if rc is None else (128 - rc if rc < 0 else rc)
                c.finish(code, "Completed" if code == 0 else "Error")

    def close(self, rt: PodRuntime) -> None:
        for c in rt.containers:
            if c.proc is not None and c.exit_code is not None:
                c.proc.poll()
        for f in rt.log_files:
            with contextlib.suppress(OSError):
                f.close()
        rt.log_files.clear()


def _restarts(c: ContainerRun, policy: str, code: int) -> bool:
    if c.sidecar:
        return True
    if c.init:
        return code != 0 and policy in ("OnFailure", "Always")
    return policy == "Always" or (policy == "OnFailure" and code != 0)
