"""Command trials in any image, on the real node: Katib's published random-search example
(tests/data/importers/katib/hp-tuning/random.yaml), imported with ``sweeper import katib``,
runs in an image without sweeper (``sweeper-katib-mnist:local``: the Debian base's python3 and
a stand-in for the example's script, tools/cluster/images.sh) with sweeper's runner beside it
as a native sidecar (sweeper.shim): every index finishes once, the script's metrics reach the
study, a pruned trial's process is stopped, and a trial whose container is killed is retried
without a duplicate."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from optuna.trial import TrialState

from sweeper import shim
from sweeper.backends import manifests as m
from sweeper.backends.kubernetes import parse_intervals
from tests.support.k8s_cluster import REPO, Cluster

pytestmark = pytest.mark.postgres

EXAMPLE = REPO / "tests" / "data" / "importers" / "katib" / "hp-tuning" / "random.yaml"
#: The stand-in's image (tools/cluster/images/katib-mnist.Containerfile): no sweeper in it.
IMAGE = "docker.io/library/sweeper-katib-mnist:local"


def _imported(cluster: Cluster, name: str, **trial: Any) -> dict[str, Any]:
    """The example as `sweeper import katib` writes it, in the stand-in's image with the test
    cluster's runner image, on this machine's small node (100m CPU for each trial: the
    example asks for 500m, three at a time), ``trial`` keys replaced."""
    if cluster.local is None:
        pytest.skip("the stand-in's image is built for the local cluster's node only")
    out = cluster.tmp / f"{name}.imported.yaml"
    result = cluster.sweeper("import", "katib", str(EXAMPLE), "-o", str(out))
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(out.read_text())
    assert doc["kubernetes"]["runner_image"] == "sweeper-trial-runner:0.1.0"
    doc["name"] = name
    doc["kubernetes"].update(image=IMAGE, runner_image=cluster.image)
    doc["kubernetes"].pop("namespace")  # the test namespace
    doc["trial"].update(resources={"cpu": "100m", "memory": "256Mi"}, **trial)
    return doc


def _run(cluster: Cluster, doc: dict[str, Any], *args: str) -> None:
    result = cluster.sweeper("run", cluster.spec(yaml.safe_dump(doc, sort_keys=False)),
                             "--backend", "kubernetes", *args)
    assert result.exit_code == 0, result.output


def _log(cluster: Cluster, name: str, index: int) -> str:
    result = cluster.sweeper("logs", name, "--index", str(index))
    assert result.exit_code == 0, result.output
    return result.output


def test_katibs_random_example_runs_in_an_image_without_sweeper(cluster: Cluster) -> None:
    doc = _imported(cluster, "kci-random")
    assert doc["trials"] == 12 and doc["parallelism"] == 3
    _run(cluster, doc)
    assert cluster.finished_per_index("kci-random") == {i: 1 for i in range(12)}
    trials = cluster.trials("kci-random")
    assert all([t.state for t in ts] == [TrialState.COMPLETE] for ts in trials.values())
    # The loss the script printed last is the trial's value.
    log = _log(cluster, "kci-random", 4)
    printed = re.findall(r"Train Epoch: 1 \[\d+/60000 \(\d+%\)\]\tloss=([\d.]+)", log)
    assert len(printed) == 11, log
    (trial,) = trials[4]
    assert trial.value == pytest.approx(float(printed[-1]))
    assert trial.user_attrs["metricValue"] == pytest.approx(float(printed[-1]))
    (pod,) = [p for p in cluster.pods("kci-random")
              if p["metadata"]["annotations"][m.COMPLETION_INDEX] == "4"]
    (runner,) = pod["spec"]["initContainers"]
    (user,) = pod["spec"]["containers"]
    assert (user["name"], user["image"]) == (m.CONTAINER_NAME, IMAGE)
    assert (runner["name"], runner["image"]) == (shim.RUNNER_CONTAINER, cluster.image)
    assert pod["status"]["phase"] == "Succeeded"
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 0


PROGRAM = """
import os, signal, sys, time
def stop(signum, frame):
    print('stopped by SIGTERM', flush=True)
    sys.exit(1)
signal.signal(signal.SIGTERM, stop)
index = int(os.environ['JOB_ID'])
for step in range(20 if index == 0 else 1200):
    print('step=%d loss=%g' % (step, 100 * index + 1.0 / (step + 1)), flush=True)
    time.sleep(0.1)
