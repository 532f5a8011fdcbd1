"""The fake API server, driven by the real `kubernetes` client over HTTP."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.support.k8s_fake import (
    FakeKubeAPI,
    format_intervals,
    parse_intervals,
    parse_label_selector,
)
from tests.support.k8s_fake.store import JOBS, PODS

NS = "sweeps"
INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(workdir=tmp_path, extra_env={"PYTHONUNBUFFERED": "1"}) as f:
        f.add_namespace(NS)
        f.add_secret(NS, "sweeper-storage", {"url": "postgresql://u:pw@db/sweeps"})
        yield f


@pytest.fixture
def api(fake: FakeKubeAPI, tmp_path: Path) -> Iterator[client.ApiClient]:
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def job_manifest(
    name: str, code: str, *, completions: int = 3, parallelism: int = 2,
    env: list[dict[str, Any]] | None = None, **spec: Any,
) -> dict[str, Any]:
    """An Indexed Job whose container runs `python -c code` with JOB_ID from the index."""
    container: dict[str, Any] = {
        "name": "runner",
        "image": "sweeper:test",
        "command": ["python", "-c", code],
        "env": [{"name": "JOB_ID", "valueFrom": {"fieldRef": {"fieldPath": INDEX_ANNOTATION}}},
                *(env or [])],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": "sweeper", "sweep": name}},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": parallelism,
            **spec,
            "template": {
                "metadata": {"labels": {"app": "sweeper", "sweep": name}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in job["status"].get("conditions") or []}


def pods_by_index(fake: FakeKubeAPI, job: str) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for p in fake.pods(NS, job=job):
        idx = int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
        out.setdefault(idx, []).append(p)
    return out


def read_log(core: client.CoreV1Api, pod: str, **kwargs: Any) -> str:
    # _preload_content=False: some client releases mangle text/plain bodies into "b'...'".
    resp = core.read_namespaced_pod_log(pod, NS, _preload_content=False, **kwargs)
    return resp.data.decode()


def api_error(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1"
    assert body["status"] == "Failure" and body["code"] == exc.value.status
    return body


# --------------------------------------------------------------------------- Job controller


def test_indexed_job_runs_every_index_with_downward_api_and_secret(
    fake: FakeKubeAPI, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    code = ("import os, sys, time; time.sleep(0.2); "
            "print('index', os.environ['JOB_ID'], os.environ['STORAGE'], "
            "os.environ['JOB_COMPLETION_INDEX']); sys.exit(0)")
    env = [{"name": "STORAGE",
            "valueFrom": {"secretKeyRef": {"name": "sweeper-storage", "key": "url"}}}]
    created = batch.create_namespaced_job(NS, job_manifest("sw", code, env=env))
    assert created.metadata.uid and created.metadata.resource_version
    assert created.metadata.generation == 1
    assert created.spec.selector.match_labels == {
        "batch.kubernetes.io/controller-uid": created.metadata.uid}

    job = fake.wait_for_job(NS, "sw", timeout=20)

    conds = conditions(job)
    assert conds["Complete"]["status"] == "True"
    assert conds["SuccessCriteriaMet"]["reason"] == "CompletionsReached"
    assert list(conds) == ["SuccessCriteriaMet", "Complete"]
    st = job["status"]
    assert st["completedIndexes"] == "0-2" and st["succeeded"] == 3
    assert "failed" not in st and "active" not in st  # omitempty, like the real JSON
    assert st["startTime"] and st["completionTime"] and st["uncountedTerminatedPods"] == {}
    # parallelism 2 was honoured at every step the controller recorded
    actives = [e.object["status"].get("active", 0) for e in fake.store.history
               if e.resource == "jobs"]
    assert max(actives) == 2

    pods = core.list_namespaced_pod(NS, label_selector="job-name=sw,app=sweeper").items
    assert sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"]
                  for p in pods) == ["0", "1", "2"]
    for p in pods:
        idx = p.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert p.metadata.name.startswith(f"sw-{idx}-") and len(p.metadata.name) == len("sw-0-") + 5
        assert p.metadata.owner_references[0].kind == "Job"
        assert p.metadata.owner_references[0].uid == created.metadata.uid
        assert p.metadata.labels["batch.kubernetes.io/controller-uid"] == created.metadata.uid
        assert any(e.name == "JOB_COMPLETION_INDEX" for e in p.spec.containers[0].env)
        assert p.status.phase == "Succeeded"
        assert p.status.container_statuses[0].state.terminated.exit_code == 0
        assert p.status.start_time is not None
        log = read_log(core, p.metadata.name)
        assert log == f"index {idx} postgresql://u:pw@db/sweeps {idx}\n"
    assert "index 1" in fake.pod_log(NS, pods[1].metadata.name) + fake.pod_log(
        NS, pods[0].metadata.name) + fake.pod_log(NS, pods[2].metadata.name)
    assert ("POST", f"/apis/batch/v1/namespaces/{NS}/jobs") in fake.requests


def test_fail_index_policy_fails_only_that_index(
    fake: FakeKubeAPI, batch: client.BatchV1Api
) -> None:
    code = "import os, sys; sys.exit(3 if os.environ['JOB_ID'] == '1' else 0)"
    manifest = job_manifest(
        "fi", code, backoffLimitPerIndex=2, podReplacementPolicy="Failed",
        podFailurePolicy={"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}},
        ]},
    )
    batch.create_namespaced_job(NS, manifest)

    job = fake.wait_for_job(NS, "fi", timeout=20)

    st = job["status"]
    assert st["failedIndexes"] == "1"
    assert st["completedIndexes"] == "0,2"  # two neighbours are listed, like the real one
    assert st["failed"] == 1 and st["succeeded"] == 2
    conds = conditions(job)
    assert conds["FailureTarget"]["reason"] == "FailedIndexes"
    assert conds["Failed"]["reason"] == "FailedIndexes"
    assert "Complete" not in conds
    by_index = pods_by_index(fake, "fi")
    assert len(by_index[1]) == 1
    assert by_index[1][0]["status"]["containerStatuses"][0]["state"]["terminated"][
        "exitCode"] == 3


def test_retryable_exit_is_replaced_and_index_completes(
    fake: FakeKubeAPI, batch: client.BatchV1Api, tmp_path: Path
) -> None:
    marker = tmp_path / "attempted"
    code = (f"import os, sys, pathlib; m = pathlib.Path({str(marker)!r})\n"
            "first = os.environ['JOB_ID'] == '0' and not m.exists()\n"
            "if first: m.touch()\n"
            "sys.exit(1 if first else 0)")
    batch.create_namespaced_job(
        NS, job_manifest("rt", code, completions=2, backoffLimitPerIndex=1,
                         podReplacementPolicy="Failed"))

    job = fake.wait_for_job(NS, "rt", timeout=20)

    assert conditions(job)["Complete"]["status"] == "True"
    assert job["status"]["completedIndexes"] == "0,1"
    assert job["status"]["failed"] == 1 and job["status"]["failedIndexes"] == ""
    attempts = pods_by_index(fake, "rt")[0]
    assert [p["status"]["phase"] for p in attempts] == ["Failed", "Succeeded"]
    assert [p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"]
            for p in attempts] == ["0", "1"]


def test_fail_job_action_stops_the_other_pods(
    fake: FakeKubeAPI, batch: client.BatchV1Api
) -> None:
    code = ("import os, sys, time\n"
            "if os.environ['JOB_ID'] == '0':\n    time.sleep(0.3); sys.exit(4)\n"
            "time.sleep(60)")
    batch.create_namespaced_job(NS, job_manifest(
        "fj", code, completions=2, backoffLimitPerIndex=1, podReplacementPolicy="Failed",
        podFailurePolicy={"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "runner",
                                                  "operator": "In", "values": [4]}}]},
    ))

    t0 = time.monotonic()
    job = fake.wait_for_job(NS, "fj", timeout=20)

    assert time.monotonic() - t0 < 10  # the sleeping pod was terminated, not waited for
    conds = conditions(job)
    assert conds["Failed"]["reason"] == "PodFailurePolicy"
    assert conds["FailureTarget"]["reason"] == "PodFailurePolicy"
    assert "matching FailJob rule at index 0" in conds["Failed"]["message"]
    assert "exit code 4" in conds["Failed"]["message"]
    # the controller deleted the sleeping pod (SIGTERM: exit 143, counted as failed)
    assert list(pods_by_index(fake, "fj")) == [0]
    assert job["status"]["failed"] == 2 and "active" not in job["status"]


def test_disruption_is_ignored_and_the_index_retried(
    fake: FakeKubeAPI, batch: client.BatchV1Api, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    code = (f"import pathlib, time; m = pathlib.Path({str(marker)!r})\n"
            "if not m.exists():\n    m.touch(); time.sleep(60)\n")
    batch.create_namespaced_job(NS, job_manifest(
        "dis", code, completions=1, parallelism=1, backoffLimitPerIndex=0,
        podReplacementPolicy="Failed",
        podFailurePolicy={"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
    ))
    fake.wait_for(lambda: marker.exists(), timeout=10)
    first = fake.pods(NS, job="dis")[0]["metadata"]["name"]

    fake.disrupt(first)
    job = fake.wait_for_job(NS, "dis", timeout=20)

    assert conditions(job)["Complete"]["status"] == "True"
    assert "failed" not in job["status"]  # Ignore: not counted, backoff not used up
    names = [p["metadata"]["name"] for p in fake.pods(NS, job="dis")]
    assert first not in names and len(names) == 1  # the preempted pod was deleted
    assert names[0]  # and its replacement succeeded


def test_backoff_limit_fails_the_job(fake: FakeKubeAPI, batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, job_manifest(
        "bo", "import sys; sys.exit(1)", completions=1, parallelism=1, backoffLimit=1))

    job = fake.wait_for_job(NS, "bo", timeout=20)

    assert conditions(job)["Failed"]["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2
    assert "failedIndexes" not in job["status"]


def test_max_failed_indexes_exceeded(fake: FakeKubeAPI, batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, job_manifest(
        "mf", "import sys; sys.exit(1)", completions=4, parallelism=1,
        backoffLimitPerIndex=0, maxFailedIndexes=1))

    job = fake.wait_for_job(NS, "mf", timeout=20)

    assert conditions(job)["Failed"]["reason"] == "MaxFailedIndexesExceeded"
    assert job["status"]["failedIndexes"] == "0,1"
    assert len(fake.pods(NS, job="mf")) == 2  # index 2 and 3 never started


def test_suspended_job_starts_when_resumed(
    fake: FakeKubeAPI, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, job_manifest("su", "pass", completions=1, suspend=True))
    fake.wait_for(lambda: "Suspended" in conditions(fake.store.list(JOBS, NS)[0]), timeout=10)
    assert conditions(fake.jobs(NS)[0])["Suspended"]["status"] == "True"
    time.sleep(0.2)
    assert fake.pods(NS, job="su") == []

    patched = batch.patch_namespaced_job("su", NS, {"spec": {"suspend": False}})
    assert patched.metadata.generation == 2

    job = fake.wait_for_job(NS, "su", timeout=20)
    assert conditions(job)["Complete"]["status"] == "True"
    assert conditions(job)["Suspended"]["reason"] == "JobResumed"


def test_active_deadline_fails_the_job(fake: FakeKubeAPI, batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(NS, job_manifest(
        "dl", "import time; time.sleep(60)", completions=1, activeDeadlineSeconds=1))

    job = fake.wait_for_job(NS, "dl", timeout=20)

    assert conditions(job)["Failed"]["reason"] == "DeadlineExceeded"
    assert fake.pods(NS, job="dl") == []  # the controller deleted the running pod
    assert job["status"]["failed"] == 1


def test_missing_secret_keeps_the_pod_pending_until_it_exists(
    fake: FakeKubeAPI, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "t"}}},
           {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k",
                                                          "optional": True}}}]
    code = "import os; print(os.environ['TOKEN'], 'OPT' in os.environ)"
    batch.create_namespaced_job(NS, job_manifest("ms", code, completions=1, env=env))

    def waiting_reason() -> str | None:
        pods = fake.store.list(PODS, NS)
        for p in pods:
            for cs in p.get("status", {}).get("containerStatuses") or []:
                return cs["state"].get("waiting", {}).get("reason")
        return None

    fake.wait_for(lambda: waiting_reason() == "CreateContainerConfigError", timeout=10)
    pod = fake.pods(NS, job="ms")[0]
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == \
        'secret "late" not found'
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log(pod["metadata"]["name"], NS)
    assert exc.value.status == 400

    fake.add_secret(NS, "late", {"t": "s3cret"})
    fake.wait_for_job(NS, "ms", timeout=20)
    assert fake.pod_log(NS, pod["metadata"]["name"]) == "s3cret False\n"


def test_env_sources_and_empty_dir_mount_paths(
    fake: FakeKubeAPI, batch: client.BatchV1Api, tmp_path: Path
) -> None:
    code = ("import os, pathlib; p = pathlib.Path(os.environ['CKPT']); "
            "p.mkdir(parents=True); (p / 'x').write_text('1'); print(p); print(os.getcwd()); "
            "print(os.environ['DB_url'], os.environ['POD'], os.environ['SWEEP'], "
            "os.environ['RUN'])")
    manifest = job_manifest("ed", code, completions=1, env=[
        {"name": "CKPT", "value": "/scratch/ckpt"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SWEEP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['sweep']"}}},
        {"name": "RUN", "value": "$(SWEEP)-$(JOB_ID)"},
    ])
    tspec = manifest["spec"]["template"]["spec"]
    tspec["containers"][0]["envFrom"] = [{"prefix": "DB_",
                                          "secretRef": {"name": "sweeper-storage"}}]
    tspec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    tspec["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    batch.create_namespaced_job(NS, manifest)

    fake.wait_for_job(NS, "ed", timeout=20)

    pod = fake.pods(NS, job="ed")[0]["metadata"]["name"]
    ckpt, cwd, env = fake.pod_log(NS, pod).splitlines()
    assert ckpt.endswith("/ckpt") and not ckpt.startswith("/scratch")
    assert str(fake.state_dir) in ckpt and "/scratch-" in ckpt
    assert cwd == str(tmp_path)
    assert env == f"postgresql://u:pw@db/sweeps {pod} ed ed-0"


def test_ttl_after_finished_is_honoured_on_request(tmp_path: Path) -> None:
    with FakeKubeAPI(workdir=tmp_path, honour_ttl=True) as fake:
        fake.add_namespace(NS)
        api_client = config.new_client_from_config(
            config_file=str(fake.write_kubeconfig(tmp_path / "kc", namespace=NS)))
        with api_client:
            client.BatchV1Api(api_client).create_namespaced_job(
                NS, job_manifest("ttl", "pass", completions=1, ttlSecondsAfterFinished=0))
            fake.wait_for(lambda: fake.store.rv > 0 and not fake.store.list(JOBS, NS)
                          and not fake.store.list(PODS, NS), timeout=20)
            assert any(e.type == "DELETED" and e.resource == "jobs" for e in fake.store.history)


# --------------------------------------------------------------------------- API surface


def test_api_errors_are_real_status_objects(
    fake: FakeKubeAPI, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    manifest = job_manifest("dup", "pass", completions=1, suspend=True)
    batch.create_namespaced_job(NS, manifest)
    with pytest.raises(ApiException) as exc:
        batch.create_namespaced_job(NS, manifest)
    assert exc.value.status == 409
    body = api_error(exc)
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'jobs.batch "dup" already exists'

    with pytest.raises(ApiException) as exc:
        batch.create_namespaced_job("missing", manifest)
    assert exc.value.status == 404
    assert api_error(exc)["message"] == 'namespaces "missing" not found'
    with pytest.raises(ApiException) as exc:
        batch.read_namespaced_job("nope", NS)
    assert api_error(exc)["reason"] == "NotFound" and exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        core.read_namespace("missing")
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_secret("nope", NS)
    assert api_error(exc)["message"] == 'secrets "nope" not found'

    fake.forbid("create", "jobs", namespace=NS)
    with pytest.raises(ApiException) as exc:
        batch.create_namespaced_job(NS, job_manifest("other", "pass", completions=1))
    assert exc.value.status == 403
    assert api_error(exc)["message"] == (
        'jobs.batch is forbidden: User "system:serviceaccount:sweeper:sweeper" cannot create '
        'resource "jobs" in API group "batch" in the namespace "sweeps"')
    fake.forbid("list", "pods")
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS)
    assert api_error(exc)["reason"] == "Forbidden"
    assert batch.read_namespaced_job("dup", NS).metadata.name == "dup"  # get still allowed


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda m: m["spec"]["template"]["spec"].update(containers=[]),
         "spec.template.spec.containers", "Required value"),
        (lambda m: m["spec"].pop("completions"),
         "spec.completions", "Required value: when completion mode is Indexed"),
        (lambda m: m["metadata"].update(name="Bad_Name"), "metadata.name", "Invalid value"),
        (lambda m: m["spec"]["template"]["spec"].update(restartPolicy="Always"),
         "spec.template.spec.restartPolicy", 'Unsupported value: "Always"'),
        (lambda m: m["spec"].update(podFailurePolicy={"rules": [
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]},
            podReplacementPolicy="Failed"),
         "spec.podFailurePolicy.rules[0].action", 'Unsupported value: "FailIndex"'),
    ],
)
def test_invalid_jobs_are_rejected_with_causes(
    batch: client.BatchV1Api, change: Any, field: str, message: str
) -> None:
    manifest = job_manifest("inv", "pass")
    change(manifest)
    with pytest.raises(ApiException) as exc:
        batch.create_namespaced_job(NS, manifest)
    assert exc.value.status == 422
    body = api_error(exc)
    assert body["reason"] == "Invalid"
    assert body["message"].startswith(f'Job.batch "{manifest["metadata"]["name"]}" is invalid: ')
    causes = body["details"]["causes"]
    assert any(c["field"] == field and c["message"].startswith(message) for c in causes), causes
    assert body["details"]["kind"] == "Job" and body["details"]["group"] == "batch"


def test_delete_with_propagation_terminates_running_pods(
    fake: FakeKubeAPI, batch: client.BatchV1Api, tmp_path: Path
) -> None:
    pids, termed = tmp_path / "pids", tmp_path / "termed"
    code = (f"import os, signal, sys, time\n"
            f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
            f"def bye(*a):\n    open({str(termed)!r}, 'a').write('x'); sys.exit(143)\n"
            "signal.signal(signal.SIGTERM, bye)\ntime.sleep(60)\n")
    batch.create_namespaced_job(NS, job_manifest("del", code, completions=2))
    fake.wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, timeout=10)

    batch.delete_namespaced_job("del", NS, body=client.V1DeleteOptions(
        propagation_policy="Foreground"))

    fake.wait_for(lambda: not fake.store.list(PODS, NS) and not fake.store.list(JOBS, NS),
                  timeout=10)
    assert termed.read_text() == "xx"  # both got SIGTERM
    for pid in map(int, pids.read_text().split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert ("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/del") in fake.requests


def test_delete_background_via_query_and_default_orphans(
    fake: FakeKubeAPI, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    batch.create_namespaced_job(NS, job_manifest("bg", "import time; time.sleep(60)",
                                                 completions=1))
    batch.create_namespaced_job(NS, job_manifest("or", "import time; time.sleep(60)",
                                                 completions=1))
    fake.wait_for(lambda: len(fake.store.list(PODS, NS)) == 2, timeout=10)

    status = batch.delete_namespaced_job("bg", NS, propagation_policy="Background")
    assert (status["status"] if isinstance(status, dict) else status.status) == "Success"
    fake.wait_for(lambda: not fake.pods(NS, job="bg"), timeout=10)

    # batch/v1 Jobs orphan their pods by default, with the apiserver's warning header
    _, code, headers = batch.delete_namespaced_job_with_http_info("or", NS)
    assert code == 200 and "child pods are preserved" in headers["Warning"]
    time.sleep(0.3)
    orphan = core.list_namespaced_pod(NS, label_selector="job-name=or").items
    assert len(orphan) == 1 and orphan[0].status.phase in ("Pending", "Running")
    assert not orphan[0].metadata.owner_references


def test_watch_stream_yields_events_until_complete(
    fake: FakeKubeAPI, batch: client.BatchV1Api
) -> None:
    listed = batch.list_namespaced_job(NS)
    rv = listed.metadata.resource_version
    batch.create_namespaced_job(NS, job_manifest("wa", "import time; time.sleep(0.2)"))

    seen: list[tuple[str, str | None]] = []
    w = watch.Watch()
    for event in w.stream(batch.list_namespaced_job, NS, resource_version=rv,
                          timeout_seconds=15):
        job = event["object"]
        seen.append((event["type"], job.status.completed_indexes))
        if any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or []):
            w.stop()

    assert seen[0] == ("ADDED", None)
    assert all(t == "MODIFIED" for t, _ in seen[1:]) and len(seen) >= 3
    assert seen[-1] == ("MODIFIED", "0-2")


def test_watch_honours_timeout_and_label_selector(
    fake: FakeKubeAPI, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, job_manifest("a", "pass", completions=1, suspend=True))
    batch.create_namespaced_job(NS, job_manifest("b", "pass", completions=1, suspend=True))
    fake.wait_for(lambda: all("Suspended" in conditions(j) for j in fake.store.list(JOBS, NS)))
    t0 = time.monotonic()
    events = list(watch.Watch().stream(batch.list_namespaced_job, NS,
                                       label_selector="app=sweeper,sweep=b", timeout_seconds=1))
    assert 0.9 <= time.monotonic() - t0 < 5
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "b")]
    assert [j.metadata.name for j in batch.list_namespaced_job(
        NS, label_selector="sweep in (a,b),app!=x").items] == ["a", "b"]


def test_pod_log_tail_lines_and_container(
    fake: FakeKubeAPI, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    code = "import sys\nfor i in range(5): print('line', i)\nprint('err', file=sys.stderr)"
    batch.create_namespaced_job(NS, job_manifest("lg", code, completions=1))
    fake.wait_for_job(NS, "lg", timeout=20)
    pod = core.list_namespaced_pod(NS, label_selector="job-name=lg").items[0].metadata.name

    assert read_log(core, pod, tail_lines=2) == "line 4\nerr\n"
    assert read_log(core, pod, container="runner").startswith("line 0\n")
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log(pod, NS, container="nope")
    assert exc.value.status == 400
    core.delete_namespaced_pod(pod, NS)
    fake.wait_for(lambda: not fake.store.list(PODS, NS), timeout=10)
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod_log(pod, NS)
    assert exc.value.status == 404


# --------------------------------------------------------------------------- helpers


def test_index_intervals_round_trip() -> None:
    assert format_intervals({0, 1, 2, 3, 5, 7, 8, 9}) == "0-3,5,7-9"
    assert format_intervals({0, 1}) == "0,1"
    assert format_intervals(set()) == ""
    assert parse_intervals("0-3,5,7-9") == {0, 1, 2, 3, 5, 7, 8, 9}
    assert parse_intervals("") == set()


def test_label_selector_parsing() -> None:
    reqs = parse_label_selector("a=b,c!=d,e in (f, g),!h,i")
    assert [(r.key, r.op, r.values) for r in reqs] == [
        ("a", "=", ("b",)), ("c", "!=", ("d",)), ("e", "in", ("f", "g")), ("h", "!", ()),
        ("i", "exists", ())]
    labels = {"a": "b", "e": "g", "i": ""}
    assert all(r.matches(labels) for r in reqs)
