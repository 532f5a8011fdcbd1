"""The ``cluster`` fixture: the local control plane (tests/cluster, started for the session
unless ``make cluster-up`` already did, and stopped after it), or a cluster of your own named
by ``SWEEPER_TEST_KUBECONFIG`` (with ``SWEEPER_TEST_IMAGE``; docs/real-cluster-tests.md).
Under ``CI=true`` a control plane that cannot be built or started fails the tests that need
it; it never skips them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.control_plane import ClusterError, default_layout, down, is_up, up
from tests.support.k8s_cluster import (
    LOCAL_IMAGE,
    Cluster,
    prepare_namespace,
    real_cluster,
    real_cluster_config,
)


@dataclass(frozen=True)
class Target:
    kubeconfig: Path
    image: str
    local: Path | None  # the local control plane's directory


@pytest.fixture(scope="session")
def k8s_target() -> Iterator[Target]:
    own = real_cluster_config()
    if own is not None:
        yield Target(own[0], own[1], None)
        return
    lo = default_layout()
    started = not is_up(lo)
    try:
        up(lo, say=lambda line: print(f"\n{line}"))
    except ClusterError as e:
        msg = f"the local Kubernetes control plane could not start: {e}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    prepare_namespace(lo.kubeconfig)
    try:
        yield Target(lo.kubeconfig, LOCAL_IMAGE, lo.root)
    finally:
        if started:
            down(lo)


@pytest.fixture
def cluster(k8s_target: Target, pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    with real_cluster(pg_url, tmp_path, k8s_target.kubeconfig, k8s_target.image,
                      k8s_target.local) as c:
        yield c
