"""The local cluster: etcd, kube-apiserver, kube-controller-manager (the Job, garbage
collector, namespace and every other default controller), kube-scheduler, the node
(tests/cluster/realnode.py: containerd, the kubelet, kube-proxy, CoreDNS) and, when built,
Kueue's and JobSet's managers; started as processes of this machine, stopped and removed by
:func:`down`.

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
    bin_dir: Path | None = None  # default: $CLUSTER_BIN, else ROOT/bin
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
    def real(self) -> RealNode:
        """The node's layout."""
        images = self.images_dir or Path(os.environ.get("CLUSTER_IMAGES", self.root / "images"))
        return RealNode(self.run / "real-node", self.bin, self.pki, images,
                        node_net(self.root, self.node_slot), self.apiserver_port)


def default_layout() -> Layout:
    env = os.environ.get
    return Layout(Path(env("SWEEPER_CLUSTER_DIR", str(REPO / ".cluster"))),
                  int(env("SWEEPER_CLUSTER_ETCD_PORT", "12379")),
                  int(env("SWEEPER_CLUSTER_APISERVER_PORT", "16443")))


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
    # The kubelet and the pods reach the apiserver from the node's network namespace, at this
    # machine's end of the veth pair.
    return [str(lo.bin / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{lo.etcd_port}",
            "--bind-address=0.0.0.0", f"--advertise-address={lo.real.net.host_ip}",
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
    conds = _read(lo, realnode.NAME).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def _default_sa(lo: Layout) -> bool:
    return bool(_read(lo, "serviceaccount").get("metadata"))


# --------------------------------------------------------------------------- up / down

def _check_ports(lo: Layout) -> None:
    ports = [(lo.etcd_port, "etcd"), (lo.etcd_port + 1, "etcd (peer)"),
             (lo.apiserver_port, "kube-apiserver")]
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
             *realnode.BINARIES)
    return [n for n in names if not (lo.bin / n).exists()]


def up(lo: Layout, *, build: bool = True, say: Callable[[str], None] = print) -> float:
    """Start the cluster (a no-op when it is up); the seconds it took."""
    start = time.monotonic()
    if is_up(lo):
        if build:  # the images of the code as it is now
            _build_images(lo)
            realnode.import_images(lo.real, say)
        return 0.0
    if Proc.load_all(lo.run):  # a part died: start over
        down(lo)
    if build:
        _build(lo)
        _build_images(lo)
    _check_ready_to_start(lo)
    lo.run.mkdir(parents=True, exist_ok=True)
    procs: list[Proc] = []
    try:
        realnode.netns.create(lo.real.net)
        make_pki(lo.pki, lo.real.net.host_ip)
        write_kubeconfig(lo)
        _start_all(lo, procs, say)
    except BaseException as e:
        stop_all(procs)
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
    if packages := realnode.missing_packages():
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
    def wait(what: str, ready: Callable[[], bool], timeout: float) -> None:
        _wait(what, ready, timeout, procs)
    realnode.start(lo.real, lo.kubeconfig, procs, wait, say, REPO)
    _wait("the node to be Ready", lambda: _node_ready(lo), 60, procs)
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
    stopped += realnode.clean(lo.real)
    shutil.rmtree(lo.run, ignore_errors=True)
    lo.kubeconfig.unlink(missing_ok=True)
    return stopped


def leftovers(lo: Layout) -> list[str]:
    """What of this cluster is still there: processes (see :func:`_stray_processes`) and the
    real node's pods, namespaces and mounts. Empty after :func:`down`."""
    return _stray_processes(lo) + realnode.leftovers(lo.real)


def _stray_processes(lo: Layout) -> list[str]:
    """Processes of ours still running, as ``PID: COMMAND``: any whose command line names this
    cluster's state directory or kubeconfig (etcd, the apiserver, the controllers, the node,
    Kueue, JobSet)."""
    found = []
    # The cluster's state and kubeconfig, not its directory: a second cluster may run this
    # one's binaries (CLUSTER_BIN=.cluster/bin of the first), and the image builds keep their
    # storage under it too (they see it elsewhere: tools/cluster/images.sh).
    marks = (f"{lo.run}/".encode(), str(lo.kubeconfig).encode())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(mark in cmdline for mark in marks) and alive(int(entry.name)):
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {command[:120]}")
    return found
