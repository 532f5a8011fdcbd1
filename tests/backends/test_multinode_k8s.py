"""A ``trial.nodes: 2`` sweep through JobSet's real controller, the real Job controller and
scheduler, and the real node's containers: one JobSet, a gang of two pods per slot whose
torchrun agents meet at node 0's pod DNS name (JobSet's headless Service, resolved by
CoreDNS); the two ranks of a trial run in different pods and agree; a rank's container
killed mid-trial fails that attempt once, the Job controller replaces the pod, and the retry
runs on both pods; every index ends with exactly one finished trial and the JobSet completes.

The test image leaves torch out (its CUDA build is gigabytes, and every image import would
carry them), so the pods mount this machine's virtual environment read-only and find torch
there through ``PYTHONPATH``; sweeper itself is the image's. The ranks write what they saw
to a shared volume that the test reads."""

from __future__ import annotations

import json
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends import jobset as js
from sweeper.backends import manifests as m
from sweeper.study.urls import driver_url
from tests.support.k8s_cluster import NS, Cluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def markers(cluster: Cluster) -> Iterator[tuple[str, Path]]:
    """The ``kubernetes:`` volumes and env the ranks need (torch from this machine's virtual
    environment, a shared marker directory) and the marker directory as the test reads it."""
    if cluster.local is None:
        pytest.skip("mounts this machine's torch and reads the ranks' marker files: the local "
                    "cluster only")
    site = Path(sysconfig.get_paths()["purelib"])
    with cluster.host_claim("torch", site) as (torch, _), \
            cluster.shared_claim("markers") as (claim, directory):
        yield (f"""  volumes: [{{name: torch, mount_path: /opt/host-site, pvc: {torch},
             read_only: true}},
            {{name: markers, mount_path: /markers, pvc: {claim}}}]
  env: {{MARKER_DIR: /markers, PYTHONPATH: /opt/host-site, SWEEPER_RDZV_TIMEOUT: "120"}}
""", directory)


def _spec(name: str, kubernetes: str) -> str:
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
  resources: {{cpu: 100m, memory: 1536Mi}}
parameters:
  x: {{type: int, values: [0, 1]}}
