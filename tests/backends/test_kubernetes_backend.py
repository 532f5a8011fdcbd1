"""The Kubernetes backend end to end: the official `kubernetes` client against a real
kube-apiserver, the Job controller of kube-controller-manager and kube-scheduler (the local
control plane of tests/cluster, whose node runs each pod as a container of the test image),
the pods and the CLI sharing one real PostgreSQL database. The pods get the storage URL only
from the Secret, as on any cluster.

The same tests run against a cluster of your own when SWEEPER_TEST_KUBECONFIG and
SWEEPER_TEST_IMAGE are set (the ``cluster`` fixture in conftest.py; docs/testing.md).
The Job's schema is checked in test_manifests.py.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from click.testing import Result
from optuna.trial import TrialState

from sweeper._optuna_compat import trial_id_of
from sweeper.accounting import Ending, trial_usages
from sweeper.backends import manifests as m
from sweeper.backends.kubernetes import ClientFactory, KubernetesBackend, job_info, parse_intervals
from sweeper.study import create_or_resume, open_storage
from tests.support.k8s_cluster import NS, REPO, Cluster

pytestmark = pytest.mark.postgres

FLAKY = "tests.support.k8s_objectives:flaky"
SLOW = "tests.support.k8s_objectives:slow"
QUADRATIC = "trial_runner.examples.synthetic:quadratic"


def _grid(name: str, entrypoint: str = QUADRATIC, n: int = 6, parallelism: int = 3,
          retries: int = 1, fixed: str = "{epochs: 2}", extra: str = "") -> str:
    return f"""
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: {parallelism}
trial:
  entrypoint: {entrypoint}
  fixed: {fixed}
  retries: {retries}
parameters:
  x: {{type: int, low: 0, high: {n - 1}}}
{extra}"""


def _role_rules() -> set[tuple[str, str]]:
    """(verb, resource) pairs the CLI's Role in manifests/rbac.yaml grants."""
    for doc in yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text()):
        if doc and doc.get("kind") == "Role" and doc["metadata"]["name"] == "sweeper":
            return {(verb, resource) for rule in doc["rules"] for resource in rule["resources"]
                    for verb in rule["verbs"]}
    raise AssertionError("no Role sweeper in manifests/rbac.yaml")


