"""A ``trial.nodes: 2`` sweep through JobSet's real controller, the real Job controller and
scheduler, and the process node: one JobSet, a gang of two pods per slot whose torchrun
agents meet at node 0's pod DNS name (JobSet's headless Service); the two ranks of a trial
run in different pods and agree; a rank's pod killed mid-trial fails that attempt once, the
Job controller replaces the pod, and the retry runs on both pods; every index ends with
exactly one finished trial and the JobSet completes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper.backends import jobset as js
from sweeper.backends import manifests as m
from tests.support.k8s_cluster import NS, Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def cluster(process_cluster: Cluster) -> Cluster:
    """Not yet on the real node: its ranks run torchrun and torch, which the test image leaves
    out, and share marker files in this test's tmp_path."""
    return process_cluster


def _spec(name: str, markers: Path) -> str:
    return f"""
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 1
trial:
  entrypoint: tests.support.cluster_objectives:ddp
  launcher: torchrun
  nodes: 2
  nproc: 1
  retries: 1
  fixed: {{steps: 4, delay: 1.5}}
parameters:
  x: {{type: int, values: [0, 1]}}
kubernetes:
  env: {{MARKER_DIR: "{markers}", SWEEPER_RDZV_TIMEOUT: "120"}}
"""


def _jobset(cluster: Cluster, name: str) -> dict[str, Any] | None:
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    try:
        resp = CustomObjectsApi(cluster.api()).get_namespaced_custom_object(
            js.GROUP, js.VERSION, NS, js.PLURAL, name, _preload_content=False)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    obj: dict[str, Any] = json.loads(resp.data)
    return obj


def _wait_for_jobset(cluster: Cluster, name: str, timeout: float) -> dict[str, Any]:
    from sweeper.backends.kubernetes.gangs import jobset_outcome

    deadline = time.monotonic() + cluster.patience(timeout)
    while True:
        obj = _jobset(cluster, name)
        if obj is not None and jobset_outcome(obj)[0] is not None:
            return obj
        assert time.monotonic() < deadline, obj and obj.get("status")
        time.sleep(0.5)


def _seen(markers: Path, index: int, attempt: int) -> list[dict[str, Any]]:
    files = sorted(markers.glob(f"rank-{index}-{attempt}-*.json"))
    return sorted((json.loads(f.read_text()) for f in files), key=lambda r: r["node"])


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the process node's container and whatever it started,
    also in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _node_pod(cluster: Cluster, name: str, node: int) -> dict[str, Any]:
    pods = [p for p in cluster.pods(name)
            if p["metadata"]["annotations"].get(m.COMPLETION_INDEX) == str(node)
            and p["status"].get("phase") == "Running"]
    assert pods, [p["metadata"]["name"] for p in cluster.pods(name)]
    return pods[-1]