kubernetes:
{kubernetes}"""


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


def _node_pod(cluster: Cluster, name: str, node: int) -> dict[str, Any]:
    pods = [p for p in cluster.pods(name)
            if p["metadata"]["annotations"].get(m.COMPLETION_INDEX) == str(node)
            and p["status"].get("phase") == "Running"]
    assert pods, [p["metadata"]["name"] for p in cluster.pods(name)]
    return pods[-1]


def test_a_two_node_sweep_runs_through_jobset_and_survives_a_killed_rank(
        cluster: Cluster, markers: tuple[str, Path]) -> None:
    kubernetes, seen = markers
    spec = cluster.spec(_spec("mn-k8s", kubernetes))
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    assert "created JobSet sweeper/mn-k8s: 2 indexes on 1 gang(s) of 2 pods" in started.output

    # Both ranks of index 0's first attempt have taken a step: kill node 1's pod.
    deadline = time.monotonic() + cluster.patience(90)
    while len(_seen(seen, 0, 0)) < 2:
        assert time.monotonic() < deadline, sorted(p.name for p in seen.iterdir())
        time.sleep(0.2)
    victim = _node_pod(cluster, "mn-k8s", 1)
    cluster.kill_container(victim)  # every process of the container dies

    obj = _wait_for_jobset(cluster, "mn-k8s", 120)
    assert [c["type"] for c in obj["status"]["conditions"] if c["status"] == "True"] == \
        ["Completed"], obj["status"]
    assert cluster.finished_per_index("mn-k8s") == {0: 1, 1: 1}
    trials = cluster.trials("mn-k8s")
    assert [t.state for t in trials[0]] == [TrialState.FAIL, TrialState.COMPLETE]
    # Whoever notices first says why: node 0's torchrun agent (its peer's agent is gone) or
    # rank 0 itself (gloo's connection to the killed rank closes); in containers it is
    # usually the rank.
    reason = trials[0][0].user_attrs["sweeper:fail_reason"]
    assert "torchrun exited" in reason or "remote worker crashing" in reason, reason
    assert [t.state for t in trials[1]] == [TrialState.COMPLETE]

    for index, attempt in ((0, 1), (1, 0)):  # both ranks ran it, in different pods, agreeing
        nodes = _seen(seen, index, attempt)
        assert [n["node"] for n in nodes] == [0, 1]
        assert nodes[0]["host"] != nodes[1]["host"]
        assert nodes[0]["params"] == nodes[1]["params"] == \
            {"x": index, "steps": 4, "delay": 1.5}
        assert nodes[0]["decisions"] == nodes[1]["decisions"]
        assert [n["main"] for n in nodes] == [True, False]
    # The retry's node 1 ran in the replacement pod (JobSet gives it the killed pod's host
    # name: the same DNS name for the gang to meet at).
    node1 = [p for p in cluster.pods("mn-k8s")
             if p["metadata"]["annotations"].get(m.COMPLETION_INDEX) == "1"]
    assert [p["status"]["phase"] for p in node1] == ["Failed", "Succeeded"]
    assert trials[0][1].value == 4.0 - 3  # x=0: the leader's last report, steps - 3

    # `sweeper logs` finds node 0's pod of the gang, and each attempt's part of its log.
    for index, attempt, says in ((0, 0, "failed: objective raised RuntimeError: "),
                                 (0, 1, "index 0: trial #2 complete"),
                                 (1, 0, "index 1: trial #")):
        logs = cluster.sweeper("logs", "mn-k8s", "--index", str(index), "--attempt",
                               str(attempt))
        assert logs.exit_code == 0, logs.output
        assert says in logs.output, logs.output
        assert f"index {index}, attempt {attempt}" in logs.output, logs.output


def test_an_open_ended_two_node_sweep_runs_gang_slots_until_its_budget_is_spent(
        cluster: Cluster, markers: tuple[str, Path]) -> None:
    """A budget and no ``trials``: one JobSet, whose gang (a slot) runs index after index
    until the budget refuses the next one; the gang's followers are told, the JobSet
    completes with no pod replaced, and ``status``/``logs`` find each index in the gang's
    node-0 pod, each its part of the log."""
    text = _spec("mn-open", markers[0]).replace("method: grid", "method: tpe") \
        .replace("  x: {type: int, values: [0, 1]}", "  x: {type: float, low: 0, high: 1}") \
        .replace("delay: 1.5", "delay: 0") + "budget: {steps: 5}\n"
    result = cluster.sweeper("run", cluster.spec(text), "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    assert "created JobSet sweeper/mn-open: an open-ended sweep (index after index until " \
           "the budget is spent) on 1 gang(s) of 2 pods" in result.output
    assert result.output.strip().splitlines()[-1].startswith(
        "stopped: stop rule budget fired at "), result.output
    obj = _jobset(cluster, "mn-open")
    assert obj is not None and [c["type"] for c in obj["status"]["conditions"]
                                if c["status"] == "True"] == ["Completed"], obj
    # 3 steps each (reports 0..3): index 1 starts with 3 of 5 spent, index 2 is refused
    assert cluster.finished_per_index("mn-open") == {0: 1, 1: 1}
    pods = cluster.pods("mn-open")
    assert len(pods) == 2 and all(p["status"]["phase"] == "Succeeded" for p in pods)
    (node0,) = [p["metadata"]["name"] for p in pods
                if p["metadata"]["annotations"].get(m.COMPLETION_INDEX) == "0"]

    shown = cluster.sweeper("status", "mn-open", "--format", "json")
    assert shown.exit_code == 0, shown.output
    assert [(r["index"], r["pod"]) for r in json.loads(shown.stdout)["per_index"]] == \
        [(0, node0), (1, node0)]
    for index in (0, 1):
        logs = cluster.sweeper("logs", "mn-open", "--index", str(index))
        assert logs.exit_code == 0, logs.output
        assert logs.stderr.startswith(f"pod {NS}/{node0} "), logs.stderr
        assert f"index {index}, attempt 0, trial #" in logs.stdout, logs.stdout
        assert f"index {1 - index}, attempt" not in logs.stdout, logs.stdout
    never = cluster.sweeper("logs", "mn-open", "--index", "2")
    assert never.exit_code == 3 and "index 2 has not run in pod" in never.stderr, never.output


def test_cancel_deletes_the_jobset_and_fails_its_running_trials(
        cluster: Cluster, markers: tuple[str, Path]) -> None:
    spec = cluster.spec(_spec("mn-cancel", markers[0]).replace("delay: 1.5", "delay: 30"))
    assert cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach").exit_code == 0
    deadline = time.monotonic() + cluster.patience(90)
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


def test_the_rendered_jobset_alone_runs_the_sweep(cluster: Cluster,
                                                  markers: tuple[str, Path]) -> None:
    """GitOps: `kubectl apply -f` of what `sweeper render` prints, no `sweeper run`: node 0 of
    each gang finds no sweep and creates it from the mounted spec; two gangs at once (each
    with its own rendezvous port on the shared host network) finish every index once."""
    import subprocess

    import yaml

    from tests.support.k8s_cluster import kubectl

    kubernetes, seen = markers
    text = _spec("mn-gitops", kubernetes).replace("parallelism: 1", "parallelism: 2") \
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
        nodes = _seen(seen, index, 0)
        assert [n["node"] for n in nodes] == [0, 1] and nodes[0]["host"] != nodes[1]["host"]
    cluster.sweeper("cancel", "mn-gitops")  # the JobSet goes, as `sweeper delete` would


def test_a_two_node_sweep_runs_its_code_from_a_snapshot(
        cluster: Cluster, markers: tuple[str, Path]) -> None:
    """The trial's module lives only next to the spec (the test image does not hold it): both
    pods of the gang fetch the snapshot, and torchrun's ranks import the module from it."""
    kubernetes, seen = markers
    project = cluster.tmp / "mn-project"
    project.mkdir()
    (project / "mn_snapmod.py").write_text(
        "from tests.support.cluster_objectives import ddp as objective  # noqa: F401\n")
    text = cluster.spec_text(_spec("mn-snap", kubernetes)
                             .replace("tests.support.cluster_objectives:ddp",
                                      "mn_snapmod:objective")
                             .replace("values: [0, 1]", "values: [0]")
                             .replace("delay: 1.5", "delay: 0"))
    spec = project / "sweep.yaml"
    spec.write_text(text)
    ran = cluster.sweeper("run", str(spec), "--backend", "kubernetes", "--detach")
    assert ran.exit_code == 0, ran.output
    obj = _wait_for_jobset(cluster, "mn-snap", 180)
    assert [c["type"] for c in obj["status"]["conditions"] if c["status"] == "True"] == \
        ["Completed"], obj["status"]
    assert cluster.finished_per_index("mn-snap") == {0: 1}, \
        [t.user_attrs.get("sweeper:fail_reason") for t in cluster.trials("mn-snap").get(0, [])]
    (trial,) = cluster.trials("mn-snap")[0]
    study = optuna.load_study(study_name="mn-snap", storage=driver_url(cluster.url))
    code = study.user_attrs[protocol.CODE_ATTR]
    assert trial.user_attrs[protocol.CODE_ATTR] == code and code in ran.output, ran.output
    nodes = _seen(seen, 0, 0)
    assert [n["node"] for n in nodes] == [0, 1] and nodes[0]["host"] != nodes[1]["host"]
