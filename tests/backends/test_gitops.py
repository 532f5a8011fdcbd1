"""GitOps: the objects `sweeper render` prints are enough to run a sweep. Applied with
`kubectl apply -f -` against the real apiserver, with no `sweeper run`: the pods find no sweep,
create it from the mounted spec (one study, one plan, however many start at once), and every
index finishes exactly once; `status`, `best` and `resume` work on it afterwards. Against the
local control plane (or a cluster of your own) and a real PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import optuna
import pytest
import yaml

from sweeper import protocol
from sweeper.backends import manifests as m
from sweeper.backends.kubernetes import job_info
from sweeper.study.urls import driver_url
from tests.support.k8s_cluster import NS, Cluster, kubectl

pytestmark = pytest.mark.postgres


def _spec(name: str, method: str = "grid", n: int = 6, extra: str = "") -> str:
    trials = "" if method == "grid" else f"trials: {n}\n"
    return f"""
name: {name}
method: {method}
{trials}objective: {{metric: loss, direction: minimize}}
parallelism: {n}
trial:
  entrypoint: trial_runner.examples.synthetic:quadratic
  fixed: {{epochs: 2}}
parameters:
  x: {{type: int, low: 0, high: {n - 1}}}
{extra}"""


def apply(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """`kubectl apply -f -` of the rendered objects, as a GitOps tool would."""
    assert [o["kind"] for o in objects] == ["ConfigMap", "Job"], objects
    out = subprocess.run([kubectl(), "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", "-"],
                         input=yaml.safe_dump_all(objects), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith(f"job.batch/{objects[1]['metadata']['name']}")


def wait_finished(cluster: Cluster, name: str, n: int, job_name: str | None = None,
                  timeout: float = 60) -> dict[str, Any]:
    """The Job ``job_name`` (default: the sweep's first) of sweep ``name`` once it is done."""
    deadline = time.monotonic() + cluster.patience(timeout)
    while True:
        jobs = [j for j in cluster.jobs(name) if j["metadata"]["name"] == (job_name or name)]
        if jobs and job_info(jobs[0], n).finished:
            return jobs[0]
        assert time.monotonic() < deadline, json.dumps(jobs and jobs[0].get("status"))
        time.sleep(0.2)


@pytest.mark.parametrize("method", ["grid", "tpe"])
def test_rendered_objects_alone_run_the_sweep(cluster: Cluster, method: str) -> None:
    name = f"gitops-{method}"
    rendered = cluster.sweeper("render", cluster.spec(_spec(name, method)))
    assert rendered.exit_code == 0, rendered.output
    objects = list(yaml.safe_load_all(rendered.stdout))
    assert [o["kind"] for o in objects] == ["ConfigMap", "Job"]
    assert objects[0]["metadata"]["name"] == m.spec_configmap_name(name)
    apply(cluster, objects)  # no `sweeper run`: the study does not exist yet

    job = wait_finished(cluster, name, 6)
    info = job_info(job, 6)
    assert info.state == "Complete", job["status"]
    assert cluster.finished_per_index(name) == {i: 1 for i in range(6)}
    # Six pods started at once and raced to create the sweep: one study, one trial per index.
    assert sum(len(ts) for ts in cluster.trials(name).values()) == 6
    study = optuna.load_study(study_name=name, storage=driver_url(cluster.url))
    attrs = study.user_attrs
    assert attrs[protocol.HASH_ATTR] == cluster.parse(_spec(name, method)).spec_hash
    assert attrs[protocol.LAUNCHES_ATTR] == 1  # resume knows it was launched on Kubernetes
    if method == "grid":
        assert sorted(t.params["x"] for t in study.trials) == list(range(6))

    status = cluster.sweeper("status", name, "--format", "json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["finished_indexes"] == 6
    best = cluster.sweeper("best", name, "--format", "json")
    assert best.exit_code == 0, best.output
    assert json.loads(best.stdout)["study"] == name
    resumed = cluster.sweeper("resume", name)
    assert resumed.exit_code == 0, resumed.output
    assert "6 of 6 indexes already finished" in resumed.output
    logs = cluster.sweeper("logs", name, "--index", "3")
    assert logs.exit_code == 0 and "index 3: trial #" in logs.stdout, logs.output

    deleted = cluster.sweeper("delete", name, "--yes", "--kubernetes")
    assert deleted.exit_code == 0, deleted.output
    assert f"deleted ConfigMap {NS}/{m.spec_configmap_name(name)}" in deleted.stdout
    assert not [c for c in cluster.core().list_namespaced_config_map(NS).items
                if c.metadata.name == m.spec_configmap_name(name)]
    assert cluster.jobs(name) == []


def test_a_different_sweep_under_the_name_stops_the_job(cluster: Cluster) -> None:
    """The study holds another spec under this name: every runner exits with the
    configuration exit code and the Job fails at once (podFailurePolicy FailJob)."""
    first = cluster.sweeper("run", cluster.spec(_spec("gitops-clash", n=2)), "--backend",
                            "kubernetes")
    assert first.exit_code == 0, first.output
    for job in cluster.jobs("gitops-clash"):
        cluster.batch().delete_namespaced_job(job["metadata"]["name"], NS,
                                              propagation_policy="Foreground")
    other = _spec("gitops-clash", n=3)  # three grid points: a different plan
    objects = list(yaml.safe_load_all(cluster.sweeper("render", cluster.spec(other)).stdout))
    objects[0]["metadata"]["name"] = "gitops-clash-2-spec"  # the first run's ConfigMap stays
    objects[1]["metadata"]["name"] = "gitops-clash-2"
    for v in objects[1]["spec"]["template"]["spec"]["volumes"]:
        if "configMap" in v:
            v["configMap"]["name"] = "gitops-clash-2-spec"
    deadline = time.monotonic() + cluster.patience(30)
    while cluster.jobs("gitops-clash"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    apply(cluster, objects)
    job = wait_finished(cluster, "gitops-clash", 3, "gitops-clash-2")
    assert job_info(job, 3).state == "Failed" and job_info(job, 3).reason == "PodFailurePolicy"
    codes = {cs["state"]["terminated"]["exitCode"] for p in cluster.pods("gitops-clash")
             for cs in p["status"].get("containerStatuses") or [] if "terminated" in cs["state"]}
    assert codes == {protocol.EXIT_CONFIG}
    assert cluster.finished_per_index("gitops-clash") == {0: 1, 1: 1}  # untouched
