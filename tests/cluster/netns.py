"""The real node's network: a network namespace of its own, joined to this machine by a veth
pair. Everything the node makes in the network (the pods' bridge, their veths, kube-proxy's
iptables chains, conntrack entries) lives in that namespace, so two local clusters on one
machine (a development cluster and a CI rehearsal in a clone) never see each other's, and
``cluster-down`` removes all of it by deleting the namespace.

The addresses come from the cluster directory: ``10.250.N.1`` on this machine's side (where
the apiserver and the test PostgreSQL are reached from the node and its pods), ``10.250.N.2``
the node's own address. Inside the namespace the pods' subnet is the same in every cluster:
their traffic leaves it masqueraded as the node's address.
"""

from __future__ import annotations

import hashlib
import ipaddress
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The pods' subnet inside the node's namespace, and the bridge the CNI plugin makes there.
POD_CIDR = "10.244.0.0/24"
BRIDGE = "cni0"


class NetError(RuntimeError):
    """A network step failed: one line that says which."""


@dataclass(frozen=True)
class NodeNet:
    """The node's namespace, its veth pair and their addresses."""

    name: str  # the namespace (``ip netns``), also the prefix of the veth names
    slot: int  # N of 10.250.N.0/24

    @property
    def host_ip(self) -> str:
        return f"10.250.{self.slot}.1"

    @property
    def node_ip(self) -> str:
        return f"10.250.{self.slot}.2"

    @property
    def host_if(self) -> str:
        return f"{self.name[:11]}h"

    @property
    def node_if(self) -> str:
        return f"{self.name[:11]}n"

    @property
    def path(self) -> str:
        return f"/run/netns/{self.name}"

    def enter(self) -> list[str]:
        """The argv prefix that runs a command in the namespace (nsenter execs it, so the pid
        is the command's own)."""
        return ["nsenter", f"--net={self.path}", "--"]


def node_net(root: Path, slot: int | None = None) -> NodeNet:
    """The node's network of the cluster in ``root``: named after it, in the subnet ``slot``
    (default: one picked by the same hash)."""
    digest = hashlib.sha256(str(root.resolve()).encode()).digest()
    return NodeNet(f"swp{digest[:4].hex()}", slot if slot is not None else 1 + digest[4] % 250)


def _ip(*args: str, ns: NodeNet | None = None, check: bool = True) -> str:
    argv = (ns.enter() if ns else []) + ["ip", *args]
    out = subprocess.run(argv, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise NetError(f"`{' '.join(argv)}` failed: {out.stderr.strip()}")
    return out.stdout


def exists(net: NodeNet) -> bool:
    return Path(net.path).exists()


def _address_taken(net: NodeNet) -> str | None:
    """The interface of this machine that already holds the node's subnet, if any."""
    mine = ipaddress.ip_network(f"{net.host_ip}/24", strict=False)
    for line in _ip("-o", "-4", "addr", "show").splitlines():
        fields = line.split()
        addr = ipaddress.ip_interface(fields[3])
        if addr.network.overlaps(mine) and fields[1] != net.host_if:
            return fields[1]
    return None


def create(net: NodeNet) -> None:
    """Make the namespace and the veth pair, address both ends, route the node's traffic to
    this machine, and turn on what kube-proxy and the bridge need in the namespace."""
    if other := _address_taken(net):
        raise NetError(f"{net.host_ip}/24 is already on interface {other}: another local "
                       "cluster's node has the same subnet; stop it (make cluster-down in its "
                       "directory) or set SWEEPER_CLUSTER_DIR elsewhere")
    _ip("netns", "add", net.name)
    _ip("link", "add", net.host_if, "type", "veth", "peer", "name", net.node_if)
    _ip("link", "set", net.node_if, "netns", net.name)
    _ip("addr", "add", f"{net.host_ip}/24", "dev", net.host_if)
    _ip("link", "set", net.host_if, "up")
    _ip("link", "set", "lo", "up", ns=net)
    _ip("addr", "add", f"{net.node_ip}/24", "dev", net.node_if, ns=net)
    _ip("link", "set", net.node_if, "up", ns=net)
    _ip("route", "add", "default", "via", net.host_ip, ns=net)
    for key in ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables",
                "net.ipv4.conf.all.route_localnet"):
        out = subprocess.run([*net.enter(), "sysctl", "-qw", f"{key}=1"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise NetError(f"sysctl {key}=1 in the node's namespace failed: {out.stderr.strip()}")


def delete(net: NodeNet) -> bool:
    """Remove the namespace (and with it the bridge, the pods' veths, the iptables chains) and
    this machine's end of the veth pair; whether there was anything to remove."""
    found = exists(net)
    if found:
        _ip("netns", "delete", net.name, check=False)
    if _ip("link", "show", net.host_if, check=False).strip():
        _ip("link", "delete", net.host_if, check=False)
        found = True
    return found