"""


def test_a_pruned_trials_process_is_stopped(cluster: Cluster) -> None:
    doc = _imported(cluster, "kci-prune", command=["python3", "-c", PROGRAM, "{lr}"])
    doc.update(trials=2, parallelism=1,
               pruner={"type": "median", "n_startup_trials": 1, "n_warmup_steps": 2})
    began = time.monotonic()
    _run(cluster, doc)
    assert time.monotonic() - began < 100  # index 1's program runs 120 s unless stopped
    trials = cluster.trials("kci-prune")
    assert [t.state for t in trials[0]] == [TrialState.COMPLETE]
    assert [t.state for t in trials[1]] == [TrialState.PRUNED]
    assert "stopped by SIGTERM" in _log(cluster, "kci-prune", 1)


def test_a_killed_trial_container_is_retried_without_a_duplicate(cluster: Cluster) -> None:
    doc = _imported(cluster, "kci-kill", retries=1)
    doc.update(trials=2, parallelism=2)
    doc.setdefault("kubernetes", {})["env"] = {"STANDIN_SECONDS": "8"}
    _run(cluster, doc, "--detach")
    victim = _running(cluster, "kci-kill", 0)
    time.sleep(2)  # the program is running: the shim started it
    cluster.kill_container(victim)  # the user's container: the shim and the script

    job = cluster.wait_for_job("kci-kill", 90)
    assert parse_intervals(job["status"]["completedIndexes"]) == [0, 1], job["status"]
    assert cluster.finished_per_index("kci-kill") == {0: 1, 1: 1}
    trials = cluster.trials("kci-kill")
    assert [t.state for t in trials[0]] == [TrialState.FAIL, TrialState.COMPLETE]
    assert [t.state for t in trials[1]] == [TrialState.COMPLETE]
    pods = sorted((p for p in cluster.pods("kci-kill")
                   if p["metadata"]["annotations"][m.COMPLETION_INDEX] == "0"),
                  key=lambda p: p["metadata"]["creationTimestamp"])
    assert [p["status"]["phase"] for p in pods] == ["Failed", "Succeeded"]
    (killed,) = pods[0]["status"]["containerStatuses"]
    assert killed["state"]["terminated"]["exitCode"] == 137


def test_a_killed_runner_is_restarted_and_its_attempt_retried_in_the_same_pod(
        cluster: Cluster) -> None:
    """The runner's container dies mid-trial (SIGKILL): the kubelet starts it again (a native
    sidecar), the new runner stops the program the old one left running, and the index
    protocol fails the old attempt once its heartbeat is stale and runs the next one."""
    doc = _imported(cluster, "kci-runner", retries=1)
    doc.update(trials=1, parallelism=1)
    doc.setdefault("kubernetes", {})["env"] = {"STANDIN_SECONDS": "8"}
    _run(cluster, doc, "--detach")
    victim = _running(cluster, "kci-runner", 0)
    time.sleep(2)
    cluster.kill_container({"status": {"containerStatuses":
                                       victim["status"]["initContainerStatuses"]}})

    job = cluster.wait_for_job("kci-runner", 90)
    assert parse_intervals(job["status"]["completedIndexes"]) == [0], job["status"]
    trials = cluster.trials("kci-runner")
    assert [t.state for t in trials[0]] == [TrialState.FAIL, TrialState.COMPLETE]
    assert "heartbeat" in trials[0][0].user_attrs["sweeper:fail_reason"]
    (pod,) = cluster.pods("kci-runner")  # the same pod ran both attempts
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["initContainerStatuses"][0]["restartCount"] == 1
    log = _log(cluster, "kci-runner", 0)
    assert "which the previous runner of this pod left running" in log


def _running(cluster: Cluster, name: str, index: int) -> dict[str, Any]:
    """The pod of ``index`` once its trial is RUNNING (the runner claimed it)."""
    deadline = time.monotonic() + cluster.patience(30)
    while True:
        trials = cluster.trials(name).get(index, [])
        pods = [p for p in cluster.pods(name)
                if p["metadata"]["annotations"][m.COMPLETION_INDEX] == str(index)
                and p["status"].get("phase") == "Running"]
        if pods and any(t.state == TrialState.RUNNING for t in trials):
            return pods[-1]
        assert time.monotonic() < deadline, (trials, pods)
        time.sleep(0.2)


def test_the_stand_in_prints_what_katibs_script_prints(tmp_path: Path) -> None:
    """The image's stand-in, run here: the example's flags, its lines."""
    import subprocess
    import sys

    script = REPO / "tools" / "cluster" / "images" / "katib-mnist" / "mnist.py"
    out = subprocess.run([sys.executable, str(script), "--epochs=1", "--batch-size=16",
                          "--lr=0.02", "--momentum=0.6"], capture_output=True, text=True,
                         env={"STANDIN_SECONDS": "0"}, check=True).stdout.split("\n")
    out = [line for line in out if line]  # its last message ends in a newline of its own
    assert len(out) == 12
    assert re.search(r"INFO     Train Epoch: 1 \[0/60000 \(0%\)\]\tloss=\d\.\d{4}$", out[0])
    assert re.search(r"\{metricName: accuracy, metricValue: \d\.\d{4}\};"
                     r"\{metricName: loss, metricValue: \d\.\d{4}\}$", out[-1])
