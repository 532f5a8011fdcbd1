"""The storage proxy as a user deploys it: the kustomize component
manifests/components/storage-proxy applied with `kubectl apply -k` (its Service, its Deployment
of `sweeper proxy` reading the database URL from Secret ``sweeper-db``, its PodDisruptionBudget,
NetworkPolicies and dashboard ConfigMap), then a Kubernetes sweep whose trial pods have no
database Secret at all, only ``grpc://sweeper-storage-proxy:13000``. Every index finishes
exactly once through the proxy, and neither a trial pod nor the CLI's output holds the password.
Against the local cluster (the real Deployment, ReplicaSet and EndpointSlice controllers; the
real node runs the proxy's pod and the trial pods reach it through its Service's name; its
NetworkPolicies are applied, not enforced: the bridge CNI has no policy engine) or a cluster
of your own, and a real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sweeper.backends import manifests as m
from tests.support.chaos import check
from tests.support.k8s_cluster import (
    NS,
    REAL_SECRET,
    REPO,
    Cluster,
    kubectl,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


COMPONENT = REPO / "manifests" / "components" / "storage-proxy"
PROXY = "sweeper-storage-proxy"
DB_SECRET = "sweeper-db"
PROXY_PODS = f"app.kubernetes.io/name={PROXY},app.kubernetes.io/instance={PROXY}"
#: What `sweeper proxy` prints once it serves (storage-proxy.yaml: --host 0.0.0.0 --port 13000).
SERVING = "on grpc://0.0.0.0:13000"
ADDRESS = f"grpc://{PROXY}:13000"

SPEC = f"""
name: via-proxy
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: 3
trial:
  entrypoint: tests.support.fault_objectives:steady
  fixed: {{duration: 0.4, steps: 4}}
  retries: 1
parameters:
  x: {{type: float, values: [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]}}
kubernetes:
  storage_proxy: {ADDRESS.removeprefix("grpc://")}
