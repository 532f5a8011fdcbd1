"""The storage proxy on a shared cluster lets in only each sweep's own pods (issue 28), against
the real control plane: the component deployed with ``--auth kubernetes``; every token checked
by the real API server's TokenReview (bound ServiceAccount tokens, projected into the trial pods
by the node as a kubelet does: a TokenRequest with the audience and lifetime, bound to the pod),
the admin role by its SubjectAccessReview against the component's ClusterRole.

- a pod of sweep A finishes its trials; a pod of sweep A that tries to touch sweep B, to delete
  or create a study, or to call Optuna's other operations is refused (PERMISSION_DENIED, one
  log line each) and the studies are unchanged;
- a call with no token, with a token for another audience, with the token of a pod that has
  been deleted: UNAUTHENTICATED;
- the CLI with an admin's token runs, grows and reads sweeps through the proxy, and the
  admin lists and deletes studies through it; a ServiceAccount without the role cannot;
- TLS (manifests/components/storage-proxy-tls): a sweep whose spec names the CA runs; a
  runner without the CA is refused with one clear line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sweeper.backends.pod import PROXY_TOKEN_DIR, proxy_token_volume
from sweeper.errors import StorageError
from sweeper.protocol import ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE
from tests.backends.test_kubernetes_proxy import ADDRESS, CA_CONFIGMAP, _log, storage_proxy
from tests.support.k8s_cluster import NS, Cluster, kubectl, port_forward

pytestmark = [pytest.mark.postgres, pytest.mark.slow]



Obj = dict[str, Any]
PROXY_SERVICE, PROXY_PORT = ADDRESS.removeprefix("grpc://").split(":")


@contextmanager
def _laptop_proxy(cluster: Cluster) -> Iterator[str]:
    """The proxy's address for a client outside the cluster (an admin's laptop): through
    ``kubectl port-forward`` to its Service."""
    with port_forward([kubectl(), "--kubeconfig", str(cluster.kubeconfig)],
                      f"svc/{PROXY_SERVICE}", int(PROXY_PORT)) as port:
        yield f"grpc://127.0.0.1:{port}"


def _spec(name: str, values: int, extra: str = "") -> str:
    xs = ", ".join(f"{i / 10:.1f}" for i in range(values))
    return f"""
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 2
trial:
  entrypoint: tests.support.fault_objectives:steady
  fixed: {{duration: 0.2, steps: 2}}
  retries: 1
parameters:
  x: {{type: float, values: [{xs}]}}
kubernetes:
  storage_proxy: {ADDRESS.removeprefix("grpc://")}
{extra}"""


def _restricted() -> Obj:
    return {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 10001,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def _pod(cluster: Cluster, name: str, sweep: str, command: list[str]) -> Obj:
    """A pod labelled as sweep ``sweep``'s, with the projected token a trial pod has."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/name": "sweeper-trial", "sweeper.dev/sweep": sweep,
            "app.kubernetes.io/part-of": "sweeper-tests"}},
        "spec": {
            "restartPolicy": "Never", "serviceAccountName": "sweeper-trial",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [proxy_token_volume()],
            "containers": [{
                "name": "probe", "image": cluster.image, "command": command,
                "env": [{"name": "SWEEPER_STORAGE", "value": ADDRESS},
                        {"name": ENV_PROXY_TOKEN_FILE, "value": f"{PROXY_TOKEN_DIR}/token"}],
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
                "securityContext": _restricted(),
                "volumeMounts": [{"name": "sweeper-proxy-token",
                                  "mountPath": PROXY_TOKEN_DIR, "readOnly": True}]}]}}


@contextmanager
def _created(cluster: Cluster, pod: Obj) -> Iterator[str]:
    name = pod["metadata"]["name"]
    core = cluster.core()
    core.create_namespaced_pod(NS, pod)
    try:
        yield name
    finally:
        cluster.delete_quietly(lambda n, ns: core.delete_namespaced_pod(
            n, ns, grace_period_seconds=0), name, NS)


def _wait_phase(cluster: Cluster, name: str, phases: set[str], timeout: float) -> Obj:
    deadline = time.monotonic() + cluster.patience(timeout)
    while True:
        pod = json.loads(cluster.core().read_namespaced_pod(name, NS,
                                                            _preload_content=False).data)
        if pod.get("status", {}).get("phase") in phases:
            return pod
        assert time.monotonic() < deadline, pod.get("status")
        time.sleep(0.3)


def _token(cluster: Cluster, account: str, audience: str, pod: Obj | None = None) -> str:
    spec: Obj = {"audiences": [audience], "expirationSeconds": 600}
    if pod is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod",
                                  "name": pod["metadata"]["name"],
                                  "uid": pod["metadata"]["uid"]}
    return str(cluster.core().create_namespaced_service_account_token(
        account, NS, {"spec": spec}).status.token)


