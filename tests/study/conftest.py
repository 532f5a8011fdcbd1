"""A fault-injecting proxy in front of each test's PostgreSQL database
(tests/support/faultproxy.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.support.faultproxy import FaultProxy


@pytest.fixture
def proxy(pg_url: str, pg_admin: sa.Engine) -> Iterator[FaultProxy]:
    with FaultProxy.for_url(pg_url, pg_admin) as p:
        yield p


@pytest.fixture
def proxied_url(proxy: FaultProxy, pg_url: str) -> str:
    """The test database's URL through the proxy."""
    return proxy.url(pg_url)