"""

Obj = dict[str, Any]


def _kubectl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kubectl(), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=180)


def _ok(cluster: Cluster, *args: str) -> str:
    out = _kubectl(cluster, *args)
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out.stdout


def _image(image: str) -> Obj:
    """kustomize's ``images:`` entry that swaps the component's image for the test image."""
    entry: Obj = {"name": "sweeper-trial-runner"}
    if "@" in image:
        entry["newName"], entry["digest"] = image.split("@", 1)
        return entry
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        name, tag = image, "latest"
    entry.update(newName=name, newTag=tag)
    return entry


#: TLS on the proxy's port (issue 28): the component on top of storage-proxy, the Secret it
#: reads, and the ConfigMap with the CA the sweeps' pods verify it with.
TLS_COMPONENT = REPO / "manifests" / "components" / "storage-proxy-tls"
TLS_SECRET, CA_CONFIGMAP = "sweeper-storage-proxy-tls", "sweeper-proxy-ca"


def _overlay(cluster: Cluster, tls: bool = False) -> Path:
    """An overlay of the component alone, as a user's cluster directory would add it (the
    namespace and RBAC of the base are already there); with ``tls``, the TLS component too."""
    overlay = cluster.tmp / "storage-proxy-overlay"
    overlay.mkdir()
    components = [COMPONENT, TLS_COMPONENT] if tls else [COMPONENT]
    kustomization: Obj = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        # kustomize takes a component only by a relative path
        "components": [os.path.relpath(c, overlay) for c in components],
        "images": [_image(cluster.image)]}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return overlay


def _put_db_secret(cluster: Cluster) -> None:
    """Secret sweeper-db, key url: this test's database as the pods reach it (the fixture's
    Secret holds exactly that: cluster.url on the local cluster)."""
    from kubernetes.client.exceptions import ApiException

    core = cluster.core()
    url = core.read_namespaced_secret(REAL_SECRET, NS).data["url"]
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": DB_SECRET,
                         "labels": {"app.kubernetes.io/part-of": "sweeper-tests"}},
            "data": {"url": url}}
    try:
        core.create_namespaced_secret(NS, body)
    except ApiException as e:
        if e.status != 409:
            raise
        core.replace_namespaced_secret(DB_SECRET, NS, body)


def _proxy_pods(cluster: Cluster) -> list[Obj]:
    resp = cluster.core().list_namespaced_pod(NS, label_selector=PROXY_PODS,
                                              _preload_content=False)
    return [p for p in json.loads(resp.data)["items"] if not p["metadata"].get("deletionTimestamp")]


def _log(cluster: Cluster, pod: Obj) -> str:
    # The raw bytes: for a log, kubernetes 36's client otherwise returns str(bytes), "b'...'".
    resp = cluster.core().read_namespaced_pod_log(pod["metadata"]["name"], NS,
                                                  container="proxy", _preload_content=False)
    return bytes(resp.data).decode()


def _serving_pod(cluster: Cluster) -> Obj:
    """The one proxy pod once `sweeper proxy` in it says it serves (its log says so before
    its readiness probe does)."""
    deadline = time.monotonic() + cluster.patience(30)
    while True:
        pods = _proxy_pods(cluster)
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        if len(pods) == 1 and running and SERVING in _log(cluster, running[0]):
            return running[0]
        assert time.monotonic() < deadline, [(p["metadata"]["name"], p["status"]) for p in pods]
        time.sleep(0.3)


def _put_tls(cluster: Cluster, pki: Path) -> None:
    """The certificate's Secret (what cert-manager would write) and the CA's ConfigMap."""
    from kubernetes.client.exceptions import ApiException

    cluster.put_secret(TLS_SECRET, {"tls.crt": (pki / "tls.crt").read_text(),
                                    "tls.key": (pki / "tls.key").read_text()})
    body = {"metadata": {"name": CA_CONFIGMAP,
                         "labels": {"app.kubernetes.io/part-of": "sweeper-tests"}},
            "data": {"ca.crt": (pki / "ca.crt").read_text()}}
    try:
        cluster.core().create_namespaced_config_map(NS, body)
    except ApiException as e:
        if e.status != 409:
            raise
        cluster.core().replace_namespaced_config_map(CA_CONFIGMAP, NS, body)


@contextmanager
def storage_proxy(cluster: Cluster, tls: Path | None = None) -> Iterator[Obj]:
    """The component applied, its Deployment available with one serving pod (yielded);
    everything it made, and Secret sweeper-db, removed afterwards. ``tls``: a directory with
    ca.crt, tls.crt and tls.key, served with the TLS component."""
    overlay = _overlay(cluster, tls=tls is not None)
    _put_db_secret(cluster)
    if tls is not None:
        _put_tls(cluster, tls)
    try:
        applied = _ok(cluster, "apply", "-k", str(overlay))
        for made in (f"service/{PROXY}", f"deployment.apps/{PROXY}",
                     f"poddisruptionbudget.policy/{PROXY}"):
            assert f"{made} created" in applied or f"{made} configured" in applied, applied
        # One replica, so that its metrics hold every claim and tell of the sweep. The
        # platform test (test_platform_k8s.py) serves with the component's two.
        _ok(cluster, "scale", "-n", NS, f"deployment/{PROXY}", "--replicas=1")
        _ok(cluster, "rollout", "status", "-n", NS, f"deployment/{PROXY}",
            f"--timeout={cluster.patience(30):.0f}s")
        _ok(cluster, "wait", "-n", NS, f"deployment/{PROXY}", "--for=condition=Available",
            f"--timeout={cluster.patience(30):.0f}s")
        yield _serving_pod(cluster)
    finally:
        # Foreground: the Deployment goes only after its ReplicaSet and pods, so the proxy's
        # ports are free again when the test ends.
        _kubectl(cluster, "delete", "-k", str(overlay), "--ignore-not-found",
                 "--cascade=foreground", "--wait", "--timeout=120s")
        _kubectl(cluster, "delete", "secret", "-n", NS, DB_SECRET, TLS_SECRET,
                 "--ignore-not-found")
        _kubectl(cluster, "delete", "configmap", "-n", NS, CA_CONFIGMAP, "--ignore-not-found")


def _metrics(cluster: Cluster, pod: Obj) -> dict[str, float]:
    """The proxy's Prometheus samples (name{labels} -> value), read inside its pod (this
    machine does not route to pod IPs)."""
    port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]
                if p["name"] == "metrics")
    text = _ok(cluster, "exec", "-n", NS, pod["metadata"]["name"], "-c", "proxy", "--",
               "python", "-c", "import urllib.request as u; print(u.urlopen("
               f"'http://127.0.0.1:{port}/metrics', timeout=10).read().decode())")
    return {s.name + json.dumps(s.labels, sort_keys=True): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _restarts(pod: Obj) -> int:
    return int(pod["status"]["containerStatuses"][0]["restartCount"])


def _env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env") or []}


def _check_trial_pods(pods: list[Obj]) -> None:
    """Each trial pod is told the proxy's Service address, and nothing else about storage."""
    for pod in pods:
        spec = pod["spec"]
        for container in spec["containers"] + (spec.get("initContainers") or []):
            storage = _env(container).get("SWEEPER_STORAGE")
            assert storage is None or storage == {"name": "SWEEPER_STORAGE", "value": ADDRESS}
            assert not any("secretRef" in src for src in container.get("envFrom") or [])
        assert _env(spec["containers"][0])["SWEEPER_STORAGE"]["value"] == ADDRESS
        assert not [v for v in spec.get("volumes") or [] if "secret" in v], spec["volumes"]


