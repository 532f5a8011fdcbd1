"""The platform team's path end to end, on a cluster that has none of sweeper's objects: what
manifests/README.md and docs/kubernetes.md tell a platform team to do, done with kubectl and
the installed ``sweeper`` console script. Of what the suite's fixtures prepare it uses only the
cluster (the namespace and the base's RBAC may be there already: applying them again is
harmless).

1. ``kubectl apply -f manifests/namespace.yaml``, Secret ``sweeper-db`` created with the
   README's own command (``openssl rand -hex 24``, keys ``password`` and ``url``), then
   ``kubectl apply -k`` of an overlay of ``manifests/`` plus the component
   ``components/storage-proxy`` with ``images:`` overrides only: ``postgres`` ->
   sweeper-postgres:15-bookworm (Debian's PostgreSQL with the official image's contract;
   tools/cluster/images/postgres.Containerfile), ``ghcr.io/optuna/optuna-dashboard`` ->
   sweeper-optuna-dashboard:0.21.0 (upstream's contract: tools/cluster/images/
   dashboard.Containerfile), ``sweeper-trial-runner`` -> the test image.
   The PostgreSQL claim gets a hostPath PersistentVolume when the cluster has no default
   StorageClass (the local cluster's node sees this machine's files). Pod Security
   ``restricted`` must admit every pod without a warning.
2. PostgreSQL's StatefulSet, the proxy's and the dashboard's Deployments roll out with their
   own probes (``pg_isready``; the kubelet's gRPC health checks; the dashboard's /api/meta).
3. An admin ServiceAccount bound to ``sweeper-proxy-admin`` gets a token for the audience
   ``sweeper-proxy``; ``sweeper run SPEC --backend kubernetes`` reaches the study through
   ``kubectl port-forward svc/sweeper-storage-proxy`` with that token, and the spec's
   ``kubernetes.storage_proxy`` sends the trial pods through the in-cluster Service.
4. Every index finishes exactly once (read back over a port-forward to PostgreSQL with the
   README's URL, the proxy out of the way), ``sweeper status`` says so, and the password is
   nowhere but in the Secret, PostgreSQL and the proxy's pods: not in a trial pod, its Job or
   its ConfigMap, not in the CLI's output, not in the proxy's or PostgreSQL's log.
5. optuna-dashboard, through ``kubectl port-forward svc/sweeper-dashboard`` as manifests/
   dashboard.yaml says, lists the sweep's study and its trials, every one complete.

Not covered: the NetworkPolicies (applied; the node's bridge CNI does not enforce them).
Everything the test made is deleted afterwards, foreground, except the namespace and the base's
RBAC, which the rest of the suite shares.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Target
from tests.support.k8s_cluster import NS, REPO, kubectl, port_forward

pytestmark = [pytest.mark.slow]

Obj = dict[str, Any]

MANIFESTS = REPO / "manifests"
COMPONENT = MANIFESTS / "components" / "storage-proxy"
#: What the overlay's ``images:`` puts in place of postgres.yaml's postgres:16.6-bookworm.
POSTGRES_IMAGE = "docker.io/library/sweeper-postgres:15-bookworm"
#: And for dashboard.yaml's ghcr.io/optuna/optuna-dashboard:v0.21.0.
DASHBOARD_IMAGE = "docker.io/library/sweeper-optuna-dashboard:0.21.0"
DB_SECRET = "sweeper-db"
POSTGRES = "sweeper-postgres"
PROXY = "sweeper-storage-proxy"
DASHBOARD = "sweeper-dashboard"
PROXY_PORT = 13000
#: The claim postgres.yaml's volumeClaimTemplate ``data`` makes for pod 0 (retained when the
#: StatefulSet goes: whenDeleted: Retain).
CLAIM = f"data-{POSTGRES}-0"
PV = "sweeper-platform-test-pgdata"
#: The platform team's CI account: it may administer studies through the proxy.
ADMIN = "sweeper-platform-admin"
SWEEP = "platform-grid"
XS = [0.0, 0.25, 0.5, 0.75]
#: Rollouts: PostgreSQL's first start runs initdb (its startupProbe allows 5 minutes; the
#: local node's hostPath volume takes seconds), the proxy's waits for PostgreSQL.
ROLLOUT = "240s"


class Kube:
    """kubectl on the cluster under test, as the platform team runs it."""

    def __init__(self, kubeconfig: Path) -> None:
        self.base = [kubectl(), "--kubeconfig", str(kubeconfig)]

    def run(self, *args: str, stdin: str | None = None,
            timeout: float = 360) -> subprocess.CompletedProcess[str]:
        """``kubectl ARGS``, its output captured, whatever its exit code."""
        return subprocess.run([*self.base, *args], input=stdin, capture_output=True, text=True,
                              timeout=timeout)

    def ok(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``kubectl ARGS``, which must succeed."""
        out = self.run(*args, stdin=stdin)
        assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
        return out

    def items(self, *args: str) -> list[Obj]:
        """``kubectl get ... -o json``'s items in the namespace."""
        found: list[Obj] = json.loads(self.ok("get", "-n", NS, *args, "-o", "json").stdout)[
            "items"]
        return found


