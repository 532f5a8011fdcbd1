"""JobSet, for real: JobSet's manager (v0.12.0, built from its Go module, its webhooks served)
on the local control plane, its pods run as containers by the node. A JobSet is defaulted by
JobSet's webhook (Indexed child Jobs, DNS hostnames), completes with one pod per index of
each child Job, and its pods reach each other by ``HOST.SUBDOMAIN`` names under JobSet's
headless Service (through CoreDNS); the validating webhook rejects what
JobSet rejects, and the apiserver's strict field validation what the vendored CRD schema
check (tests/support/k8s_schema.py) rejects; and a failure-policy rule ``RestartJob``
recreates only the failed child Job.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.cluster.jobset import API, JOB_INDEX, NAME_LABEL
from tests.conftest import Target
from tests.support.k8s_schema import validate_k8s_objects

pytestmark = pytest.mark.slow

NS = "default"
GROUP, VERSION = API.split("/")
Obj = dict[str, Any]
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"

#: The trial runner's image as the Dockerfile builds it (Python, Debian's shell).
IMAGE = "sweeper-trial-runner:0.1.0"

#: Resolves each name of $PEERS (retrying while CoreDNS has not published a pod yet) and prints
#: the env and the addresses as JSON: what a rank finds of its gang.
RESOLVE_PEERS = """
import json, os, socket, time
found, deadline = {}, time.time() + 90
for name in os.environ["PEERS"].split():
    while name not in found:
        try:
            found[name] = socket.gethostbyname(name)
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.3)
print(json.dumps({"env": dict(os.environ), "peers": found}))
"""

#: Job index 1 fails once (a marker in a hostPath directory both attempts see); index 0 runs
#: until the retried index 1 has started, so it is running while its sibling is recreated.
FAIL_ONCE = """
import os, sys, time
d, index = os.environ["MARKERS"], os.environ["JOB_INDEX"]
if index == "1":
    if not os.path.exists(os.path.join(d, "failed-once")):
        open(os.path.join(d, "failed-once"), "w").close()
        sys.exit(1)
    open(os.path.join(d, "second-attempt"), "w").close()
    sys.exit(0)
deadline = time.time() + 120
while not os.path.exists(os.path.join(d, "second-attempt")):
    if time.time() > deadline:
        sys.exit(2)
    time.sleep(0.2)
"""


class JobSets:
    """JobSets in the test namespace, read and written through the API server."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.names: list[str] = []

    def create(self, body: Obj) -> Obj:
        """Create the JobSet with strict field validation, as ``kubectl apply`` does; it
        passes the vendored CRD schema first (tests/support/k8s_schema.py)."""
        assert validate_k8s_objects([body]) == []
        self.names.append(body["metadata"]["name"])
        created: Obj = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, NS, "jobsets", body, field_validation="Strict")
        return created

    def get(self, name: str) -> Obj:
        got: Obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, "jobsets", name)
        return got

    def jobs(self, name: str) -> list[Obj]:
        resp = self.batch.list_namespaced_job(NS, label_selector=f"{NAME_LABEL}={name}",
                                              _preload_content=False)
        return sorted(json.loads(resp.data)["items"], key=lambda j: j["metadata"]["name"])

    def pods(self, name: str) -> list[Obj]:
        resp = self.core.list_namespaced_pod(NS, label_selector=f"{NAME_LABEL}={name}",
                                             _preload_content=False)
        return sorted(json.loads(resp.data)["items"],
                      key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))

    def log(self, pod: Obj) -> str:
        resp = self.core.read_namespaced_pod_log(pod["metadata"]["name"], NS,
                                                 _preload_content=False)
        return str(resp.data.decode())

    def wait(self, name: str, done: Callable[[Obj], bool], what: str,
             seconds: float = 180) -> Obj:
        deadline = time.monotonic() + seconds
        while True:
            js = self.get(name)
            if done(js):
                return js
            assert time.monotonic() < deadline, (
                f"JobSet {name}: timed out waiting for {what}", js.get("status"),
                [(p["metadata"]["name"], p["status"].get("phase")) for p in self.pods(name)])
            time.sleep(0.3)

    def delete_all(self) -> None:
        for name in self.names:
            try:
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, NS, "jobsets", name, propagation_policy="Foreground")
            except ApiException as e:
                if e.status != 404:
                    raise


