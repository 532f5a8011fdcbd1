"""The real node: containerd and runc, the kubelet, kube-proxy, CoreDNS and the bridge CNI,
running the images built locally from the project's Dockerfile (tools/cluster/images.sh). The
one emulated part is the GPU: a device plugin of ours (tools/cluster/k8s/fakegpu) advertises
``nvidia.com/gpu``.

A node's paths, network and cgroups are machine-wide, so each cluster's node runs in
namespaces of its own and :func:`clean` removes them:

- a network namespace (tests/cluster/netns.py): the bridge, the pods' veths, kube-proxy's
  iptables chains and conntrack;
- a mount namespace, kept by a bind mount of its file in ``run/real-node/mnt``, where the
  kubelet's fixed paths (/var/lib/kubelet, whose device-plugin socket the kubelet does not move
  with ``--root-dir``, /var/log/containers, CNI's cache in /var/lib/cni) and /run/netns, where
  containerd keeps the pods' network namespaces, are the cluster's own directories, and where
  every volume, rootfs and pod network namespace is mounted: they go when the namespace goes;
- a cgroup root ``/sweeper-<id>`` in every cgroup v1 hierarchy (the kubelet's ``cgroupRoot``).

This machine has cgroup v1 and no systemd: ``failCgroupV1: false``, ``cgroupfs``; it lacks
``CAP_SYS_RESOURCE``, so containerd's CRI says ``restrict_oom_score_adj``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import netns
from .netns import NodeNet
from .procs import Proc, alive

NAME = "sweeper-node"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
CLUSTER_DNS = "10.96.0.10"
CNI_BIN = Path("/usr/lib/cni")
CGROUP_FS = Path("/sys/fs/cgroup")
SOCKETS = Path("/run/sweeper-cluster")
#: Debian's packages the node needs, by the command that shows each is there.
PACKAGES = {"containerd": "containerd", "runc": "runc", "ctr": "containerd",
            "iptables": "iptables", "nsenter": "util-linux", "ip": "iproute2",
            "conntrack": "conntrack"}
BINARIES = ("kubelet", "kube-proxy", "coredns", "fakegpu")
KUBELET_ROOT = Path("/var/lib/kubelet")
#: The machine's paths the node's mount namespace puts the cluster's directories on.
BIND = {"kubelet": KUBELET_ROOT, "container-logs": Path("/var/log/containers"),
        "cni-cache": Path("/var/lib/cni"), "netns": Path("/run/netns")}


class NodeError(RuntimeError):
    """One line that says what failed and how to fix it."""


@dataclass(frozen=True)
class RealNode:
    """Where one cluster's node keeps its state, and its network."""

    run: Path  # the cluster's run/node
    bin: Path
    pki: Path
    images: Path  # the image archives tools/cluster/images.sh writes
    net: NodeNet
    apiserver_port: int
    gpus: int = 4

    @property
    def cgroup(self) -> str:
        return f"/sweeper-{self.net.name}"

    @property
    def mount_ns(self) -> Path:
        return self.run / "mnt" / "ns"

    def enter(self) -> list[str]:
        """The argv prefix that runs a command in the node's namespaces."""
        return ["nsenter", f"--mount={self.mount_ns}", f"--net={self.net.path}", "--"]

    @property
    def containerd_sock(self) -> Path:
        return containerd_socket(self.net)

    @property
    def kubelet_root(self) -> Path:
        return self.run / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.run / "pod-logs"

    @property
    def server(self) -> str:
        return f"https://{self.net.host_ip}:{self.apiserver_port}"


def containerd_socket(net: NodeNet) -> Path:
    """Where the node's containerd listens: a short path of its own (a unix socket's path has
    at most 108 bytes, and a cluster directory under pytest's tmp_path is longer)."""
    return SOCKETS / net.name / "containerd.sock"


def missing_packages() -> list[str]:
    missing = {pkg for cmd, pkg in PACKAGES.items() if shutil.which(cmd) is None}
    if not (CNI_BIN / "bridge").exists():
        missing.add("containernetworking-plugins")
    return sorted(missing)


# --------------------------------------------------------------------------- configuration

def _kubeconfig(node: RealNode, user: str) -> Path:
    import base64

    def b64(name: str) -> str:
        return base64.b64encode((node.pki / name).read_bytes()).decode()
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "local",
           "clusters": [{"name": "local", "cluster": {
               "server": node.server, "certificate-authority-data": b64("ca.crt")}}],
           "users": [{"name": user, "user": {"client-certificate-data": b64(f"{user}.crt"),
                                             "client-key-data": b64(f"{user}.key")}}],
           "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}]}
    path = node.run / f"{user}.kubeconfig"
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    return path


