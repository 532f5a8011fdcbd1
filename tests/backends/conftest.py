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
    with real_cluster(pg_url, tmp_path, k8s_target.kubeconfig, k8s_target.image,
                      k8s_target.local) as c:
        yield c


@pytest.fixture
def s3_secret(cluster: Cluster) -> Iterator[str]:
    """Secret ``s3-creds`` with moto's credentials (tests/support/s3.py), created through the
    API and deleted afterwards."""
    from tests.support.s3 import CREDENTIALS

    cluster.put_secret("s3-creds", dict(CREDENTIALS))
    yield "s3-creds"
    cluster.delete_quietly(cluster.core().delete_namespaced_secret, "s3-creds", NS)