def test_a_two_node_sweep_runs_through_jobset_and_survives_a_killed_rank(
        cluster: Cluster, tmp_path: Path) -> None:
    if cluster.local is None:
        pytest.skip("reads the ranks' marker files: the local cluster's pods only")
    markers = tmp_path / "markers"
    markers.mkdir()
    spec = cluster.spec(_spec("mn-k8s", markers))
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    assert "created JobSet sweeper/mn-k8s: 2 indexes on 1 gang(s) of 2 pods" in started.output

    # Both ranks of index 0's first attempt have taken a step: kill node 1's pod.
    deadline = time.monotonic() + cluster.patience(60)
    while len(_seen(markers, 0, 0)) < 2:
        assert time.monotonic() < deadline, sorted(p.name for p in markers.iterdir())
        time.sleep(0.2)
    victim = _node_pod(cluster, "mn-k8s", 1)
    pid = int(victim["status"]["containerStatuses"][0]["containerID"]
              .removeprefix("process://"))
    for proc in _tree(pid):  # every process of the pod dies, as a container's cgroup would
        os.kill(proc, signal.SIGKILL)

    obj = _wait_for_jobset(cluster, "mn-k8s", 120)
    assert [c["type"] for c in obj["status"]["conditions"] if c["status"] == "True"] == \
        ["Completed"], obj["status"]
    assert cluster.finished_per_index("mn-k8s") == {0: 1, 1: 1}
    trials = cluster.trials("mn-k8s")
    assert [t.state for t in trials[0]] == [TrialState.FAIL, TrialState.COMPLETE]
    assert "torchrun exited" in trials[0][0].user_attrs["sweeper:fail_reason"]
    assert [t.state for t in trials[1]] == [TrialState.COMPLETE]

    for index, attempt in ((0, 1), (1, 0)):  # both ranks ran it, in different pods, agreeing
        nodes = _seen(markers, index, attempt)
        assert [n["node"] for n in nodes] == [0, 1]
        assert nodes[0]["pgid"] != nodes[1]["pgid"]
        assert nodes[0]["params"] == nodes[1]["params"] == \
            {"x": index, "steps": 4, "delay": 1.5}
        assert nodes[0]["decisions"] == nodes[1]["decisions"]
        assert [n["main"] for n in nodes] == [True, False]
    # The retry's node 1 ran in the replacement pod, not the killed one.
    assert _seen(markers, 0, 1)[1]["pgid"] != _seen(markers, 0, 0)[1]["pgid"]
    node1 = [p for p in cluster.pods("mn-k8s")
             if p["metadata"]["annotations"].get(m.COMPLETION_INDEX) == "1"]
    assert [p["status"]["phase"] for p in node1] == ["Failed", "Succeeded"]
    assert trials[0][1].value == 4.0 - 3  # x=0: the leader's last report, steps - 3

    # `sweeper logs` finds node 0's pod of the gang, and each attempt's part of its log.
    for index, attempt, says in ((0, 0, "failed: objective raised RuntimeError: torchrun"),
                                 (0, 1, "index 0: trial #2 complete"),
                                 (1, 0, "index 1: trial #")):
        logs = cluster.sweeper("logs", "mn-k8s", "--index", str(index), "--attempt",
                               str(attempt))
        assert logs.exit_code == 0, logs.output
        assert says in logs.output, logs.output
        assert f"index {index}, attempt {attempt}" in logs.output, logs.output


def test_cancel_deletes_the_jobset_and_fails_its_running_trials(
        cluster: Cluster, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    spec = cluster.spec(_spec("mn-cancel", markers).replace("delay: 1.5", "delay: 30"))
    assert cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach").exit_code == 0
    deadline = time.monotonic() + cluster.patience(60)
    while not any(t.state == TrialState.RUNNING
                  for ts in cluster.trials("mn-cancel").values() for t in ts):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    result = cluster.sweeper("cancel", "mn-cancel")
    assert result.exit_code == 0, result.output
    assert f"deleted JobSet {NS}/mn-cancel" in result.output
    assert _jobset(cluster, "mn-cancel") is None
    assert cluster.pods("mn-cancel") == []
    states = [t.state for ts in cluster.trials("mn-cancel").values() for t in ts]
    assert TrialState.RUNNING not in states


def test_the_rendered_jobset_alone_runs_the_sweep(cluster: Cluster, tmp_path: Path) -> None:
    """GitOps: `kubectl apply -f` of what `sweeper render` prints, no `sweeper run`: node 0 of
    each gang finds no sweep and creates it from the mounted spec; two gangs at once (each
    with its own rendezvous port on the shared host network) finish every index once."""
    import subprocess

    import yaml

    from tests.support.k8s_cluster import kubectl

    markers = tmp_path / "markers"
    markers.mkdir()
    text = _spec("mn-gitops", markers).replace("parallelism: 1", "parallelism: 2") \
        .replace("values: [0, 1]", "values: [0, 1, 2]").replace("delay: 1.5", "delay: 0")
    rendered = cluster.sweeper("render", cluster.spec(text))
    assert rendered.exit_code == 0, rendered.output
    objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    assert [o["kind"] for o in objects] == ["ConfigMap", "JobSet"]
    out = subprocess.run([kubectl(), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f",
                          "-"], input=yaml.safe_dump_all(objects), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    obj = _wait_for_jobset(cluster, "mn-gitops", 120)
    assert [c["type"] for c in obj["status"]["conditions"] if c["status"] == "True"] == \
        ["Completed"], obj["status"]
    assert cluster.finished_per_index("mn-gitops") == {0: 1, 1: 1, 2: 1}
    assert sum(len(ts) for ts in cluster.trials("mn-gitops").values()) == 3
    for index in range(3):  # gang 0 ran 0 and 2, gang 1 ran 1: each on two pods
        nodes = _seen(markers, index, 0)
        assert [n["node"] for n in nodes] == [0, 1] and nodes[0]["pgid"] != nodes[1]["pgid"]
    cluster.sweeper("cancel", "mn-gitops")  # the JobSet goes, as `sweeper delete` would
