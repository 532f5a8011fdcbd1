"""A Kubernetes sweep whose pods reach the study only through the storage proxy: the fake API
server (its pods are local processes) with no database Secret at all, a real ``sweeper proxy``
process in front of a real PostgreSQL, and the CLI talking to the same proxy. Every index
finishes exactly once and no pod ever sees the database URL."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from tests.support.chaos import check
from tests.support.k8s_cluster import NS, POD_ENV, REPO
from tests.support.k8s_fake import FakeKubeAPI
from tests.support.k8s_fake.store import JOBS, PODS
from tests.support.proxy import ProxyProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SPEC = """
name: via-proxy
method: grid
objective: {metric: loss, direction: minimize}
parallelism: 3
trial:
  entrypoint: tests.support.fault_objectives:steady
  fixed: {duration: 0.4, steps: 4}
  retries: 1
parameters:
  x: {type: float, values: [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]}
kubernetes:
  storage_proxy: PROXY
"""


def test_pods_reach_the_study_only_through_the_proxy(pg_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    with ProxyProcess(pg_url, tmp_path) as proxy:
        spec = tmp_path / "via-proxy.yaml"
        spec.write_text(SPEC.replace("PROXY", proxy.url.removeprefix("grpc://")))
        fake = FakeKubeAPI(workdir=REPO, state_dir=tmp_path / "fake",
                           extra_env={**POD_ENV, "SWEEPER_TEST_MARKERS": str(markers)})
        fake.start()
        try:
            fake.add_namespace(NS)  # and no Secret: a pod that wanted one could not start
            kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace=NS)
            env = {"SWEEPER_STORAGE": proxy.url, "KUBECONFIG": str(kubeconfig),
                   "SWEEPER_POLL_INTERVAL": "0.2", "SWEEPER_GRACE_PERIOD": "5",
                   "KUBERNETES_SERVICE_HOST": None}
            result = CliRunner().invoke(cli, ["run", str(spec), "--backend", "kubernetes"],
                                        env=env, catch_exceptions=False)
            jobs = fake.store.list(JOBS, NS) + fake.store.list(PODS, NS)
        finally:
            fake.stop()
    assert result.exit_code == 0, result.output
    assert "this launch: 8 of 8 indexes finished" in result.output
    report = check(pg_url, "via-proxy", 8, markers, 0, 0, 0.0)
    assert report.problems == []
    assert report.trials == 8  # nothing retried, nothing run twice
    password = urlsplit(pg_url).password
    assert password and password not in result.output
    assert len(jobs) == 1 + 8  # the Job and its 8 pods
    dumped = json.dumps(jobs)
    assert password not in dumped and "secretKeyRef" not in dumped