def _check_proxy_pod(cluster: Cluster, pod: Obj, log: str, password: str) -> None:
    """The proxy alone reads the database URL, from Secret sweeper-db; it says it serves, with
    the password redacted; and it served this sweep's claims and tells."""
    (container,) = pod["spec"]["containers"]
    assert container["command"] + container["args"][:1] == ["sweeper", "proxy"]
    assert _env(container)["SWEEPER_STORAGE"]["valueFrom"] == {
        "secretKeyRef": {"name": DB_SECRET, "key": "url"}}
    (line,) = [x for x in log.splitlines() if SERVING in x]
    assert line.startswith("storage proxy for postgresql://"), line
    assert ":***@" in line and password not in log
    if cluster.local is None:
        return  # the pod IP is this machine's only on the local cluster
    samples = _metrics(cluster, pod)
    tells = {k: v for k, v in samples.items() if k.startswith("sweeper_tell_seconds_count")}
    claims = {k: v for k, v in samples.items()
              if k.startswith("sweeper_index_claim_seconds_count")}
    assert sum(tells.values()) == 8, tells  # one tell per index, none from elsewhere
    assert sum(claims.values()) >= 8, claims


def test_pods_reach_the_study_only_through_the_deployed_proxy(cluster: Cluster) -> None:
    with cluster.shared_claim("markers") as (claim, markers), \
            storage_proxy(cluster) as proxy_pod:
        spec = cluster.spec(SPEC + f"  volumes: [{{name: markers, mount_path: /markers, "
                            f"pvc: {claim}}}]\n  env: {{SWEEPER_TEST_MARKERS: /markers}}\n")
        # The CLI talks to PostgreSQL (cluster.url); only the pods go through the proxy.
        result = cluster.sweeper("run", spec, "--backend", "kubernetes")
        proxy_log = _log(cluster, proxy_pod)
        (after,) = _proxy_pods(cluster)  # the same pod, its proxy not restarted meanwhile
        assert after["metadata"]["uid"] == proxy_pod["metadata"]["uid"]
        assert _restarts(after) == _restarts(proxy_pod), after["status"]
        assert result.exit_code == 0, result.output
        _check_proxy_pod(cluster, after, proxy_log, urlsplit(cluster.url).password or "")
        report = check(cluster.url, "via-proxy", 8, markers, 0, 0, 0.0)

    assert "this launch: 8 of 8 indexes finished" in result.output
    assert report.problems == []
    assert report.trials == 8  # nothing retried, nothing run twice
    assert cluster.finished_per_index("via-proxy") == {i: 1 for i in range(8)}

    jobs, pods = cluster.jobs("via-proxy"), cluster.pods("via-proxy")
    assert len(jobs) == 1 and len(pods) == 8, [p["metadata"]["name"] for p in pods]
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
    _check_trial_pods(pods)
    configmap = json.loads(cluster.core().read_namespaced_config_map(
        m.spec_configmap_name("via-proxy"), NS, _preload_content=False).data)
    password = urlsplit(cluster.url).password
    assert password and password not in result.output
    # The spec's ConfigMap names storage_secret's default (sweeper-db), unused through a
    # proxy: no password in it, but the name is there.
    assert password not in json.dumps(configmap)
    dumped = json.dumps(jobs + pods)
    assert password not in dumped and "secretKeyRef" not in dumped
    assert DB_SECRET not in dumped and REAL_SECRET not in dumped  # no Secret named at all