def containerd_config(node: RealNode) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{node.run / 'containerd'}"
state = "{node.run / 'containerd-state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.grpc.v1.introspection.tracing"]
[grpc]
  address = "{node.containerd_sock}"
[ttrpc]
  address = "{node.containerd_sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{node.run / 'containerd-opt'}"
[{cri}]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  discard_unpacked_layers = false
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{node.run / 'cni'}"
  max_conf_num = 1
"""


def cni_config(node: RealNode) -> dict[str, object]:
    return {"cniVersion": "0.4.0", "name": node.net.name, "plugins": [
        {"type": "bridge", "bridge": netns.BRIDGE, "isGateway": True, "ipMasq": True,
         "hairpinMode": True, "ipam": {
             "type": "host-local", "ranges": [[{"subnet": netns.POD_CIDR}]],
             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(node.run / "cni-ipam")}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]}


def kubelet_config(node: RealNode) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.net.node_ip, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(node.pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": node.cgroup, "failCgroupV1": False,
        "failSwapOn": False, "clusterDNS": [CLUSTER_DNS], "clusterDomain": "cluster.local",
        "containerRuntimeEndpoint": f"unix://{node.containerd_sock}",
        "podLogsDir": str(node.pod_logs), "resolvConf": str(node.run / "resolv.conf"),
        # Images cannot be pulled again (no registry): the image GC never removes one.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        # A busy shared disk must not evict the suite's pods.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False, "maxPods": 110,
        "nodeStatusUpdateFrequency": "4s", "syncFrequency": "10s",
    }


def kube_proxy_config(node: RealNode, kubeconfig: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "hostnameOverride": NAME,
        "bindAddress": node.net.node_ip, "clusterCIDR": netns.POD_CIDR, "mode": "iptables",
        # conntrack's table size is not settable in a network namespace: leave it as it is.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "127.0.0.1:10256",
    }


COREFILE = """.:53 {{
    errors
    ready 127.0.0.1:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 30
}}
"""

#: CoreDNS's identity and the kube-dns Service; its endpoint is the node's address, where the
#: CoreDNS process listens (kube-proxy routes the Service's ClusterIP there).
DNS_OBJECTS = """apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: "system:coredns"}}
rules:
  - apiGroups: [""]
    resources: [endpoints, services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: "system:coredns"}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {{k8s-app: kube-dns, kubernetes.io/name: CoreDNS}}
