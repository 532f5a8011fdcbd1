"""The local control plane: etcd, kube-apiserver, kube-controller-manager (the Job, garbage
collector, namespace and every other default controller), kube-scheduler, the process node
and, when built, Kueue's and JobSet's managers; started as processes of this machine, stopped
and removed by :func:`down`.

    python -m tests.cluster up      # what `make cluster-up` runs: build what is missing, start
    python -m tests.cluster down    # stop every process it started, remove the state

Binaries come from tools/cluster/build.sh (into .cluster/bin); the state (etcd's data, the
certificates, the logs, the pids) lives in .cluster/run; the admin kubeconfig is
.cluster/kubeconfig.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import realnode
from .netns import NetError, node_net
from .pki import make_pki
from .procs import Proc, alive, stop_all
from .realnode import NodeError, RealNode

REPO = Path(__file__).resolve().parents[2]
K8S_VERSION = "v1.36.3"


class ClusterError(RuntimeError):
    """One line that says what failed and how to fix it."""


@dataclass(frozen=True)
class Layout:
    root: Path  # .cluster
    etcd_port: int = 12379  # and the next one, etcd's peer port
    apiserver_port: int = 16443
    node_port: int = 16450
    bin_dir: Path | None = None  # default: $CLUSTER_BIN, else ROOT/bin
    #: "real" (tests/cluster/realnode.py), "process" (tests/cluster/node.py) or "both": the
    #: real node tainted, so that only the pods that tolerate it run there.
    node_kind: str = "both"
    #: Where the real node's image archives are (default: $CLUSTER_IMAGES, else ROOT/images)
    #: and its subnet's N (default: from ROOT), for a second cluster beside the main one.
    images_dir: Path | None = None
    node_slot: int | None = None

    @property
    def bin(self) -> Path:
        return self.bin_dir or Path(os.environ.get("CLUSTER_BIN", self.root / "bin"))

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def pki(self) -> Path:
        return self.run / "pki"

    @property
    def audit_log(self) -> Path:
        return self.run / "audit.log"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def real(self) -> RealNode | None:
        """The real node's layout, when this cluster has one (else the process node)."""
        if self.node_kind not in ("real", "both"):
            return None
        images = self.images_dir or Path(os.environ.get("CLUSTER_IMAGES", self.root / "images"))
        return RealNode(self.run / "real-node", self.bin, self.pki, images,
                        node_net(self.root, self.node_slot), self.apiserver_port,
                        tainted=self.node_kind == "both")

    @property
    def process_node(self) -> bool:
        return self.node_kind in ("process", "both")


def default_layout() -> Layout:
    env = os.environ.get
    return Layout(Path(env("SWEEPER_CLUSTER_DIR", str(REPO / ".cluster"))),
                  int(env("SWEEPER_CLUSTER_ETCD_PORT", "12379")),
                  int(env("SWEEPER_CLUSTER_APISERVER_PORT", "16443")),
                  int(env("SWEEPER_CLUSTER_NODE_PORT", "16450")),
                  node_kind=env("SWEEPER_CLUSTER_NODE", "both"))


# --------------------------------------------------------------------------- commands

def _etcd(lo: Layout) -> list[str]:
    url, peer = f"http://127.0.0.1:{lo.etcd_port}", f"http://127.0.0.1:{lo.etcd_port + 1}"
    return [str(lo.bin / "etcd"), "--name=local", f"--data-dir={lo.run / 'etcd'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}", "--log-level=warn",
            "--unsafe-no-fsync"]  # a throwaway test cluster: speed over durability


