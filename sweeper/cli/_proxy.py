"""``sweeper proxy``: the long-lived storage proxy (:func:`sweeper.app.proxy.serve_proxy`),
and ``run``'s options about the storage proxy of its local workers."""

from __future__ import annotations

from typing import Any

import click

from sweeper.app.options import StorageOptions
from sweeper.app.proxy import PROXY_STORAGE_WAIT_S, ProxyOptions, SecurityOptions, serve_proxy
from sweeper.cli._common import errors, say, storage_options
from sweeper.cli._group import cli
from sweeper.cli._proxy_security import security_options


@cli.command()
@storage_options("The database the proxy fronts: postgresql://user:pw@host/db or "
                 "sqlite:///file.db (default: $SWEEPER_STORAGE, then sqlite:///sweeps.db). "
                 "Prefer $SWEEPER_STORAGE for a URL with a password.", PROXY_STORAGE_WAIT_S)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface, as in a pod).")
@click.option("--port", type=click.IntRange(0, 65535), default=13000, show_default=True,
              help="gRPC port; runners use grpc://HOST:PORT as their storage.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=9090,
              show_default=True, help="Prometheus /metrics port (0: none).")
@click.option("--pool-size", type=click.IntRange(min=1), default=4, show_default=True,
              help="Database connections kept open (as many again may open under load).")
@security_options
@errors
def proxy(storage: StorageOptions, host: str, port: int, metrics_port: int, pool_size: int,
          security: SecurityOptions) -> None:
    """Serve the study storage to many runners through a few database connections: runners
    (and every sweeper command) use grpc://HOST:PORT as their storage URL and never see the
    database password."""
    serve_proxy(ProxyOptions(storage, host, port, metrics_port, pool_size, security), say)


def proxy_options(fn: Any) -> Any:
    """``run``'s storage-proxy and metrics options."""
    fn = click.option("--metrics-port", type=click.IntRange(1, 65535), metavar="PORT",
                      help="Serve Prometheus /metrics on this port while the sweep runs "
                           "(local: the workers go through an in-process proxy, which "
                           "times their claims, tells and heartbeats).")(fn)
    return click.option("--proxy/--no-proxy", "proxy", default=None,
                        help="Local backend: workers reach the study through an in-process "
                             "storage proxy (a few database connections for any number of "
                             "workers). Default: on for PostgreSQL from 64 workers.")(fn)