@pytest.fixture
def jobsets(k8s_target: Target) -> Iterator[JobSets]:
    if k8s_target.local is None:
        pytest.skip("JobSet is part of the local control plane (tests/cluster), not of yours")
    api = config.new_client_from_config(str(k8s_target.kubeconfig))
    try:
        ext = client.ApiextensionsV1Api(api)
        try:
            ext.read_custom_resource_definition(f"jobsets.{GROUP}")
        except ApiException as e:
            if e.status != 404:
                raise
            pytest.fail("JobSet's CRD is not installed: this cluster was started before "
                        "JobSet was part of it; run make cluster-down, then make cluster-up")
        js = JobSets(api)
        yield js
        js.delete_all()
    finally:
        api.close()


def condition(js: Obj, ctype: str) -> bool:
    return any(c["type"] == ctype and c["status"] == "True"
               for c in (js.get("status") or {}).get("conditions") or [])


def jobset(name: str, replicas: int, job: Obj, failure_policy: Obj | None = None) -> Obj:
    spec: Obj = {"replicatedJobs": [{"name": "w", "replicas": replicas, "template": job}]}
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    return {"apiVersion": API, "kind": "JobSet", "metadata": {"name": name}, "spec": spec}


def container(script: str, env: list[Obj], **extra: Any) -> Obj:
    return {"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["python", "-c", script], "env": env, **extra}


def index_env(name: str, source: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"{source}['{JOB_INDEX}']"}}}


def test_a_jobset_completes_and_its_pods_reach_each_other_by_hostname(jobsets: JobSets) -> None:
    """Each pod resolves its gang's names through CoreDNS and JobSet's headless Service, in
    every form a launcher writes them (short, in the namespace, the Service's, the FQDN), to
    the pods' own addresses."""
    name = f"js-{uuid.uuid4().hex[:6]}"
    peers = [f"{name}-w-0-0.{name}", f"{name}-w-$(SWEEPER_SLOT)-1.{name}",
             f"{name}-w-1-0.{name}.{NS}", f"{name}-w-0-1.{name}.{NS}.svc",
             f"{name}-w-1-1.{name}.{NS}.svc.cluster.local"]
    env = [index_env("SWEEPER_SLOT", "metadata.annotations"),
           index_env("SLOT_LABEL", "metadata.labels"),
           {"name": "PEERS", "value": " ".join(peers)}]
    # completionMode and restartPolicy left out: JobSet's mutating webhook defaults them.
    job = {"spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0,
                    "template": {"spec": {"containers": [container(RESOLVE_PEERS, env)]}}}}
    created = jobsets.create(jobset(name, 2, job))
    assert created["spec"]["network"]["enableDNSHostnames"] is True  # the webhook's default

    js = jobsets.wait(name, lambda j: condition(j, "Completed") or condition(j, "Failed"),
                      "a terminal condition")
    assert condition(js, "Completed"), js["status"]
    (status,) = js["status"]["replicatedJobsStatus"]
    assert (status["name"], status["succeeded"], status["failed"]) == ("w", 2, 0)

    jobs = jobsets.jobs(name)
    assert [j["metadata"]["name"] for j in jobs] == [f"{name}-w-0", f"{name}-w-1"]
    assert {j["spec"]["completionMode"] for j in jobs} == {"Indexed"}
    service = jobsets.core.read_namespaced_service(name, NS)
    assert service.spec.cluster_ip == "None"  # JobSet's headless Service

    pods = jobsets.pods(name)
    assert sorted(p["spec"]["hostname"] for p in pods) == [
        f"{name}-w-{j}-{i}" for j in range(2) for i in range(2)]
    assert {p["spec"]["subdomain"] for p in pods} == {name}
    assert {p["spec"]["restartPolicy"] for p in pods} == {"OnFailure"}
    assert [p["status"]["phase"] for p in pods] == ["Succeeded"] * 4
    ip = {p["spec"]["hostname"]: p["status"]["podIP"] for p in pods}
    assert len(set(ip.values())) == 4  # four pods, four addresses
    for pod in pods:
        slot = pod["metadata"]["annotations"][JOB_INDEX]
        seen = json.loads(jobsets.log(pod).strip().splitlines()[-1])
        assert seen["env"]["SWEEPER_SLOT"] == seen["env"]["SLOT_LABEL"] == slot
        assert seen["peers"] == {
            peer.replace("$(SWEEPER_SLOT)", slot): ip[peer.replace("$(SWEEPER_SLOT)", slot)
                                                        .split(".")[0]] for peer in peers}


