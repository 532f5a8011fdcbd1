"""``sweeper proxy``: the long-lived storage proxy (Optuna's gRPC proxy + sweeper's index
protocol service on one port, Prometheus metrics on another)."""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Any

import click

from sweeper.cli._common import errors
from sweeper.cli._group import cli, storage_wait_s
from sweeper.cli._proxy_security import announce, build_security, security_options
from sweeper.errors import SweeperError

if TYPE_CHECKING:
    pass

logger = logging.getLogger("sweeper.proxy.metrics")
#: How long ``sweeper proxy`` waits for its database by default (in a pod it may start first).
PROXY_STORAGE_WAIT_S = 60.0


@cli.command()
@click.option("--storage", metavar="URL",
              help="The database the proxy fronts: postgresql://user:pw@host/db or "
                   "sqlite:///file.db (default: $SWEEPER_STORAGE, then sqlite:///sweeps.db). "
                   "Prefer $SWEEPER_STORAGE for a URL with a password.")
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
def proxy(storage: str | None, host: str, port: int, metrics_port: int,
          pool_size: int, **security: Any) -> None:
    """Serve the study storage to many runners through a few database connections: runners
    (and every sweeper command) use grpc://HOST:PORT as their storage URL and never see the
    database password."""
    from prometheus_client import CollectorRegistry

    from sweeper.proxy.metrics import ProxyMetrics, StudyCollector, serve_metrics
    from sweeper.proxy.server import ProxyServer
    from sweeper.study import redact, resolve_storage_url

    url = resolve_storage_url(storage)
    registry = CollectorRegistry()
    guard = build_security(host, port, security)
    server = ProxyServer(url, host=host, port=port, metrics=ProxyMetrics(registry),
                         pool_size=pool_size, max_overflow=pool_size,
                         connect_deadline_s=storage_wait_s(PROXY_STORAGE_WAIT_S),
                         **guard.server_kwargs())
    registry.register(StudyCollector(lambda: server.storage))
    metrics = None
    if metrics_port:
        try:
            metrics = serve_metrics(registry, metrics_port, host)
        except OSError as e:
            server.stop(0)
            raise SweeperError(f"cannot serve metrics on {host}:{metrics_port}: "
                               f"{e.strerror}") from None
    try:
        announce(guard, host, server.port)
    except SweeperError:
        server.stop(0)
        raise
    server.start()
    shown = f", metrics on http://{host}:{metrics_port}/metrics" if metrics_port else ""
    click.echo(f"storage proxy for {redact(url)} on grpc://{host}:{server.port}{shown} "
               "(Ctrl-C to stop)", err=True)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a pod's shutdown: finish the calls in flight
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop(grace_s=5.0)
        if metrics is not None:
            metrics.shutdown()
    click.echo("storage proxy stopped", err=True)


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
