"""The cluster the Kubernetes backend tests run against: the fake API server, or a real one.

By default :func:`fake_cluster` starts :class:`~tests.support.k8s_fake.FakeKubeAPI` (pods are
local processes in the repository root). With ``SWEEPER_TEST_KUBECONFIG`` and
``SWEEPER_TEST_IMAGE`` set, :func:`real_cluster` points the same tests at that cluster instead
(see docs/real-cluster-tests.md). Either way a test sees one :class:`Cluster`: the kubeconfig
the CLI gets, the storage URL, and the cluster's state read through the official client, so
the assertions are the same on both. What only the fake can do (deny a permission, record
every request, preempt a pod) is reached through ``cluster.fake``, in tests marked
``fake_only``.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import optuna
import yaml
from click.testing import CliRunner, Result
from optuna.trial import TrialState

from sweeper.backends import manifests as m
from sweeper.cli import cli
from sweeper.spec import SweepSpec, parse_spec
from sweeper.study import INDEX_ATTR, driver_url
from tests.support.k8s_fake import FakeKubeAPI

#: The kubeconfig of a real cluster to test against (unset: the fake API server).
ENV_KUBECONFIG = "SWEEPER_TEST_KUBECONFIG"
#: The image the real cluster's pods run: this repository installed, its tests/ importable.
ENV_IMAGE = "SWEEPER_TEST_IMAGE"
#: The PostgreSQL server as the pods reach it (scheme://user:password@host:port), when that
#: differs from SWEEPER_TEST_PG (e.g. an in-cluster Service vs. a port-forward here).
ENV_POD_PG = "SWEEPER_TEST_POD_PG"
#: Namespace the tests use; `kubectl apply -k manifests/` creates it with its service accounts.
NS = "sweeper"
#: The Secret holding the pods' storage URL on a real cluster (never the production one).
REAL_SECRET = "sweeper-test-db"
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
    fake: FakeKubeAPI | None  # None: a real cluster
    image: str | None = None  # real cluster: what the pods run
    #: Sweeps (and Job names) this test used: removed from a real cluster afterwards.
    names: set[str] = field(default_factory=set)
    _api: Any = field(default=None, init=False, repr=False)

    @property
    def real(self) -> bool:
        return self.fake is None

    def patience(self, seconds: float) -> float:
        """A wait that a real cluster (scheduling, image pulls) needs longer."""
        return seconds * (4 if self.real else 1)

    # ---------------------------------------------------------------- the CLI and specs

    def sweeper(self, *args: str, **env: str | None) -> Result:
        return CliRunner().invoke(cli, list(args), env={**self.env, **env},
                                  catch_exceptions=False)

    def spec_text(self, text: str) -> str:
        """The spec as this cluster needs it: on a real one, with the test image, the test
        Secret and quick heartbeats in its ``kubernetes:`` section."""
        doc = yaml.safe_load(text)
        self.names.add(doc["name"])
        if self.real:
            k = doc.setdefault("kubernetes", {})
            k.setdefault("image", self.image)
            k.setdefault("storage_secret", REAL_SECRET)
            k["env"] = {**POD_ENV, **(k.get("env") or {})}
            text = yaml.safe_dump(doc, sort_keys=False)
        return text

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

    # ---------------------------------------------------------------- cleanup

    def remove_jobs(self) -> None:
        """Delete this test's Jobs (and pods) from a real cluster; the fake just stops."""
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


def _pod_url(pg_url: str) -> str:
    """The test database's URL as the pods reach it: ``SWEEPER_TEST_POD_PG``'s server, the
    per-test database of ``pg_url``."""
    server = os.environ.get(ENV_POD_PG)
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
def fake_cluster(pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """The fake API server with namespace ``sweeper`` and Secret ``sweeper-db`` (the URL)."""
    fake = FakeKubeAPI(workdir=REPO, state_dir=tmp_path / "fake", extra_env=POD_ENV)
    fake.start()
    try:
        fake.add_namespace(NS)
        fake.add_secret(NS, "sweeper-db", {"url": pg_url})
        kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
        yield Cluster(kubeconfig, pg_url, _cli_env(pg_url, kubeconfig), tmp_path, fake)
    finally:
        fake.stop()


@contextmanager
def real_cluster(pg_url: str, tmp_path: Path, kubeconfig: Path, image: str
                 ) -> Iterator[Cluster]:
    """A real cluster: Secret ``sweeper-test-db`` holds the pods' URL of this test's database;
    the test's Jobs are deleted afterwards."""
    cluster = Cluster(kubeconfig, pg_url, _cli_env(pg_url, kubeconfig), tmp_path, None, image)
    _put_secret(cluster, REAL_SECRET, {"url": _pod_url(pg_url)})
    try:
        yield cluster
    finally:
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