def _contains(whole: Any, part: Any) -> bool:
    """Every field of ``part`` is in ``whole`` with the same value (lists item by item)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _contains(whole[k], v)
                                               for k, v in part.items())
    if isinstance(part, list):
        return isinstance(whole, list) and len(whole) == len(part) and all(
            _contains(w, p) for w, p in zip(whole, part, strict=True))
    return bool(whole == part)


def _one_error_line(result: Result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output
    return errors[0]


# --------------------------------------------------------------------------- happy paths


def test_run_grid_one_finished_trial_per_index(cluster: Cluster) -> None:
    spec = cluster.spec(_grid("k8s-grid"))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    assert "created Job sweeper/k8s-grid: 6 indexes in 6 pods, parallelism 3" in result.output
    assert "this launch: 6 of 6 indexes finished" in result.output
    assert cluster.finished_per_index("k8s-grid") == {i: 1 for i in range(6)}
    assert sum(len(ts) for ts in cluster.trials("k8s-grid").values()) == 6

    (job,) = cluster.jobs("k8s-grid")
    assert job["metadata"]["name"] == "k8s-grid"
    assert job["status"]["completedIndexes"] == "0-5" and job["status"]["succeeded"] == 6
    pods = cluster.pods("k8s-grid")
    assert len(pods) == 6 and {p["status"]["phase"] for p in pods} == {"Succeeded"}

    # The password went to the pods through the Secret only: not in any object or output.
    password = urlsplit(cluster.url).password
    assert password
    assert password not in result.output
    assert password not in json.dumps(cluster.jobs("k8s-grid") + pods)

    status = cluster.sweeper("status", "k8s-grid")
    assert status.exit_code == 0, status.output
    assert "Job sweeper/k8s-grid: Complete" in status.output
    assert "succeeded 6, failed 0; indexes completed 0-5, failed - (of 6)" in status.output
    as_json = json.loads(cluster.sweeper("status", "k8s-grid", "--format", "json").stdout)
    assert as_json["kubernetes_jobs"][0]["completed_indexes"] == list(range(6))

    logs = cluster.sweeper("logs", "k8s-grid", "--index", "4")
    assert logs.exit_code == 0, logs.output
    assert "index 4: trial #" in logs.stdout and "complete: loss=" in logs.stdout
    assert "Job k8s-grid, index 4" in logs.stderr

    # Without any cluster configuration, status still works and skips the Jobs.
    offline = cluster.sweeper("status", "k8s-grid", KUBECONFIG=str(cluster.tmp / "none"),
                              HOME=str(cluster.tmp))
    assert offline.exit_code == 0, offline.output
    assert "Job " not in offline.output and "6/6 indexes finished" in offline.output

    # Running the same spec again finds nothing to do and creates no Job.
    again = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert again.exit_code == 0 and "6 of 6 indexes already finished" in again.output
    assert len(cluster.jobs("k8s-grid")) == 1


def test_the_cli_needs_only_its_role_and_submits_what_render_prints(cluster: Cluster) -> None:
    """run, status, logs, cancel and resume as the ServiceAccount ``sweeper`` of
    manifests/rbac.yaml: the real apiserver's RBAC allows every request (a missing verb in the
    Role fails the command). run submits exactly the objects render prints, never the
    password (the apiserver's audit log of the local control plane)."""
    kubeconfig, user = cluster.service_account_kubeconfig("sweeper")
    spec = cluster.spec(_grid("k8s-rbac", n=2))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes", KUBECONFIG=str(kubeconfig))
    assert result.exit_code == 0, result.output
    for args in (["status", "k8s-rbac"], ["logs", "k8s-rbac", "--index", "1"],
                 ["cancel", "k8s-rbac"], ["resume", "k8s-rbac"]):
        r = cluster.sweeper(*args, KUBECONFIG=str(kubeconfig))
        assert r.exit_code == 0, (args, r.output)
    assert "Forbidden" not in result.output
    if cluster.local is None:
        return  # the audit log is the local control plane's
    events = cluster.audit_events(user)
    assert {e["responseStatus"]["code"] for e in events} <= {200, 201, 404}, \
        [(e["verb"], e["requestURI"], e["responseStatus"]) for e in events
         if e["responseStatus"]["code"] >= 400 and e["responseStatus"]["code"] != 404]
    creates = [e["requestObject"] for e in events if e["verb"] == "create"
               and e["objectRef"]["resource"] in ("jobs", "configmaps")]
    # With --storage, render keeps the code snapshot in the study as run did, and names it.
    rendered = list(yaml.safe_load_all(cluster.sweeper("render", spec, "--storage",
                                                       cluster.url).stdout))
    # The spec's ConfigMap, then the Job; the audit log shows them with the apiserver's
    # defaults filled in, so what render prints must be contained in what arrived.
    # This run's: the audit log outlives a test session, and a snapshot of another test
    # directory (another ServiceAccount token in it) is another snapshot.
    assert len(creates) >= 2
    for sent, printed in zip(creates[-2:], rendered, strict=True):
        assert _contains(sent, printed), (sent, printed)
    password = urlsplit(cluster.url).password
    assert password
    assert password not in json.dumps([e.get("requestObject") for e in events])


def test_run_tpe_with_several_indexes_per_pod(cluster: Cluster) -> None:
    spec = cluster.spec("""
name: k8s-tpe
method: tpe
objective: {metric: loss, direction: minimize}
trials: 6
parallelism: 2
sampler: {n_startup_trials: 2}
trial:
  entrypoint: trial_runner.examples.synthetic:quadratic
  fixed: {epochs: 2}
  retries: 1
parameters:
  x: {type: float, low: 0, high: 1}
  y: {type: float, low: 0, high: 1}
kubernetes: {indexes_per_pod: 2}
""")
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    assert "6 indexes in 3 pods, parallelism 2" in result.output
    assert cluster.finished_per_index("k8s-tpe") == {i: 1 for i in range(6)}
    assert sum(len(ts) for ts in cluster.trials("k8s-tpe").values()) == 6
    (job,) = cluster.jobs("k8s-tpe")
    assert job["spec"]["completions"] == 3 and job["status"]["succeeded"] == 3


def test_retryable_exit_replaces_the_pod_and_no_retry_fails_only_that_index(
        cluster: Cluster) -> None:
    spec = cluster.spec(_grid("k8s-flaky", FLAKY, n=4, parallelism=4, retries=2, fixed="{}"))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 1, result.output
    assert "1 index(es) failed for good: 1" in _one_error_line(result)
    assert "this launch: 3 of 4 indexes finished, 1 failed for good (1)" in result.output
    assert "exited with code 1 (retryable failure)" in result.output
    assert "exited with code 3 (failed (no retry))" in result.output

    trials = cluster.trials("k8s-flaky")
    assert [t.state for t in trials[0]] == [TrialState.FAIL, TrialState.COMPLETE]
    assert [t.state for t in trials[1]] == [TrialState.FAIL]  # not retried: FailIndex
    assert cluster.finished_per_index("k8s-flaky") == {0: 1, 1: 0, 2: 1, 3: 1}

    (job,) = cluster.jobs("k8s-flaky")
    assert parse_intervals(job["status"]["completedIndexes"]) == [0, 2, 3]
    assert job["status"]["failedIndexes"] == "1"
    by_index: dict[str, list[Any]] = {}
    for pod in cluster.pods("k8s-flaky"):
        k = pod["metadata"]["annotations"][m.COMPLETION_INDEX]
        by_index.setdefault(k, []).append(pod["status"]["phase"])
    assert by_index["0"] == ["Failed", "Succeeded"]  # replaced once
    assert by_index["1"] == ["Failed"]
    assert by_index["2"] == by_index["3"] == ["Succeeded"]

    # logs shows the latest attempt of index 0: the pod that succeeded.
    logs = cluster.sweeper("logs", "k8s-flaky", "--index", "0")
    assert logs.exit_code == 0, logs.output
    assert "objective output of index 0" in logs.stdout and "attempt 1, trial #" in logs.stderr


# --------------------------------------------------------------------------- detach, cancel, resume


def test_detach_cancel_and_sparse_resume(cluster: Cluster) -> None:
    spec = cluster.spec(_grid("k8s-slow", SLOW, n=6, parallelism=2, fixed="{delay: 1.2}"))
    started = time.monotonic()
    result = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 5
    assert "detached: Job sweeper/k8s-slow runs on" in result.output
    assert "this launch:" not in result.output  # nothing is known yet
    assert job_info(cluster.jobs("k8s-slow")[0], 6).state == "Running"

    def states() -> list[TrialState]:
        return [t.state for ts in cluster.trials("k8s-slow").values() for t in ts]

    deadline = time.monotonic() + cluster.patience(30)
    while not (states().count(TrialState.COMPLETE) >= 2 and TrialState.RUNNING in states()):
        assert time.monotonic() < deadline, states()
        time.sleep(0.1)

    cancelled = cluster.sweeper("cancel", "k8s-slow")
    assert cancelled.exit_code == 0, cancelled.output
    assert "deleted Job sweeper/k8s-slow" in cancelled.stdout
    assert "sweeper resume k8s-slow" in cancelled.output
    assert cluster.jobs("k8s-slow") == [] and cluster.pods("k8s-slow") == []
    assert TrialState.RUNNING not in states()
    # Deleting the Job sent its pods SIGTERM; sweeper cancel had marked the launch first, so
    # their runners recorded their attempts as stopped by sweeper, not as preempted.
    failed = [t for ts in cluster.trials("k8s-slow").values() for t in ts
              if t.state == TrialState.FAIL]
    endings = {u.ending for t in failed for u in trial_usages(t.user_attrs)}
    assert Ending.PAUSED in endings and Ending.PREEMPTED not in endings, endings
    missing = [i for i, n in cluster.finished_per_index("k8s-slow").items() if n == 0]
    missing += [i for i in range(6) if i not in cluster.trials("k8s-slow")]
    missing = sorted(missing)
    assert 0 < len(missing) <= 4

    # --parallelism goes into the spec the backend reads (not into the spec's hash).
    resumed = cluster.sweeper("resume", "k8s-slow", "--parallelism", "4")
    assert resumed.exit_code == 0, resumed.output
    assert f"created Job sweeper/k8s-slow-r1: {len(missing)} indexes in {len(missing)} pods, " \
           f"parallelism {len(missing)}" in resumed.output
    assert "sparse resume Job" in resumed.output
    assert cluster.finished_per_index("k8s-slow") == {i: 1 for i in range(6)}
    (job,) = cluster.jobs("k8s-slow")
    assert job["metadata"]["name"] == "k8s-slow-r1"
    assert job["metadata"]["annotations"][m.INDEX_MAP_ANNOTATION] == ",".join(map(str, missing))
    assert job["spec"]["completions"] == len(missing)

    # The log of a resumed index comes from the resume Job's pod (job index 0 -> missing[0]).
    logs = cluster.sweeper("logs", "k8s-slow", "--index", str(missing[-1]))
    assert logs.exit_code == 0, logs.output
    assert f"objective output of index {missing[-1]}" in logs.stdout
    assert "Job k8s-slow-r1" in logs.stderr
    finished_first = next(i for i in range(6) if i not in missing)
    gone = cluster.sweeper("logs", "k8s-slow", "--index", str(finished_first))
    assert gone.exit_code == 3 and "no pod of sweep k8s-slow ran index" in _one_error_line(gone)


def test_ctrl_c_while_watching_leaves_the_job_running(cluster: Cluster) -> None:
    spec = cluster.parse(_grid("k8s-ctrlc", SLOW, n=2, parallelism=1, fixed="{delay: 30}"))
    sweep, _ = create_or_resume(open_storage(cluster.url), spec)
    backend = KubernetesBackend(ClientFactory(str(cluster.kubeconfig)), poll_interval_s=0.1)

    def tick() -> None:
        raise KeyboardInterrupt

    result = backend.run(sweep, [0, 1], storage_url=cluster.url, tick=tick)
    assert result.interrupted and result.detached
    assert "Job sweeper/k8s-ctrlc keeps running" in result.messages[0]
    assert "sweeper cancel k8s-ctrlc" in result.messages[0]
    (job,) = cluster.jobs("k8s-ctrlc")
    assert job_info(job, 2).state == "Running" and job["spec"]["parallelism"] == 1

    # A second launch while that Job is active is refused, in one line.
    again = cluster.sweeper("run", cluster.spec(_grid("k8s-ctrlc", SLOW, n=2, parallelism=1,
                                                      fixed="{delay: 30}")),
                            "--backend", "kubernetes")
    assert again.exit_code == 3
    assert "Job sweeper/k8s-ctrlc of sweep k8s-ctrlc is still running" in _one_error_line(again)

    # Index 1 has not started (parallelism 1); make its trial RUNNING as if a pod had claimed
    # it and died without a word (SIGKILL, node lost): cancel must fail it for a quick resume.
    (waiting,) = cluster.trials("k8s-ctrlc")[1]
    assert sweep.storage.set_trial_state_values(trial_id_of(waiting), TrialState.RUNNING)
    cancelled = cluster.sweeper("cancel", "k8s-ctrlc")
    assert cancelled.exit_code == 0, cancelled.output
    assert "running trial(s) FAIL (cancelled)" in cancelled.stdout
    assert f"#{waiting.number}" in cancelled.stdout
    assert cluster.jobs("k8s-ctrlc") == [] and cluster.pods("k8s-ctrlc") == []
    trials = cluster.trials("k8s-ctrlc")
    assert [t.state for t in trials[1]] == [TrialState.FAIL]
    assert trials[1][0].user_attrs["sweeper:fail_reason"] == "cancelled (sweeper cancel)"
    assert TrialState.RUNNING not in [t.state for ts in trials.values() for t in ts]


# --------------------------------------------------------------------------- errors


def test_config_error_fails_the_job_with_the_runner_reason(cluster: Cluster) -> None:
    spec = cluster.spec(_grid("k8s-config", "tests.support.k8s_objectives:nope", n=3,
                              retries=3, fixed="{}"))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 2, result.output
    line = _one_error_line(result)
    assert "Job sweeper/k8s-config failed: a trial runner reported a configuration error " \
           "(exit code 4): <study k8s-config>: trial.entrypoint: module " \
           "'tests.support.k8s_objectives' has no attribute 'nope' (pod k8s-config-" in line
    (job,) = cluster.jobs("k8s-config")
    assert job_info(job, 3).reason == "PodFailurePolicy"  # FailJob: no retries were spent
    assert len(cluster.pods("k8s-config")) <= 3


def test_pods_that_cannot_start_are_reported(cluster: Cluster) -> None:
    spec = cluster.parse(_grid("k8s-stuck", n=2, parallelism=1))
    spec = m.with_kubernetes(spec, storage_secret="no-such-secret")
    sweep, _ = create_or_resume(open_storage(cluster.url), spec)
    said: list[str] = []
    backend = KubernetesBackend(ClientFactory(str(cluster.kubeconfig)), poll_interval_s=0.1,
                                echo=said.append)
    backend.stuck_check_interval_s = 0.2
    deadline = time.monotonic() + cluster.patience(20)

    def tick() -> None:
        if any("cannot start" in line for line in said) or time.monotonic() > deadline:
            raise KeyboardInterrupt

    result = backend.run(sweep, [0, 1], storage_url=cluster.url, tick=tick)
    assert result.interrupted
    (warning,) = [line for line in said if "cannot start" in line]
    assert warning.startswith("warning: index 0: pod k8s-stuck-0-")
    assert "CreateContainerConfigError" in warning and "no-such-secret" in warning


def test_pods_the_job_cannot_create_are_reported(cluster: Cluster) -> None:
    """Pod Security admission ("restricted" on the namespace) refuses a pod with an inline NFS
    volume: the Job controller records FailedCreate and run says so instead of waiting in
    silence."""
    spec = cluster.parse(_grid("k8s-refused", n=2, parallelism=1, extra="""kubernetes:
  volumes:
    - {name: shared, nfs: {server: nfs.internal, path: /sweeps}, mount_path: /shared}"""))
    sweep, _ = create_or_resume(open_storage(cluster.url), spec)
    said: list[str] = []
    backend = KubernetesBackend(ClientFactory(str(cluster.kubeconfig)), poll_interval_s=0.1,
                                echo=said.append)
    backend.stuck_check_interval_s = 0.2
    deadline = time.monotonic() + cluster.patience(20)

    def tick() -> None:
        if any("cannot create pods" in line for line in said) or time.monotonic() > deadline:
            raise KeyboardInterrupt

    result = backend.run(sweep, [0, 1], storage_url=cluster.url, tick=tick)
    assert result.interrupted
    (warning,) = [line for line in said if "cannot create pods" in line]
    assert warning.startswith("warning: Job sweeper/k8s-refused cannot create pods: ")
    assert 'violates PodSecurity "restricted' in warning and "nfs" in warning
    assert cluster.pods("k8s-refused") == []


def test_permission_denied_names_the_missing_permission(cluster: Cluster) -> None:
    """A ServiceAccount whose Role lacks ``create jobs``: the real apiserver's 403, in one line
    that names the permission, the user and the manifest that grants it."""
    rules = yaml.safe_load_all((REPO / "manifests" / "rbac.yaml").read_text())
    role = next(d for d in rules
                if d and d["kind"] == "Role" and d["metadata"]["name"] == "sweeper")
    for rule in role["rules"]:
        if "jobs" in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    _limited_account(cluster, "sweeper-no-jobs", role["rules"])
    kubeconfig, user = cluster.service_account_kubeconfig("sweeper-no-jobs")
    spec = cluster.spec(_grid("k8s-forbidden", n=2))
    r = cluster.sweeper("run", spec, "--backend", "kubernetes", KUBECONFIG=str(kubeconfig))
    assert r.exit_code == 3
    line = _one_error_line(r)
    assert "permission denied:" in line and "may not create jobs.batch in namespace sweeper" \
        in line and user in line
    assert "manifests/rbac.yaml" in line


def _limited_account(cluster: Cluster, name: str, rules: list[dict[str, Any]]) -> None:
    """ServiceAccount NAME bound to a Role NAME with these rules (replaced if there)."""
    from kubernetes.client import RbacAuthorizationV1Api
    from kubernetes.client.exceptions import ApiException

    rbac = RbacAuthorizationV1Api(cluster.api())
    meta = {"name": name, "namespace": NS}
    for create, replace, body in (
            (cluster.core().create_namespaced_service_account, None, {"metadata": meta}),
            (rbac.create_namespaced_role, rbac.replace_namespaced_role,
             {"metadata": meta, "rules": rules}),
            (rbac.create_namespaced_role_binding, None, {
                "metadata": meta, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                              "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]})):
        try:
            create(NS, body)
        except ApiException as e:
            if e.status != 409:
                raise
            if replace is not None:
                replace(name, NS, body)


def test_api_errors_are_one_clear_line(cluster: Cluster) -> None:
    spec = cluster.spec(_grid("k8s-err", n=2))

    r = cluster.sweeper("run", spec, "--backend", "kubernetes", "--namespace", "nowhere")
    assert r.exit_code == 3
    assert _one_error_line(r) == ("error: namespace nowhere not found (kubectl apply -k "
                                  "manifests/ creates sweeper)")

    # A Job of that name that sweeper did not create (no sweep label).
    cluster.batch().create_namespaced_job(NS, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "k8s-err"},
        "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox", "command": ["true"]}]}}}})
    r = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert r.exit_code == 3
    assert _one_error_line(r) == ("error: Job k8s-err already exists (sweeper cancel k8s-err, "
                                  "or resume)")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = _kubeconfig(cluster.tmp / "dead-kubeconfig", f"http://127.0.0.1:{port}")
    r = cluster.sweeper("run", spec, "--backend", "kubernetes", "--kubeconfig", str(dead))
    assert r.exit_code == 3
    assert _one_error_line(r).startswith(
        f"error: cannot reach the Kubernetes API server at http://127.0.0.1:{port}: "
        "connection refused")
    r = cluster.sweeper("status", "k8s-err", "--kubernetes", "--kubeconfig", str(dead))
    assert r.exit_code == 3 and "connection refused" in _one_error_line(r)

    r = cluster.sweeper("run", spec, "--backend", "kubernetes",
                        KUBECONFIG=str(cluster.tmp / "missing"), HOME=str(cluster.tmp))
    assert r.exit_code == 3
    assert _one_error_line(r).startswith("error: no Kubernetes configuration")


def _kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for ``server`` (plain HTTP, a dummy token)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}]}))
    return path