spec:
  clusterIP: {dns}
  ports:
    - {{name: dns, port: 53, protocol: UDP, targetPort: 53}}
    - {{name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {{kubernetes.io/service-name: kube-dns,
           endpointslice.kubernetes.io/managed-by: sweeper.dev-local-cluster}}
addressType: IPv4
endpoints: [{{addresses: ["{node_ip}"], conditions: {{ready: true}}, nodeName: {node}}}]
ports:
  - {{name: dns, port: 53, protocol: UDP}}
  - {{name: dns-tcp, port: 53, protocol: TCP}}
"""


def write_configs(node: RealNode) -> dict[str, Path]:
    """Every file the node's processes read; their paths by name."""
    import yaml

    r = node.run
    for d in (r / "cni", node.kubelet_root, node.pod_logs):
        d.mkdir(parents=True, exist_ok=True)
    (r / "containerd.toml").write_text(containerd_config(node))
    (r / "cni" / "10-sweeper.conflist").write_text(json.dumps(cni_config(node)))
    (r / "resolv.conf").write_text(f"nameserver {CLUSTER_DNS}\n")
    (r / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(node)))
    proxy_kc = _kubeconfig(node, "kube-proxy")
    (r / "kube-proxy.yaml").write_text(yaml.safe_dump(kube_proxy_config(node, proxy_kc)))
    (r / "Corefile").write_text(COREFILE.format(kubeconfig=_kubeconfig(node, "coredns")))
    return {"kubelet-kubeconfig": _kubeconfig(node, "kubelet")}


# --------------------------------------------------------------------------- commands

def _containerd(node: RealNode) -> list[str]:
    return [*node.enter(), "containerd", f"--config={node.run / 'containerd.toml'}",
            "--log-level=warn"]


def _kubelet(node: RealNode, kubeconfig: Path) -> list[str]:
    return [*node.enter(), str(node.bin / "kubelet"), f"--config={node.run / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig}", f"--root-dir={KUBELET_ROOT}",
            f"--cert-dir={KUBELET_ROOT / 'pki'}", f"--hostname-override={NAME}",
            f"--node-ip={node.net.node_ip}", "--v=1"]


def _kube_proxy(node: RealNode) -> list[str]:
    return [*node.enter(), str(node.bin / "kube-proxy"),
            f"--config={node.run / 'kube-proxy.yaml'}", "--v=1"]


def _coredns(node: RealNode) -> list[str]:
    return [*node.enter(), str(node.bin / "coredns"), "-conf", str(node.run / "Corefile")]


def _fakegpu(node: RealNode) -> list[str]:
    return [*node.enter(), str(node.bin / "fakegpu"), f"--dir={KUBELET_ROOT / 'device-plugins'}",
            f"--count={node.gpus}"]


# --------------------------------------------------------------------------- checks

def dns_answers(server: str, name: str, timeout: float = 1.0) -> list[str]:
    """The A records ``server`` (port 53, UDP) gives for ``name``."""
    query = struct.pack(">HHHHHH", 0x5377, 0x0100, 1, 0, 0, 0) + b"".join(
        bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(query, (server, 53))
        data = s.recv(4096)
    count, pos, out = struct.unpack(">H", data[6:8])[0], len(query), []
    for _ in range(count):
        pos += 2 if data[pos] & 0xC0 == 0xC0 else data.index(b"\0", pos) + 1 - pos
        rtype, _cls, _ttl, size = struct.unpack(">HHIH", data[pos:pos + 10])
        if rtype == 1:
            out.append(socket.inet_ntoa(data[pos + 10:pos + 14]))
        pos += 10 + size
    return out


def _ctr(node: RealNode, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", f"--address={node.containerd_sock}", "-n", "k8s.io", *args],
                          capture_output=True, text=True, timeout=timeout)


#: The archives of tools/cluster/images.sh the pods run (the base is only built on).
IMAGES = ("pause", "trial-runner", "test-runner", "postgres", "dashboard", "katib-mnist")


def import_images(node: RealNode, say: Callable[[str], None]) -> int:
    """Import into the node's containerd each image archive that changed since it was last
    imported (by the stamp images.sh writes beside it); how many were imported."""
    record = node.run / "imported.json"
    done: dict[str, str] = json.loads(record.read_text()) if record.exists() else {}
    began, count = time.monotonic(), 0
    for name in IMAGES:
        archive, stamp = node.images / f"{name}.tar", node.images / f".{name}.stamp"
        if not archive.exists():
            raise NodeError(f"no image archive {archive}: run make cluster-images")
        built = stamp.read_text().strip() if stamp.exists() else str(archive.stat().st_mtime)
        if done.get(name) == built:
            continue
        out = _ctr(node, "images", "import", str(archive))
        if out.returncode != 0:
            raise NodeError(f"importing {archive.name} into containerd failed: "
                            f"{out.stderr.strip()[-300:]}")
        done[name] = built
        count += 1
        record.write_text(json.dumps(done))
    if count:
        say(f"{count} images imported in {time.monotonic() - began:.1f} s")
    return count


# --------------------------------------------------------------------------- up / clean

def make_cgroups(node: RealNode) -> None:
    for hierarchy in _hierarchies():
        (hierarchy / node.cgroup.lstrip("/")).mkdir(exist_ok=True)


def _sh(argv: list[str], what: str) -> None:
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise NodeError(f"{what} failed: {out.stderr.strip()}")


def make_mount_ns(node: RealNode) -> None:
    """The node's mount namespace (private: nothing mounted in it shows on this machine, and
    the reverse), with the cluster's directories on the node's fixed paths."""
    holder = node.mount_ns.parent
    holder.mkdir(parents=True, exist_ok=True)
    _sh(["mount", "--bind", str(holder), str(holder)], "bind-mounting the namespace holder")
    _sh(["mount", "--make-private", str(holder)], "making the namespace holder private")
    node.mount_ns.touch()
    binds = []
    for name, target in BIND.items():
        target.mkdir(parents=True, exist_ok=True)
        (node.run / name).mkdir(parents=True, exist_ok=True)
        binds.append(f"mount --bind '{node.run / name}' '{target}'")
    script = " && ".join(["mount --make-rshared /", *binds])
    _sh(["unshare", f"--mount={node.mount_ns}", "--propagation", "private", "sh", "-c", script],
        "making the node's mount namespace")


def _drop_mount_ns(node: RealNode) -> bool:
    holder = node.mount_ns.parent
    mounted = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    found = False
    for path in (node.mount_ns, holder):
        if str(path.resolve()) in mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
            found = True
    return found


def _hierarchies() -> list[Path]:
    return [p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()
            and (p / "cgroup.procs").exists()]


def start(node: RealNode, admin: Path, procs: list[Proc], wait: Callable[..., None],
          say: Callable[[str], None], cwd: Path) -> None:
    """Start the node's processes in order, each once the one before is ready (``admin``: the
    cluster's admin kubeconfig). ``wait(what, ready, timeout)`` raises if a process dies or
    time runs out."""
    def launch(name: str, argv: list[str]) -> None:
        exe = argv[len(node.enter())]
        procs.append(Proc.start(name, argv, node.run.parent, cwd=cwd, exe=exe))

    began = time.monotonic()
    node.containerd_sock.parent.mkdir(parents=True, exist_ok=True)
    files = write_configs(node)
    apply_dns_objects(node, admin)
    make_cgroups(node)
    make_mount_ns(node)
    launch("containerd", _containerd(node))
    wait("containerd's socket", lambda: _ctr(node, "version", timeout=5).returncode == 0, 30)
    import_images(node, say)
    launch("kubelet", _kubelet(node, files["kubelet-kubeconfig"]))
    launch("kube-proxy", _kube_proxy(node))
    launch("coredns", _coredns(node))
    launch("fakegpu", _fakegpu(node))
    wait("CoreDNS to answer", lambda: bool(dns_answers(
        node.net.node_ip, "kubernetes.default.svc.cluster.local")), 60)
    say(f"node {NAME} started in {time.monotonic() - began:.1f} s (containerd, kubelet, "
        "kube-proxy, CoreDNS, the fake GPU plugin)")


def apply_dns_objects(node: RealNode, kubeconfig: Path) -> None:
    from .addon import kubectl

    path = node.run / "dns.yaml"
    path.write_text(DNS_OBJECTS.format(dns=CLUSTER_DNS, node_ip=node.net.node_ip, node=NAME))
    kubectl("coredns", kubeconfig, "apply", "-f", str(path), what="applying kube-dns")


def pod_pids(node: RealNode) -> list[int]:
    """Every process in the node's cgroup root (the pods' containers and sandboxes)."""
    pids: set[int] = set()
    for hierarchy in _hierarchies():
        root = hierarchy / node.cgroup.lstrip("/")
        if root.is_dir():
            for procs in root.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids.update(int(x) for x in procs.read_text().split())
    return sorted(p for p in pids if alive(p))


def shim_pids(node: RealNode) -> list[int]:
    """containerd's shims of this node (each outlives containerd, by design): the processes
    whose command line names its socket."""
    sock, found = str(node.containerd_sock).encode(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if sock in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
    return found


def _kill_pods(node: RealNode) -> int:
    """SIGKILL every pod process and the shims; how many pod processes there were."""
    count = len(pod_pids(node))
    deadline = time.monotonic() + 15
    while (pids := pod_pids(node) + shim_pids(node)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return count


def _unmount_under(path: Path) -> int:
    """Unmount everything mounted under ``path``, deepest first; how many."""
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    mine = sorted({m for m in mounts if m.startswith(prefix)}, key=len, reverse=True)
    for m in mine:
        subprocess.run(["umount", "-l", m], capture_output=True)
    return len(mine)


def _remove_cgroups(node: RealNode) -> None:
    for hierarchy in _hierarchies():
        root = hierarchy / node.cgroup.lstrip("/")
        if root.is_dir():
            below = sorted((p for p in root.rglob("*") if p.is_dir()),
                           key=lambda p: len(p.parts), reverse=True)
            for d in [*below, root]:
                with contextlib.suppress(OSError):
                    d.rmdir()


def clean(node: RealNode) -> list[str]:
    """Remove what the node made outside its processes (after they are stopped): the pods'
    processes, its namespaces (and with them every mount, pod network and iptables chain of
    the node), its cgroups; what was found."""
    found = []
    if pods := _kill_pods(node):
        found.append(f"{pods} pod processes")
    if _drop_mount_ns(node):
        found.append("mount namespace")
    if node.run.exists() and (n := _unmount_under(node.run)):
        found.append(f"{n} mounts")
    if netns.delete(node.net):
        found.append(f"network namespace {node.net.name}")
    _remove_cgroups(node)
    shutil.rmtree(node.containerd_sock.parent, ignore_errors=True)
    return found


def leftovers(node: RealNode) -> list[str]:
    """Pod processes, mounts and the namespace still there (empty after :func:`clean`)."""
    out = [f"{pid}: pod process" for pid in pod_pids(node)]
    out += [f"{pid}: containerd shim" for pid in shim_pids(node)]
    if netns.exists(node.net):
        out.append(f"network namespace {node.net.name}")
    prefix = str(node.run.resolve()) + "/"
    out += [f"mount {line.split()[4]}" for line in
            Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefix)]
    return out