# --------------------------------------------------------------------------- the install


def _image(name: str, ref: str) -> Obj:
    """kustomize's ``images:`` entry that replaces image ``name`` with ``ref``."""
    repo, _, tag = ref.rpartition(":")
    if not repo or "/" in tag:
        repo, tag = ref, "latest"
    return {"name": name, "newName": repo, "newTag": tag}


def _overlay(tmp: Path, image: str) -> Path:
    """The platform team's cluster directory beside (never inside) manifests/: the base, the
    storage-proxy component and the images this cluster has."""
    overlay = tmp / "sweeper-cluster"
    overlay.mkdir()
    kustomization: Obj = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        # kustomize takes a base and a component only by a relative path
        "resources": [os.path.relpath(MANIFESTS, overlay)],
        "components": [os.path.relpath(COMPONENT, overlay)],
        "images": [_image("postgres", POSTGRES_IMAGE), _image("sweeper-trial-runner", image),
                   _image("ghcr.io/optuna/optuna-dashboard", DASHBOARD_IMAGE)]}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return overlay


def _password() -> str:
    """The README's ``PGPASSWORD="$(openssl rand -hex 24)"``."""
    out = subprocess.run(["openssl", "rand", "-hex", "24"], capture_output=True, text=True,
                         check=True, timeout=30)
    password = out.stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{48}", password), "openssl rand -hex 24 printed no password"
    return password


def _create_db_secret(kube: Kube, password: str) -> None:
    """The README's command, word for word: the URL names the in-cluster Service of
    postgres.yaml (user and database ``sweeper``), ``password`` is what PostgreSQL reads."""
    kube.ok("-n", NS, "create", "secret", "generic", DB_SECRET,
            f"--from-literal=password={password}",
            f"--from-literal=url=postgresql://sweeper:{password}@{POSTGRES}:5432/sweeper")


def _has_default_storage_class(kube: Kube) -> bool:
    """Whether the cluster provisions a claim that names no class (else a PV must be made)."""
    classes = json.loads(kube.ok("get", "storageclass", "-o", "json").stdout)["items"]
    return any((c["metadata"].get("annotations") or {}).get(
        "storageclass.kubernetes.io/is-default-class") == "true" for c in classes)


def _claim_spec() -> Obj:
    """postgres.yaml's volumeClaimTemplate's spec: what the PersistentVolume must offer."""
    for doc in yaml.safe_load_all((MANIFESTS / "postgres.yaml").read_text()):
        if doc and doc["kind"] == "StatefulSet":
            (template,) = doc["spec"]["volumeClaimTemplates"]
            spec: Obj = template["spec"]
            return spec
    raise AssertionError("postgres.yaml has no StatefulSet")


def _create_volume(kube: Kube, tmp: Path) -> None:
    """A hostPath PersistentVolume reserved for PostgreSQL's claim, as a platform team with no
    provisioner makes one: its directory is this machine's (the local node shares its files)
    and writable by the server's uid 999 (fsGroup does not apply to hostPath)."""
    claim = _claim_spec()
    assert "storageClassName" not in claim, claim  # else the PV must name that class
    directory = tmp / "pgdata"
    directory.mkdir()
    directory.chmod(0o777)
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": PV, "labels": {"app.kubernetes.io/part-of": "sweeper-tests"}},
          "spec": {"capacity": {"storage": claim["resources"]["requests"]["storage"]},
                   "accessModes": claim["accessModes"],
                   "persistentVolumeReclaimPolicy": "Retain",
                   "claimRef": {"namespace": NS, "name": CLAIM},
                   "hostPath": {"path": str(directory), "type": "Directory"}}}
    kube.ok("create", "-f", "-", stdin=json.dumps(pv))


