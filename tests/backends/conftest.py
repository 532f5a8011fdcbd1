"""The ``cluster`` fixture: a :class:`Cluster` on the session's Kubernetes cluster
(``k8s_target`` in tests/conftest.py: the local control plane, or yours)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Target
from tests.support.k8s_cluster import NS, Cluster, real_cluster


@pytest.fixture
def process_cluster(k8s_target: Target, pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` whose pods run on the local cluster's process node (tests not yet
    moved to the real node), or on a cluster of your own."""
    with real_cluster(pg_url, tmp_path, k8s_target.kubeconfig, k8s_target.image,
                      k8s_target.local, process_node=k8s_target.local is not None) as c:
        yield c


@pytest.fixture
def cluster(k8s_target: Target, pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` whose pods run as containers on the local cluster's real node
    (tests/cluster/realnode.py: the test image, PostgreSQL at this machine's gateway), or on
    a cluster of your own."""
    real = k8s_target.real_node
    if real is None and k8s_target.local is not None:
        pytest.fail("the local cluster has no real node (SWEEPER_CLUSTER_NODE=process)")
    with real_cluster(pg_url, tmp_path, k8s_target.kubeconfig,
                      real.image if real else k8s_target.image, k8s_target.local,
                      pod_pg=real.pod_pg if real else None,
                      pod_host=real.gateway if real else "127.0.0.1",
                      placement=real.placement if real else None) as c:
        yield c


@pytest.fixture
def s3_secret(cluster: Cluster) -> Iterator[str]:
    """Secret ``s3-creds`` with moto's credentials (tests/support/s3.py), created through the
    API and deleted afterwards."""
    from tests.support.s3 import CREDENTIALS

    cluster.put_secret("s3-creds", dict(CREDENTIALS))
    yield "s3-creds"
    cluster.delete_quietly(cluster.core().delete_namespaced_secret, "s3-creds", NS)
