"""The ``cluster`` fixture: the fake Kubernetes API server, or the real cluster named by
``SWEEPER_TEST_KUBECONFIG`` (with ``SWEEPER_TEST_IMAGE``); see docs/real-cluster-tests.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.k8s_cluster import Cluster, fake_cluster, real_cluster, real_cluster_config


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fake_only(reason): needs powers only the fake API server has (deny a "
        "permission, read its request log); skipped against a real cluster")


@pytest.fixture
def cluster(request: pytest.FixtureRequest, pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    real = real_cluster_config()
    if real is None:
        with fake_cluster(pg_url, tmp_path) as fake:
            yield fake
        return
    marker = request.node.get_closest_marker("fake_only")
    if marker is not None:
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
        pytest.skip(f"needs the fake API server: {reason}")
    with real_cluster(pg_url, tmp_path, *real) as cluster:
        yield cluster
