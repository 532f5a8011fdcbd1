"""The ``cluster`` fixture: a :class:`Cluster` on the session's Kubernetes cluster
(``k8s_target`` in tests/conftest.py: the local control plane, or yours)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Target
from tests.support.k8s_cluster import NS, Cluster, real_cluster


@pytest.fixture
def cluster(k8s_target: Target, pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` whose pods run as containers on the local cluster's real node
    (tests/cluster/realnode.py: the test image, PostgreSQL at this machine's gateway), or on
    a cluster of your own."""
    real = k8s_target.real_node
    with real_cluster(pg_url, tmp_path, k8s_target.kubeconfig, k8s_target.image,
                      k8s_target.local, pod_pg=real.pod_pg if real else None,
                      pod_host=real.gateway if real else "127.0.0.1") as c:
        yield c


@pytest.fixture
def s3_secret(cluster: Cluster) -> Iterator[str]:
    """Secret ``s3-creds`` with moto's credentials (tests/support/s3.py), created through the
    API and deleted afterwards."""
    from tests.support.s3 import CREDENTIALS

    cluster.put_secret("s3-creds", dict(CREDENTIALS))
    yield "s3-creds"
    cluster.delete_quietly(cluster.core().delete_namespaced_secret, "s3-creds", NS)
