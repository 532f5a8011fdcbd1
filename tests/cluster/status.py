"""A container's state and the pod status the kubelet would report for it: phase, container
statuses (``state.terminated.exitCode`` and reason, which the Job controller's
``podFailurePolicy`` reads), conditions and QoS class. Pure, apart from the clock."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .podenv import NODE_IP

Obj = dict[str, Any]
_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
               "PodScheduled")


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRun:
    name: str
    spec: Obj
    init: bool
    sidecar: bool
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    restart_at: float = 0.0  # monotonic: the crash back-off ends
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    term_reason: str | None = None
    term_message: str | None = None
    restart_count: int = 0
    waiting_reason: str | None = "ContainerCreating"
    waiting_message: str | None = None
    last_state: Obj = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.exit_code is None

    @property
    def terminated(self) -> bool:
        return self.exit_code is not None

    def mark_started(self) -> None:
        self.started_at = now_rfc3339()
        self.waiting_reason = self.waiting_message = None

    def finish(self, code: int, reason: str, message: str | None = None) -> None:
        self.exit_code, self.term_reason, self.term_message = code, reason, message
        self.finished_at = now_rfc3339()

    def startable(self) -> bool:
        return self.proc is None and self.exit_code is None and time.monotonic() >= self.restart_at

    def restart(self) -> None:
        """The kubelet's crash back-off: 10 s, doubling, at most 5 minutes."""
        self.last_state = {"terminated": terminated(self)}
        self.restart_count += 1
        self.restart_at = time.monotonic() + min(10.0 * 2 ** (self.restart_count - 1), 300.0)
        self.waiting_reason = "CrashLoopBackOff"
        self.waiting_message = f"back-off restarting failed container {self.name}"
        self.proc = None
        self.exit_code = None


def container_id(c: ContainerRun) -> str | None:
    return f"process://{c.proc.pid}" if c.proc is not None else None


def terminated(c: ContainerRun) -> Obj:
    t: Obj = {"exitCode": c.exit_code, "reason": c.term_reason}
    if c.term_message:
        t["message"] = c.term_message
    if c.started_at:
        t["startedAt"] = c.started_at
    t["finishedAt"] = c.finished_at
    if (cid := container_id(c)) is not None:
        t["containerID"] = cid
    return t


def container_status(c: ContainerRun) -> Obj:
    if c.exit_code is not None:
        state: Obj = {"terminated": terminated(c)}
    elif c.proc is not None:
        state = {"running": {"startedAt": c.started_at}}
    else:
        w: Obj = {"reason": c.waiting_reason or "PodInitializing"}
        if c.waiting_message:
            w["message"] = c.waiting_message
        state = {"waiting": w}
    out: Obj = {"name": c.name, "state": state, "lastState": c.last_state, "ready": c.running,
                "restartCount": c.restart_count, "image": c.spec.get("image", ""),
                "imageID": "", "started": c.running}
    if (cid := container_id(c)) is not None:
        out["containerID"] = cid
    return out


def phase_of(pod: Obj, containers: list[ContainerRun], deleting: bool) -> str:
    inits = [c for c in containers if c.init]
    mains = [c for c in containers if not c.init]
    policy = pod["spec"].get("restartPolicy", "Always")
    init_failed = policy == "Never" and any(
        c.terminated and c.exit_code != 0 and not c.sidecar for c in inits)
    all_done = bool(mains) and all(c.terminated for c in mains)
    all_ok = all_done and all(c.exit_code == 0 for c in mains)
    if init_failed:
        return "Failed"
    if deleting and not any(c.running for c in containers):
        return "Succeeded" if all_ok else "Failed"
    if all_done and policy != "Always":
        return "Succeeded" if all_ok else "Failed"
    if any(c.proc is not None for c in mains):
        return "Running"
    return "Pending"


def pod_status(pod: Obj, containers: list[ContainerRun], sandbox: bool, deleting: bool) -> Obj:
    """The status to write: the pod's current status with the node's fields replaced."""
    status: Obj = dict(pod.get("status") or {})
    phase = phase_of(pod, containers, deleting)
    inits = [c for c in containers if c.init]
    status["phase"] = phase
    status["hostIP"] = NODE_IP
    status["hostIPs"] = [{"ip": NODE_IP}]
    if sandbox:
        status["podIP"] = NODE_IP
        status["podIPs"] = [{"ip": NODE_IP}]
    status.setdefault("startTime", now_rfc3339())
    if inits:
        status["initContainerStatuses"] = [container_status(c) for c in inits]
    status["containerStatuses"] = [container_status(c) for c in containers if not c.init]
    status["qosClass"] = qos_class(pod["spec"])
    status["conditions"] = _conditions(status.get("conditions") or [], containers, sandbox,
                                       phase in ("Succeeded", "Failed"))
    return status


def _conditions(current: list[Obj], containers: list[ContainerRun], sandbox: bool,
                terminal: bool) -> list[Obj]:
    conds = [dict(c) for c in current]
    inits = [c for c in containers if c.init]
    mains = [c for c in containers if not c.init]
    initialized = all((c.terminated and c.exit_code == 0) or (c.sidecar and c.proc is not None)
                      for c in inits)
    ready = not terminal and bool(mains) and all(c.running for c in mains)
    not_ready = "PodCompleted" if terminal else "ContainersNotReady"
    set_condition(conds, "PodReadyToStartContainers", sandbox and not terminal)
    set_condition(conds, "Initialized", initialized or terminal)
    set_condition(conds, "Ready", ready, None if ready else not_ready)
    set_condition(conds, "ContainersReady", ready, None if ready else not_ready)
    set_condition(conds, "PodScheduled", True)
    order = {t: i for i, t in enumerate(_CONDITIONS)}
    return sorted(conds, key=lambda c: order.get(c["type"], -1))


def set_condition(conds: list[Obj], ctype: str, ok: bool, reason: str | None = None) -> None:
    status = "True" if ok else "False"
    for c in conds:
        if c["type"] == ctype:
            if c["status"] != status:
                c["status"] = status
                c["lastTransitionTime"] = now_rfc3339()
            if reason:
                c["reason"] = reason
            else:
                c.pop("reason", None)
            return
    new: Obj = {"type": ctype, "status": status, "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339()}
    if reason:
        new["reason"] = reason
    conds.append(new)


def qos_class(spec: Obj) -> str:
    any_set, guaranteed = False, True
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        lim, req = res.get("limits") or {}, res.get("requests") or {}
        any_set = any_set or bool(lim or req)
        if not lim.get("cpu") or not lim.get("memory"):
            guaranteed = False
        if any(k in ("cpu", "memory") and str(lim.get(k)) != str(v) for k, v in req.items()):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