def _install(kube: Kube, overlay: Path, password: str, tmp: Path) -> str:
    """Namespace, Secret, volume, ``kubectl apply -k``; PostgreSQL, the proxy and the
    dashboard rolled out.
    Returns what ``apply -k`` printed on stderr (Pod Security's warnings would be there)."""
    kube.ok("apply", "-f", str(MANIFESTS / "namespace.yaml"))
    _create_db_secret(kube, password)
    if not _has_default_storage_class(kube):
        _create_volume(kube, tmp)
    applied = kube.ok("apply", "-k", str(overlay))
    for made in (f"statefulset.apps/{POSTGRES}", f"deployment.apps/{PROXY}",
                 f"deployment.apps/{DASHBOARD}"):
        assert f"{made} created" in applied.stdout, applied.stdout
    kube.ok("-n", NS, "rollout", "status", f"statefulset/{POSTGRES}", f"--timeout={ROLLOUT}")
    for deployment in (PROXY, DASHBOARD):
        kube.ok("-n", NS, "rollout", "status", f"deployment/{deployment}",
                f"--timeout={ROLLOUT}")
        kube.ok("-n", NS, "wait", f"deployment/{deployment}", "--for=condition=Available",
                f"--timeout={ROLLOUT}")
    return applied.stderr


def _admin_token(kube: Kube) -> str:
    """The CLI's credential for the proxy, made the way rbac.yaml of the component says: an
    account bound to sweeper-proxy-admin, a token for the proxy's audience."""
    kube.ok("-n", NS, "create", "serviceaccount", ADMIN)
    kube.ok("-n", NS, "create", "rolebinding", ADMIN, "--clusterrole=sweeper-proxy-admin",
            f"--serviceaccount={NS}:{ADMIN}")
    token = kube.ok("-n", NS, "create", "token", ADMIN, "--audience=sweeper-proxy",
                    "--duration=30m").stdout.strip()
    assert token, "kubectl create token printed nothing"
    return token


# --------------------------------------------------------------------------- cleanup


def _shared() -> set[tuple[str, str]]:
    """(kind, name) of the base's namespace and RBAC: the rest of the suite uses them."""
    shared = set()
    for name in ("namespace.yaml", "rbac.yaml"):
        for doc in yaml.safe_load_all((MANIFESTS / name).read_text()):
            if doc:
                shared.add((doc["kind"], doc["metadata"]["name"]))
    return shared


def _leftovers(kube: Kube) -> list[str]:
    """What an earlier run (or someone's real install) left where this test installs."""
    named = kube.ok("get", "-n", NS, f"statefulset/{POSTGRES}", f"deployment/{PROXY}",
                    f"secret/{DB_SECRET}", f"persistentvolumeclaim/{CLAIM}",
                    f"serviceaccount/{ADMIN}", "--ignore-not-found", "-o", "name")
    volume = kube.ok("get", f"persistentvolume/{PV}", "--ignore-not-found", "-o", "name")
    return (named.stdout + volume.stdout).split()


def _remove(kube: Kube, overlay: Path, tmp: Path) -> None:
    """Delete everything the test made, each step whatever the others did, foreground and
    waiting (the proxy's and PostgreSQL's pods are gone when it returns); the namespace and
    the base's RBAC stay. Fails at the end if a step failed."""
    rendered, shared = kube.run("kustomize", str(overlay)), _shared()
    ours = [d for d in yaml.safe_load_all(rendered.stdout)
            if d and (d["kind"], d["metadata"]["name"]) not in shared]
    (tmp / "installed.yaml").write_text(yaml.safe_dump_all(ours))
    wait = ("--ignore-not-found", "--wait", "--timeout=180s")
    steps = [
        ("-n", NS, "delete", "job", "-l", f"sweeper.dev/sweep={SWEEP}",
         "--cascade=foreground", *wait),
        ("-n", NS, "delete", "configmap", f"{SWEEP}-spec", *wait),
        ("delete", "-f", str(tmp / "installed.yaml"), "--cascade=foreground", *wait),
        ("-n", NS, "delete", f"persistentvolumeclaim/{CLAIM}", f"secret/{DB_SECRET}",
         f"rolebinding/{ADMIN}", f"serviceaccount/{ADMIN}", *wait),
        ("delete", f"persistentvolume/{PV}", *wait)]
    failed = [(args, out.stderr) for args in steps
              if (out := kube.run(*args)).returncode != 0]
    assert rendered.returncode == 0 and not failed, (rendered.stderr, failed)