def _apiserver(lo: Layout) -> list[str]:
    p = lo.pki
    # With a real node, its kubelet and pods reach the apiserver from their network namespace
    # at this machine's end of the veth pair.
    bind, advertise = ("0.0.0.0", lo.real.net.host_ip) if lo.real else ("127.0.0.1",) * 2
    return [str(lo.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{lo.etcd_port}",
            f"--bind-address={bind}", f"--advertise-address={advertise}",
            f"--secure-port={lo.apiserver_port}", f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}", f"--client-ca-file={p / 'ca.crt'}",
            f"--kubelet-client-certificate={p / 'admin.crt'}",
            f"--kubelet-client-key={p / 'admin.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
            "--allow-privileged=true", "--profiling=false", f"--cert-dir={p}", "--v=1",
            f"--audit-policy-file={_audit_policy(lo)}", f"--audit-log-path={lo.audit_log}",
            "--audit-log-maxsize=200", "--audit-log-maxbackup=1"]


#: What the apiserver's audit log keeps: every request in the test namespace with its body
#: (so a test can read what the CLI sent), Secrets by name only.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [secrets]}]
  - level: Request
    namespaces: [sweeper]
  - level: None
"""


def _audit_policy(lo: Layout) -> Path:
    path = lo.run / "audit-policy.yaml"
    path.write_text(AUDIT_POLICY)
    return path


def _controller_manager(lo: Layout) -> list[str]:
    p = lo.pki
    return [str(lo.bin / "kube-controller-manager"), f"--kubeconfig={lo.kubeconfig}",
            "--leader-elect=false", "--secure-port=0", "--controllers=*",
            f"--service-account-private-key-file={p / 'sa.key'}", f"--root-ca-file={p / 'ca.crt'}",
            "--profiling=false", "--v=1"]


def _scheduler(lo: Layout) -> list[str]:
    return [str(lo.bin / "kube-scheduler"), f"--kubeconfig={lo.kubeconfig}",
            "--leader-elect=false", "--secure-port=0", "--profiling=false", "--v=1"]


def _node(lo: Layout) -> list[str]:
    return [sys.executable, "-m", "tests.cluster.node", f"--kubeconfig={lo.kubeconfig}",
            f"--root={lo.run / 'node'}", f"--workdir={REPO}", f"--port={lo.node_port}",
            f"--cert={lo.pki / 'node.crt'}", f"--key={lo.pki / 'node.key'}"]


# --------------------------------------------------------------------------- readiness

def _wait(what: str, ready: Callable[[], bool], timeout: float, procs: list[Proc]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if not p.running():
                raise ClusterError(f"{p.name} exited while waiting for {what}; its log: "
                                   f"{p.log}\n{p.tail()}")
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what}")


def _https_ok(lo: Layout, path: str) -> bool:
    ctx = ssl.create_default_context(cafile=str(lo.pki / "ca.crt"))
    ctx.load_cert_chain(str(lo.pki / "admin.crt"), str(lo.pki / "admin.key"))
    with urllib.request.urlopen(lo.server + path, context=ctx, timeout=2) as r:
        return r.status == 200 and r.read().strip() == b"ok"


def _etcd_ok(lo: Layout) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{lo.etcd_port}/health", timeout=2) as r:
        return bool(json.loads(r.read()).get("health") == "true")


def node_names(lo: Layout) -> list[str]:
    return [name for name, there in ((realnode.NAME, lo.real), ("process-node", lo.process_node))
            if there]


def _read(lo: Layout, what: str) -> dict[str, Any]:
    from kubernetes import client, config

    api = config.new_client_from_config(str(lo.kubeconfig))
    try:
        core = client.CoreV1Api(api)
        resp = (core.read_node(what, _preload_content=False) if what != "serviceaccount" else
                core.read_namespaced_service_account("default", "default", _preload_content=False))
        return json.loads(resp.data)
    finally:
        api.close()


def _node_ready(lo: Layout) -> bool:
    def ready(name: str) -> bool:
        conds = _read(lo, name).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
    return all(ready(name) for name in node_names(lo))


def _default_sa(lo: Layout) -> bool:
    return bool(_read(lo, "serviceaccount").get("metadata"))


# --------------------------------------------------------------------------- up / down

def _check_ports(lo: Layout) -> None:
    ports = [(lo.etcd_port, "etcd"), (lo.etcd_port + 1, "etcd (peer)"),
             (lo.apiserver_port, "kube-apiserver")]
    if lo.process_node:
        ports.append((lo.node_port, "the process node"))
    for port, who in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                raise ClusterError(
                    f"port {port} ({who}) is already in use: stop what holds it "
                    f"(ss -ltnp 'sport = :{port}'), or run `make cluster-down` if it is an "
                    "earlier cluster of ours") from None


def write_kubeconfig(lo: Layout) -> None:
    import base64

    def b64(name: str) -> str:
        return base64.b64encode((lo.pki / name).read_bytes()).decode()
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sweeper-local",
           "clusters": [{"name": "sweeper-local", "cluster": {
               "server": lo.server, "certificate-authority-data": b64("ca.crt")}}],
           "users": [{"name": "sweeper-admin", "user": {
               "client-certificate-data": b64("admin.crt"), "client-key-data": b64("admin.key")}}],
           "contexts": [{"name": "sweeper-local", "context": {
               "cluster": "sweeper-local", "user": "sweeper-admin", "namespace": "default"}}]}
    tmp = lo.kubeconfig.with_suffix(".tmp")
    tmp.write_text(json.dumps(cfg, indent=1))
    tmp.chmod(0o600)
    tmp.replace(lo.kubeconfig)


def is_up(lo: Layout) -> bool:
    procs = Proc.load_all(lo.run)
    return bool(procs) and all(p.running() for p in procs) and lo.kubeconfig.exists()


def missing_binaries(lo: Layout) -> list[str]:
    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
             *(realnode.BINARIES if lo.real else ()))
    return [n for n in names if not (lo.bin / n).exists()]


def up(lo: Layout, *, build: bool = True, say: Callable[[str], None] = print) -> float:
    """Start the cluster (a no-op when it is up); the seconds it took."""
    start = time.monotonic()
    if is_up(lo):
        if build and lo.real:  # the images of the code as it is now
            _build_images(lo)
            realnode.import_images(lo.real, say)
        return 0.0
    if Proc.load_all(lo.run):  # a part died: start over
        down(lo)
    if build:
        _build(lo)
        if lo.real:
            _build_images(lo)
    _check_ready_to_start(lo)
    lo.run.mkdir(parents=True, exist_ok=True)
    procs: list[Proc] = []
    try:
        if lo.real:
            realnode.netns.create(lo.real.net)
        make_pki(lo.pki, lo.real.net.host_ip if lo.real else None)
        write_kubeconfig(lo)
        _start_all(lo, procs, say)
    except BaseException as e:
        stop_all(procs)
        if lo.real:
            realnode.clean(lo.real)
        shutil.rmtree(lo.run, ignore_errors=True)
        lo.kubeconfig.unlink(missing_ok=True)
        if isinstance(e, (NetError, NodeError)):
            raise ClusterError(str(e)) from None
        raise
    return time.monotonic() - start


def _check_ready_to_start(lo: Layout) -> None:
    """What must be there before anything starts: the binaries, the node's packages, free
    ports (each a one-line ClusterError)."""
    if missing := missing_binaries(lo):
        raise ClusterError(f"{', '.join(missing)} not built in {lo.bin}: run make cluster-up")
    if lo.real and (packages := realnode.missing_packages()):
        raise ClusterError(f"the real node needs Debian's {', '.join(packages)}: apt-get install "
                           f"{' '.join(packages)} (make cluster-up installs them)")
    _check_ports(lo)


def _start_all(lo: Layout, procs: list[Proc], say: Callable[[str], None]) -> None:
    def start(name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        procs.append(Proc.start(name, argv, lo.run, cwd=REPO, env=env))
    start("etcd", _etcd(lo))
    _wait("etcd", lambda: _etcd_ok(lo), 30, procs)
    start("kube-apiserver", _apiserver(lo))
    _wait("kube-apiserver /readyz", lambda: _https_ok(lo, "/readyz"), 60, procs)
    start("kube-controller-manager", _controller_manager(lo))
    start("kube-scheduler", _scheduler(lo))
    if lo.real:
        def wait(what: str, ready: Callable[[], bool], timeout: float) -> None:
            _wait(what, ready, timeout, procs)
        realnode.start(lo.real, lo.kubeconfig, procs, wait, say, REPO)
    if lo.process_node:
        start("process-node", _node(lo), env={"PYTHONPATH": str(REPO)})
    _wait("the nodes to be Ready", lambda: _node_ready(lo), 60, procs)
    _wait("the default service account", lambda: _default_sa(lo), 30, procs)
    from . import jobset, kueue

    for name, addon in (("kueue-manager", kueue), ("jobset-manager", jobset)):
        if (lo.bin / name).exists():
            began = time.monotonic()
            procs.append(addon.start(lo.kubeconfig, lo.bin, lo.run))
            say(f"{procs[-1].name} ready in {time.monotonic() - began:.1f} s (CRDs, manager, "
                "webhooks)")
    say(f"control plane {K8S_VERSION} up: " + ", ".join(p.name for p in procs))


def _build(lo: Layout) -> None:
    script = REPO / "tools" / "cluster" / "build.sh"
    env = {**os.environ, "CLUSTER_BIN": str(lo.bin)}
    if subprocess.run(["bash", str(script)], env=env).returncode != 0:
        raise ClusterError("building the control plane failed (the lines above say why)")


def _build_images(lo: Layout) -> None:
    assert lo.real is not None
    script = REPO / "tools" / "cluster" / "images.sh"
    env = {**os.environ, "CLUSTER_IMAGES": str(lo.real.images)}
    if subprocess.run(["bash", str(script)], env=env, stdout=subprocess.DEVNULL).returncode:
        raise ClusterError("building the node's images failed (the lines above say why)")


def down(lo: Layout) -> list[str]:
    """Stop every process of ours (also after a crash of any of them); remove the state."""
    stopped = stop_all(Proc.load_all(lo.run))
    for line in _stray_processes(lo):  # anything of this cluster the pid files missed
        pid = int(line.split(":", 1)[0])
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            stopped.append(f"pid {pid}")
    pgids = lo.run / "node" / "pgids"
    killed = []
    if pgids.exists():
        for line in pgids.read_text().split():
            if alive(int(line)):
                try:
                    os.killpg(int(line), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    continue
                killed.append(int(line))
                stopped.append(f"pod process group {line}")
    _await_death(killed)
    if lo.real:
        stopped += realnode.clean(lo.real)
    shutil.rmtree(lo.run, ignore_errors=True)
    lo.kubeconfig.unlink(missing_ok=True)
    return stopped


def _await_death(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGKILL is delivered asynchronously: wait (bounded) until the killed pods' group leaders
    are gone, so that down returns with nothing of the cluster left running."""
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def leftovers(lo: Layout) -> list[str]:
    """What of this cluster is still there: processes (see :func:`_stray_processes`) and the
    real node's pods, namespaces and mounts. Empty after :func:`down`."""
    return _stray_processes(lo) + (realnode.leftovers(lo.real) if lo.real else [])


def _stray_processes(lo: Layout) -> list[str]:
    """Processes of ours still running, as ``PID: COMMAND``: any whose command line names this
    cluster's directory (etcd, the apiserver, the controllers, the node, Kueue, JobSet)."""
    found = []
    # The cluster's directory, not its binaries: a second cluster may share those (the image
    # builds, which keep their storage under it too, see it elsewhere: tools/cluster/images.sh).
    root = str(lo.root).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if root in cmdline and alive(int(entry.name)):
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {command[:120]}")
    return found