def _studies(cluster: Cluster) -> list[Any]:
    """Every study with its attrs and its trials' states, values and attrs."""
    import optuna

    from sweeper.study.urls import driver_url

    storage = optuna.storages.RDBStorage(driver_url(cluster.url))
    try:
        out = []
        for s in storage.get_all_studies():
            trials = storage.get_all_trials(storage.get_study_id_from_name(s.study_name))
            out.append((s.study_name, s.user_attrs, [
                (t.number, t.state.name, t.values, t.user_attrs) for t in trials]))
        return sorted(out, key=lambda x: x[0])
    finally:
        storage.engine.dispose()


def _create_sweep(cluster: Cluster, text: str) -> tuple[int, int]:
    """A sweep created (not run) on the database: (its study id, its index 0's trial id)."""
    from sweeper.study import create_or_resume, open_storage

    storage = open_storage(cluster.url)
    try:
        sweep, _ = create_or_resume(storage, cluster.parse(text))
        return sweep.study_id, storage.attempts(sweep.study_id, 0)[0].trial_id
    finally:
        storage.close()


def test_a_sweeps_pods_run_it_and_touch_no_other_sweep(cluster: Cluster) -> None:
    spec_a = cluster.spec(_spec("team-a", 4))
    study_b, trial_b = _create_sweep(cluster, _spec("team-b", 3))
    with storage_proxy(cluster) as proxy_pod:
        result = cluster.sweeper("run", spec_a, "--backend", "kubernetes")
        assert result.exit_code == 0, result.output
        assert cluster.finished_per_index("team-a") == {i: 1 for i in range(4)}
        before = _studies(cluster)
        probe = _pod(cluster, "team-a-probe", "team-a", [
            "python", "-m", "tests.support.proxy_probe", "team-a", "team-b", str(study_b),
            str(trial_b)])
        with _created(cluster, probe) as name:
            pod = _wait_phase(cluster, name, {"Succeeded", "Failed"}, 60)
            log = bytes(cluster.core().read_namespaced_pod_log(
                name, NS, _preload_content=False).data).decode()
            assert pod["status"]["phase"] == "Succeeded", log
        proxy_log = _log(cluster, proxy_pod)
    tries = {d["try"]: d["code"] for d in map(json.loads, log.splitlines()) if "try" in d}
    assert tries.pop("read own study") == "OK" and tries.pop("read own trials") == "OK"
    assert tries == {k: "PERMISSION_DENIED" for k in tries} and len(tries) == 11, tries
    assert _studies(cluster) == before  # nothing written, nothing deleted or created
    refused = [x for x in proxy_log.splitlines() if "refused" in x]
    assert len(refused) == 11, refused  # one line per refused call
    assert any(f"refused /optuna.StorageService/DeleteStudy for pod {NS}/team-a-probe "
               f"(system:serviceaccount:{NS}:sweeper-trial): Optuna's DeleteStudy is not a "
               "runner's operation (PERMISSION_DENIED)" in x for x in refused), refused
    assert any(f"trial {trial_b} is not in sweep 'team-a'" in x for x in refused), refused


def _codes(url: str, token: str | None, monkeypatch: pytest.MonkeyPatch) -> str:
    from sweeper.study.remote.client import ProxyStorage

    monkeypatch.delenv(ENV_PROXY_TOKEN_FILE, raising=False)
    if token is None:
        monkeypatch.delenv(ENV_PROXY_TOKEN, raising=False)
    else:
        monkeypatch.setenv(ENV_PROXY_TOKEN, token)
    storage = ProxyStorage(url)
    try:
        storage.get_all_studies()
        return "OK"
    except StorageError as e:  # "storage proxy URL refused get_all_studies (CODE): why"
        found = re.search(r"\(([A-Z_]+)\)", str(e))
        return found.group(1) if found else str(e)
    finally:
        storage.close()