# --------------------------------------------------------------------------- the sweep


def _spec(tmp: Path, image: str) -> Path:
    """A small grid sweep whose pods reach the study through the proxy's Service."""
    doc = {
        "name": SWEEP, "method": "grid", "objective": {"metric": "loss", "direction": "minimize"},
        "parallelism": 2,
        "trial": {"entrypoint": "trial_runner.examples.synthetic:quadratic",
                  "fixed": {"epochs": 2}, "resources": {"cpu": "100m", "memory": "512Mi"}},
        "parameters": {"x": {"type": "float", "values": XS}},
        "kubernetes": {"storage_proxy": f"{PROXY}:{PROXY_PORT}", "image": image}}
    path = tmp / f"{SWEEP}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _sweeper(kubeconfig: Path, token: str, cwd: Path,
             *args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, as on the platform team's laptop: the kubeconfig, the
    admin's token in SWEEPER_PROXY_TOKEN and no other storage setting; stderr into stdout."""
    beside = Path(sys.executable).parent / "sweeper"
    command = [str(beside)] if beside.exists() else [sys.executable, "-m", "sweeper.cli"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("SWEEPER_STORAGE", "SWEEPER_PROXY_TOKEN_FILE", "KUBERNETES_SERVICE_HOST")}
    env.update(KUBECONFIG=str(kubeconfig), SWEEPER_PROXY_TOKEN=token, SWEEPER_POLL_INTERVAL="0.2")
    return subprocess.run([*command, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)


def _finished_per_index(port: int, password: str) -> dict[int, int]:
    """Finished trials per index, read from PostgreSQL itself with the README's URL (the
    port-forward in place of the Service)."""
    from optuna.storages import RDBStorage
    from optuna.trial import TrialState

    from sweeper.protocol import INDEX_ATTR
    from sweeper.study.urls import driver_url

    storage = RDBStorage(driver_url(f"postgresql://sweeper:{password}@127.0.0.1:{port}/sweeper"))
    try:
        trials = storage.get_all_trials(storage.get_study_id_from_name(SWEEP), deepcopy=False)
        out: dict[int, int] = {}
        for t in trials:
            done = t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            out[t.user_attrs[INDEX_ATTR]] = out.get(t.user_attrs[INDEX_ATTR], 0) + done
        return dict(sorted(out.items()))
    finally:
        storage.engine.dispose()


def _check_trial_pods(pods: list[Obj]) -> None:
    """Every index ran in one pod that succeeded, told only the proxy's Service address."""
    assert sorted(int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
                  for p in pods) == list(range(len(XS))), [p["metadata"]["name"] for p in pods]
    for pod in pods:
        assert pod["status"]["phase"] == "Succeeded", pod["status"]
        env = {e["name"]: e for e in pod["spec"]["containers"][0].get("env") or []}
        assert env["SWEEPER_STORAGE"] == {"name": "SWEEPER_STORAGE",
                                          "value": f"grpc://{PROXY}:{PROXY_PORT}"}


def _logs(kube: Kube, selector: str) -> str:
    """The whole log of every pod ``selector`` selects, each line prefixed with its pod."""
    return kube.ok("-n", NS, "logs", "-l", selector, "--tail=-1", "--prefix",
                   "--max-log-requests=10").stdout


@dataclass(frozen=True)
class Seen:
    """What the platform team sees of the install and the sweep, gathered before cleanup."""

    warnings: str  # kubectl apply -k's stderr
    ran: str  # sweeper run's output (stdout and stderr)
    ran_code: int
    status: str  # sweeper status's output
    status_code: int
    finished: dict[int, int]  # finished trials per index, read from PostgreSQL
    pods: list[Obj]  # the sweep's pods
    jobs: list[Obj]
    configmap: str  # the sweep's spec ConfigMap as JSON
    proxy_log: str  # both replicas'
    postgres_log: str
    dashboard: dict[str, list[str]]  # study name -> its trials' states, as the dashboard says


def _see(kube: Kube, stack: ExitStack, target: Target, tmp: Path, overlay: Path,
         password: str) -> tuple[Seen, str]:
    """The platform team's steps: install, then run the sweep and look at it from a laptop
    (``stack`` closes the port-forwards). Returns what it saw and the admin's token."""
    image = target.image
    warnings = _install(kube, overlay, password, tmp)
    token = _admin_token(kube)
    proxy = stack.enter_context(port_forward(kube.base, f"svc/{PROXY}", PROXY_PORT))
    storage = ("--storage", f"grpc://127.0.0.1:{proxy}")
    ran = _sweeper(target.kubeconfig, token, tmp, "run", str(_spec(tmp, image)),
                   "--backend", "kubernetes", *storage)
    status = _sweeper(target.kubeconfig, token, tmp, "status", SWEEP, *storage)
    database = stack.enter_context(port_forward(kube.base, f"svc/{POSTGRES}", 5432))
    sweep = ("-l", f"sweeper.dev/sweep={SWEEP}")
    return Seen(
        warnings, ran.stdout, ran.returncode, status.stdout, status.returncode,
        _finished_per_index(database, password), kube.items("pods", *sweep),
        kube.items("jobs", *sweep),
        kube.ok("get", "-n", NS, "configmap", f"{SWEEP}-spec", "-o", "json").stdout,
        _logs(kube, f"app.kubernetes.io/name={PROXY}"),
        _logs(kube, "app.kubernetes.io/name=postgres"),
        _dashboard(stack.enter_context(port_forward(kube.base, f"svc/{DASHBOARD}", 8080)))
    ), token


def _dashboard(port: int) -> dict[str, list[str]]:
    """The studies optuna-dashboard's API lists, each with its trials' states."""
    import urllib.request

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return json.loads(r.read())
    return {s["study_name"]: [t["state"] for t in get(f"/api/studies/{s['study_id']}")["trials"]]
            for s in get("/api/studies")["study_summaries"]}


def _check_sweep(seen: Seen) -> None:
    """Every index finished exactly once, in one pod that reached the study through the proxy,
    and both commands say so."""
    n = len(XS)
    assert "PodSecurity" not in seen.warnings, seen.warnings  # restricted admits every pod
    assert seen.ran_code == 0, seen.ran
    assert f"this launch: {n} of {n} indexes finished" in seen.ran, seen.ran
    assert seen.finished == {i: 1 for i in range(n)}  # nothing ran twice
    assert seen.status_code == 0, seen.status
    assert f"{SWEEP}: {n}/{n} indexes finished; trials: complete {n}" in seen.status, \
        seen.status
    assert f"indexes completed 0-{n - 1}, failed -" in seen.status, seen.status
    assert len(seen.jobs) == 1, [j["metadata"]["name"] for j in seen.jobs]
    _check_trial_pods(seen.pods)
    serving = f"storage proxy for postgresql://sweeper:***@{POSTGRES}:5432/sweeper on grpc://"
    assert seen.proxy_log.count(serving) == 2, seen.proxy_log  # both replicas serve
    assert seen.dashboard == {SWEEP: ["Complete"] * n}, seen.dashboard


def _check_password(seen: Seen, password: str, token: str) -> None:
    """The password is in no trial pod, Job or ConfigMap (no Secret is even named), and in no
    output or log; the admin's token in no output or log either."""
    objects = json.dumps(seen.pods + seen.jobs)
    assert password not in objects, objects
    assert "secretKeyRef" not in objects and DB_SECRET not in objects, objects
    assert password not in seen.configmap  # (its spec names storage_secret's unused default)
    for text in (seen.ran, seen.status, seen.proxy_log):
        assert password not in text and token not in text, text
    assert password not in seen.postgres_log


def test_the_platform_teams_install_runs_a_sweep_through_the_proxy(
        k8s_target: Target, tmp_path: Path) -> None:
    kube = Kube(k8s_target.kubeconfig)
    left = _leftovers(kube)
    assert not left, (f"{' '.join(left)} already there: left by an earlier run of this test? "
                      "Delete them (and the claim's PersistentVolume) to run it")
    overlay = _overlay(tmp_path, k8s_target.image)
    password = _password()
    with ExitStack() as stack:
        stack.callback(_remove, kube, overlay, tmp_path)
        seen, token = _see(kube, stack, k8s_target, tmp_path, overlay, password)
    _check_sweep(seen)
    _check_password(seen, password, token)
