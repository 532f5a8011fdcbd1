"""Shared fixtures: a real PostgreSQL database per test and the session's Kubernetes cluster
(both fail, never skip, under CI=true), and a SQLite file per test."""

from __future__ import annotations

import os

# This process hosts gRPC servers and clients (the storage proxy's tests) and also forks
# (forked local workers, Optuna's multiprocess storage tests): gRPC must not run fork handlers
# that restart its threads in a child that never uses gRPC (a CI run aborted in such a
# child). Set before anything imports grpc; sweeper's own processes never fork after using it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
os.environ.setdefault("GRPC_EXPERIMENTS", "-event_engine_fork")

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import sqlalchemy as sa

from tests.cluster.control_plane import ClusterError, Layout, default_layout, down, is_up, up
from tests.support.helpers import drop_database
from tests.support.k8s_cluster import (
    TEST_IMAGE,
    prepare_namespace,
    real_cluster_config,
)

PG_ADMIN_URL = os.environ.get(
    "SWEEPER_TEST_PG", "postgresql://sweeper:sweeper-test-pw@127.0.0.1:5432/postgres")
REPO = Path(__file__).resolve().parents[1]


def _admin_engine() -> sa.Engine:
    url = PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg2://", 1)
    return sa.create_engine(url, isolation_level="AUTOCOMMIT", pool_pre_ping=True,
                            connect_args={"connect_timeout": 5})


@pytest.fixture(scope="session", autouse=True)
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A runtime directory of the session's own ($XDG_RUNTIME_DIR, 0700), inherited by every
    process a test starts: the secrets of the loopback proxies the tests start go there, not
    to the machine user's."""
    path = tmp_path_factory.mktemp("run")
    path.chmod(0o700)
    old = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("XDG_RUNTIME_DIR", None)
    else:
        os.environ["XDG_RUNTIME_DIR"] = old


@pytest.fixture(autouse=True)
def proxy_token_restored() -> Iterator[None]:
    """$SWEEPER_PROXY_TOKEN as it was before the test: a local run's in-process proxy puts its
    secret into this process's environment, where it would be a wrong credential for the
    proxies of later tests."""
    before = os.environ.get("SWEEPER_PROXY_TOKEN")
    yield
    if before is None:
        os.environ.pop("SWEEPER_PROXY_TOKEN", None)
    else:
        os.environ["SWEEPER_PROXY_TOKEN"] = before


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[sa.Engine]:
    engine = _admin_engine()
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as e:
        msg = f"PostgreSQL is not reachable ({e.orig}); run `make postgres` (or `make test`)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_url(pg_admin: sa.Engine) -> Iterator[str]:
    """A fresh, empty database; the URL has the plain ``postgresql://`` form users write."""
    name = f"sweeper_test_{uuid.uuid4().hex[:10]}"
    with pg_admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    drop_database(pg_admin, name)



@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sweeps.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Both storages: the embedded default and production PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'sweeps.db'}"
    return str(request.getfixturevalue("pg_url"))


@dataclass(frozen=True)
class RealNodeTarget:
    """The local cluster's real node (tests/cluster/realnode.py), as the tests see it."""

    gateway: str  # this machine's address as its pods reach it
    pod_pg: str  # the test PostgreSQL server as its pods reach it (at the gateway)


@dataclass(frozen=True)
class Target:
    kubeconfig: Path
    image: str
    local: Path | None  # the local control plane's directory
    real_node: RealNodeTarget | None = None


def real_node_target(lo: Layout) -> RealNodeTarget:
    parts = urlsplit(PG_ADMIN_URL)
    server = parts._replace(netloc=parts.netloc.rsplit("@", 1)[0] + "@"
                            + f"{lo.real.net.host_ip}:{parts.port or 5432}", path="")
    return RealNodeTarget(lo.real.net.host_ip, urlunsplit(server))


@pytest.fixture(scope="session")
def k8s_target() -> Iterator[Target]:
    """The local control plane (tests/cluster), started for the session unless `make
    cluster-up` already did, and stopped after it; or a cluster of your own named by
    ``SWEEPER_TEST_KUBECONFIG`` (with ``SWEEPER_TEST_IMAGE``; docs/testing.md)."""
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
        yield Target(lo.kubeconfig, TEST_IMAGE, lo.root, real_node_target(lo))
    finally:
        if started:
            down(lo)
