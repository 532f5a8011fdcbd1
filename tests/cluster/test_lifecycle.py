"""The local cluster's own promises, on a second cluster beside the session's (other ports,
its own directory, its own real node: network and mount namespaces, cgroup root, subnet):
`up` twice is harmless; the two clusters' nodes do not see each other's pods; a crash of any
part is cleaned up by `down`, which leaves no process, namespace, mount or cgroup of ours
behind (pods included); a new cluster resumes the same study; and a busy port, a missing Go
toolchain or a failed build is one clear line with nothing left running."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.cluster.control_plane import (
    REPO,
    ClusterError,
    Layout,
    default_layout,
    down,
    is_up,
    leftovers,
    up,
)
from tests.cluster.procs import Proc, alive
from tests.cluster.realnode import pod_pids
from tests.conftest import real_node_target
from tests.support.k8s_cluster import TEST_IMAGE, prepare_namespace, real_cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SPEC = """
name: lifecycle
method: grid
objective: {metric: loss, direction: minimize}
parallelism: 2
trial:
  entrypoint: tests.support.k8s_objectives:slow
  code: null  # the image holds it (and the spec's directory holds a cluster)
  fixed: {delay: 4}
  retries: 2
parameters:
  x: {type: int, values: [0, 1, 2, 3]}
"""


def _layout(tmp_path: Path, offset: int) -> Layout:
    """A cluster beside the session's one: its own directory, ports and subnet, the same
    binaries and images."""
    main = default_layout()
    return Layout(tmp_path / "cluster", main.etcd_port + offset, main.apiserver_port + offset,
                  bin_dir=main.bin, images_dir=main.real.images,
                  node_slot=251 if main.real.net.slot != 251 else 252)


@pytest.fixture
def second(tmp_path: Path) -> Iterator[Layout]:
    lo = _layout(tmp_path, 10000)
    try:
        yield lo
    finally:
        down(lo)


def _wait(what: str, done: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_crash_is_cleaned_up_and_a_new_cluster_resumes_the_study(
        second: Layout, pg_url: str, tmp_path: Path) -> None:
    up(second, build=False)
    assert up(second, build=False) == 0.0  # twice is harmless: it is up already
    prepare_namespace(second.kubeconfig)
    node, real = real_node_target(second), second.real
    with real_cluster(pg_url, tmp_path, second.kubeconfig, TEST_IMAGE, second.root,
                      pod_pg=node.pod_pg) as cluster:
        spec = cluster.spec(SPEC)
        started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
        assert started.exit_code == 0, started.output

        def states() -> list[TrialState]:
            return [t.state for ts in cluster.trials("lifecycle").values() for t in ts]
        _wait("a running trial", lambda: TrialState.RUNNING in states())

        _wait("the pods' processes", lambda: bool(pod_pids(real)), 30)
        pods = pod_pids(real)
        main = default_layout()
        if main.real is not None:  # the session's node holds none of them, and the reverse
            assert not set(pods) & set(pod_pids(main.real))
        cluster.names.clear()  # the Job must not be deleted: the crash ends this cluster

    # A crash: the kubelet, containerd and the apiserver die without a word; the pods'
    # containers run on under their shims.
    procs = {p.name: p for p in Proc.load_all(second.run)}
    for name in ("kubelet", "containerd", "kube-apiserver"):
        os.kill(procs[name].pid, signal.SIGKILL)
    _wait("the crash", lambda: not is_up(second), 10)

    stopped = down(second)
    assert {"etcd", "kube-controller-manager", "kube-scheduler"} <= set(stopped)
    if (second.bin / "jobset-manager").exists():
        assert {"kueue", "jobset"} <= set(stopped)
    assert leftovers(second) == []
    assert not any(alive(p) for p in pods), "a pod's processes outlived cluster-down"
    assert not second.run.exists() and not second.kubeconfig.exists()

    # A new cluster, the same study: resume runs what the dead pods left.
    up(second, build=False)
    prepare_namespace(second.kubeconfig)
    with real_cluster(pg_url, tmp_path, second.kubeconfig, TEST_IMAGE, second.root,
                      pod_pg=node.pod_pg) as cluster:
        cluster.names.add("lifecycle")
        resumed = cluster.sweeper("resume", "lifecycle")
        assert resumed.exit_code == 0, resumed.output
        assert cluster.finished_per_index("lifecycle") == {i: 1 for i in range(4)}
    assert down(second)
    assert leftovers(second) == []


def test_a_busy_port_is_one_line_and_leaves_nothing_running(tmp_path: Path) -> None:
    lo = _layout(tmp_path, 11000)
    with socket.socket() as s:
        s.bind(("127.0.0.1", lo.apiserver_port))
        s.listen()
        with pytest.raises(ClusterError, match=rf"^port {lo.apiserver_port} \(kube-apiserver\) "
                                               "is already in use: stop what holds it"):
            up(lo, build=False)
    assert leftovers(lo) == [] and not lo.run.exists()


def _build_script_copy(tmp_path: Path) -> Path:
    """tools/cluster copied under tmp_path (build.sh finds its modules beside itself)."""
    tools = tmp_path / "tools" / "cluster"
    shutil.copytree(REPO / "tools" / "cluster", tools,
                    ignore=shutil.ignore_patterns("kueue", "jobset"))
    return tools / "build.sh"


def test_no_go_toolchain_is_one_line(tmp_path: Path) -> None:
    script = _build_script_copy(tmp_path)
    bin_dir = tmp_path / "path"
    bin_dir.mkdir()
    for tool in ("dirname",):  # what build.sh needs before it looks for go
        os.symlink(shutil.which(tool) or f"/usr/bin/{tool}", bin_dir / tool)
    out = subprocess.run(["/bin/bash", str(script)], capture_output=True, text=True,
                         env={"PATH": str(bin_dir), "CLUSTER_BIN": str(tmp_path / "bin")})
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "cluster-build: Go is not installed; install Go >= 1.26 (Debian: apt-get install "
        "golang-go, or go.dev/dl) and run make cluster-up again"]


def test_a_failed_build_is_one_line_at_the_end(tmp_path: Path) -> None:
    script = _build_script_copy(tmp_path)
    main = script.parent / "k8s" / "etcd" / "main.go"
    main.write_text(main.read_text().replace("etcdmain.Main(os.Args)", "etcdmain.Main(os.Args"))
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                         env={**os.environ, "CLUSTER_BIN": str(tmp_path / "bin")}, timeout=600)
    assert out.returncode == 1
    assert "syntax error" in out.stderr
    assert out.stderr.splitlines()[-1] == (
        "cluster-build: building k8s failed (see the go output above); fix it, then run make "
        "cluster-up again")
    assert not (tmp_path / "bin" / ".k8s.stamp").exists()