@contextmanager
def _admin_account(cluster: Cluster, name: str, admin: bool) -> Iterator[str]:
    """A ServiceAccount (bound to the component's sweeper-proxy-admin ClusterRole when
    ``admin``); its token for the proxy's audience."""
    from kubernetes.client import RbacAuthorizationV1Api

    core, rbac = cluster.core(), RbacAuthorizationV1Api(cluster.api())
    labels = {"app.kubernetes.io/part-of": "sweeper-tests"}
    core.create_namespaced_service_account(NS, {"metadata": {"name": name, "labels": labels}})
    if admin:
        rbac.create_namespaced_role_binding(NS, {
            "metadata": {"name": name, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "sweeper-proxy-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]})
    try:
        yield _token(cluster, name, "sweeper-proxy")
    finally:
        cluster.delete_quietly(rbac.delete_namespaced_role_binding, name, NS)
        cluster.delete_quietly(core.delete_namespaced_service_account, name, NS)


def test_tokens_that_do_not_check_out_and_the_admin_role(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_small, spec_grown = cluster.spec(_spec("grows", 2)), cluster.spec(_spec("grows", 3))
    with storage_proxy(cluster) as proxy_pod, _laptop_proxy(cluster) as local, \
            _admin_account(cluster, "sweeper-test-admin", True) as admin, \
            _admin_account(cluster, "sweeper-test-user", False) as user:
        sleeper = _pod(cluster, "deleted-pod", "grows", ["sleep", "600"])
        with _created(cluster, sleeper) as name:
            alive = _wait_phase(cluster, name, {"Running"}, 30)
            stolen = _token(cluster, "sweeper-trial", "sweeper-proxy", alive)
        deadline = time.monotonic() + cluster.patience(30)
        while cluster.core().list_namespaced_pod(NS, field_selector=f"metadata.name={name}"
                                                 ).items:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        other_audience = _token(cluster, "sweeper-trial", "vault")
        assert _codes(local, None, monkeypatch) == "UNAUTHENTICATED"
        assert _codes(local, other_audience, monkeypatch) == "UNAUTHENTICATED"
        assert _codes(local, stolen, monkeypatch) == "UNAUTHENTICATED"
        assert _codes(local, "not.a.token", monkeypatch) == "UNAUTHENTICATED"
        assert _codes(local, user, monkeypatch) == "PERMISSION_DENIED"

        # The CLI of an admin (a laptop, through a port-forward).
        env: dict[str, str | None] = {"SWEEPER_STORAGE": local, ENV_PROXY_TOKEN: admin,
                                      ENV_PROXY_TOKEN_FILE: None}
        ran = cluster.sweeper("run", spec_small, "-p", "2", **env)
        assert ran.exit_code == 0, ran.output
        grown = cluster.sweeper("run", spec_grown, "-p", "2", **env)
        assert grown.exit_code == 0, grown.output
        assert cluster.finished_per_index("grows") == {0: 1, 1: 1, 2: 1}
        status = cluster.sweeper("status", "grows", "--no-kubernetes", **env)
        assert status.exit_code == 0 and "COMPLETE" in status.output, status.output
        # ... and a ServiceAccount without the role: one line, nothing changed.
        for args in (["status", "grows", "--no-kubernetes"], ["run", spec_grown, "-p", "1"]):
            denied = cluster.sweeper(*args, **{**env, ENV_PROXY_TOKEN: user})
            assert denied.exit_code != 0, denied.output
            assert "(PERMISSION_DENIED)" in denied.output, denied.output
            assert len(denied.output.strip().splitlines()) == 1, denied.output
        assert cluster.finished_per_index("grows") == {0: 1, 1: 1, 2: 1}
        # `sweeper list` and `delete` read the database directly (grouped queries, the
        # artifact index); what they need of the proxy, listing and deleting studies, an admin
        # may call and a user without the role may not.
        from sweeper.study.remote.client import ProxyStorage

        monkeypatch.setenv(ENV_PROXY_TOKEN, admin)
        storage = ProxyStorage(local)
        assert "grows" in {s.study_name for s in storage.get_all_studies()}
        storage.delete_study(storage.get_study_id_from_name("grows"))
        assert "grows" not in {s.study_name for s in storage.get_all_studies()}
        storage.close()
        proxy_log = _log(cluster, proxy_pod)
    lines = [x for x in proxy_log.splitlines() if "UNAUTHENTICATED" in x]
    assert len(lines) == 4, lines
    assert any("no credential" in x for x in lines)
    assert any("token review:" in x for x in lines)
    assert admin not in proxy_log and user not in proxy_log and stolen not in proxy_log


def _pki(d: Path) -> Path:
    """A CA and the proxy's certificate for its Service names (and 127.0.0.1, for a
    port-forward), as cert-manager would issue it."""
    import subprocess

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=sweeper-test-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr",
            "-subj", "/CN=sweeper-storage-proxy")
    (d / "ext").write_text("subjectAltName=DNS:sweeper-storage-proxy,"
                           f"DNS:sweeper-storage-proxy.{NS}.svc,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "ext")
    return d


def test_tls_a_runner_with_the_ca_runs_and_one_without_is_refused(cluster: Cluster) -> None:
    pki = cluster.tmp / "pki"
    pki.mkdir()
    with_ca = cluster.spec(_spec("tls-ca", 2, f"  storage_proxy_ca: {CA_CONFIGMAP}\n"))
    without = cluster.spec(_spec("tls-no-ca", 1).replace("retries: 1", "retries: 0"))
    with storage_proxy(cluster, tls=_pki(pki)):
        ran = cluster.sweeper("run", with_ca, "--backend", "kubernetes")
        assert ran.exit_code == 0, ran.output
        assert cluster.finished_per_index("tls-ca") == {0: 1, 1: 1}
        refused = cluster.sweeper("run", without, "--backend", "kubernetes")
        assert refused.exit_code != 0, refused.output
        (pod,) = cluster.pods("tls-no-ca")
        log = bytes(cluster.core().read_namespaced_pod_log(
            pod["metadata"]["name"], NS, _preload_content=False).data).decode()
    hits = [x for x in log.splitlines() if "serves TLS" in x]
    assert len(hits) == 1 and "set $SWEEPER_PROXY_CA to the CA that signed its " \
        "certificate" in hits[0], log