def test_the_validating_webhook_rejects_what_jobset_rejects(jobsets: JobSets) -> None:
    name = f"js-{'x' * 60}"  # child Job and pod names would pass 63 characters
    job = {"spec": {"template": {"spec": {"containers": [container("pass", [])]}}}}
    with pytest.raises(ApiException) as err:
        jobsets.create(jobset(name, 1, job))
    assert err.value.status in (400, 422), err.value
    assert "vjobset.kb.io" in str(err.value.body)
    assert "JobSet name is too long" in str(err.value.body)


def test_the_apiserver_rejects_the_unknown_field_the_schema_check_rejects(
        jobsets: JobSets) -> None:
    name = f"js-{uuid.uuid4().hex[:6]}"
    job = {"spec": {"template": {"spec": {"containers": [container("pass", [])]}}}}
    body = jobset(name, 1, job)
    body["spec"]["replicatedJobs"][0]["replica"] = 2
    (error,) = validate_k8s_objects([body])
    assert "'replica' was unexpected" in error
    with pytest.raises(ApiException) as err:
        jobsets.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "jobsets", body,
                                                       field_validation="Strict")
    assert err.value.status == 400, err.value
    message = json.loads(err.value.body)["message"]
    assert message.endswith('strict decoding error: unknown field "spec.replicatedJobs[0].replica"')


def test_restart_job_recreates_only_the_failed_child_job(jobsets: JobSets,
                                                         request: pytest.FixtureRequest) -> None:
    name = f"js-{uuid.uuid4().hex[:6]}"
    markers = {"name": "markers", "mountPath": "/markers"}
    shared = Path("/tmp/sweeper-jobset-tests", name)  # the node sees this machine's /tmp
    shared.mkdir(parents=True)
    shared.chmod(0o777)  # the image's user, 10001, writes the markers
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    pod_spec = {
        "restartPolicy": "Never",
        "volumes": [{"name": "markers", "hostPath": {
            "path": str(shared), "type": "Directory"}}],
        "containers": [container(FAIL_ONCE, [
            index_env("JOB_INDEX", "metadata.annotations"),
            {"name": "MARKERS", "value": "/markers"}], volumeMounts=[markers])]}
    job = {"spec": {"completions": 1, "parallelism": 1, "backoffLimit": 0,
                    "template": {"spec": pod_spec}}}
    policy = {"maxRestarts": 1, "rules": [{"name": "restartTheFailedJob",
                                           "action": "RestartJob"}]}
    jobsets.create(jobset(name, 2, job, policy))

    def both_running(_: Obj) -> bool:
        return len(jobsets.jobs(name)) == 2
    jobsets.wait(name, both_running, "both child Jobs")
    first = {j["metadata"]["name"]: j["metadata"]["uid"] for j in jobsets.jobs(name)}

    js = jobsets.wait(name, lambda j: condition(j, "Completed") or condition(j, "Failed"),
                      "a terminal condition")
    assert condition(js, "Completed"), js["status"]
    (status,) = js["status"]["replicatedJobsStatus"]
    assert status["jobRestarts"] == [0, 1]
    assert status["succeeded"] == 2
    assert js["status"].get("restarts", 0) == 0  # the JobSet itself was not restarted

    after = {j["metadata"]["name"]: j["metadata"]["uid"] for j in jobsets.jobs(name)}
    assert after[f"{name}-w-0"] == first[f"{name}-w-0"], "the healthy child Job was recreated"
    assert after[f"{name}-w-1"] != first[f"{name}-w-1"], "the failed child Job was not recreated"
    pods = jobsets.pods(name)
    by_job = {job: [p for p in pods if p["metadata"]["labels"].get(CONTROLLER_UID) == uid]
              for job, uid in after.items()}
    (healthy,) = by_job[f"{name}-w-0"]  # one pod, never restarted, ran through the restart
    assert healthy["status"]["phase"] == "Succeeded"
    assert healthy["status"]["containerStatuses"][0]["restartCount"] == 0
    assert [p["status"]["phase"] for p in by_job[f"{name}-w-1"]] == ["Succeeded"]
