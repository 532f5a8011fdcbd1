"""``sweeper proxy``: the long-lived storage proxy (Optuna's gRPC proxy + sweeper's index
protocol service on one port, Prometheus metrics on another), and its security: who may call
it (``auth``), TLS, limits; on a loopback address by default a secret in a file only this
user can read (:mod:`sweeper.study.remote.localsecret`)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from sweeper.app.options import StorageOptions
from sweeper.errors import OptionError, SweeperError

if TYPE_CHECKING:
    from sweeper.proxy.auth import Authenticator
    from sweeper.proxy.limits import Limits
    from sweeper.proxy.tls import ServerTLS

Say = Callable[[str], None]
#: How long ``sweeper proxy`` waits for its database by default (in a pod it may start first).
PROXY_STORAGE_WAIT_S = 60.0


@dataclass(frozen=True)
class SecurityOptions:
    """Who may call the proxy and how: ``auth`` kubernetes (a ServiceAccount token for
    ``audience``, reviewed with TokenReview, trusted ``auth_cache_ttl`` seconds; trial pods
    of ``namespace`` reach their own sweep), secret ($SWEEPER_PROXY_SECRET), none; None: on a
    loopback host a local secret, else kubernetes. TLS from ``tls_cert`` and ``tls_key``
    (``insecure_plaintext``: plaintext off loopback). Limits per caller: ``rate`` calls a
    second, ``burst`` at once, requests up to ``max_message_mb``."""

    auth: str | None = None
    audience: str = "sweeper-proxy"
    namespace: str | None = None
    kubeconfig: str | None = None
    auth_cache_ttl: float = 60.0
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure_plaintext: bool = False
    max_message_mb: float = 16.0
    rate: float = 200.0
    burst: int = 1000


@dataclass(frozen=True)
class ProxyOptions:
    """Where the proxy listens (``host``, gRPC ``port``, ``metrics_port``; 0: none), the
    database connections it keeps (``pool_size``, as many again under load) and its
    security."""

    storage: StorageOptions = field(default_factory=lambda: StorageOptions(
        wait_s=PROXY_STORAGE_WAIT_S))
    host: str = "127.0.0.1"
    port: int = 13000
    metrics_port: int = 9090
    pool_size: int = 4
    security: SecurityOptions = field(default_factory=SecurityOptions)


def serve_proxy(options: ProxyOptions, say: Say) -> None:
    """Serve the study storage until Ctrl-C or SIGTERM (a pod's shutdown: the calls in flight
    finish). Raises SweeperError when it cannot start."""
    from prometheus_client import CollectorRegistry

    from sweeper.proxy.metrics import ProxyMetrics, StudyCollector, serve_metrics
    from sweeper.proxy.server import ProxyServer
    from sweeper.study.urls import redact, resolve_storage_url

    url = resolve_storage_url(options.storage.url)
    host, port, metrics_port = options.host, options.port, options.metrics_port
    registry = CollectorRegistry()
    guard = build_security(host, port, options.security)
    server = ProxyServer(url, host=host, port=port, metrics=ProxyMetrics(registry),
                         pool_size=options.pool_size, max_overflow=options.pool_size,
                         connect_deadline_s=options.storage.wait_s, **guard.server_kwargs())
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
        announce(guard, host, server.port, say)
    except SweeperError:
        server.stop(0)
        raise
    server.start()
    shown = f", metrics on http://{host}:{metrics_port}/metrics" if metrics_port else ""
    say(f"storage proxy for {redact(url)} on grpc://{host}:{server.port}{shown} "
        "(Ctrl-C to stop)")
    signal.signal(signal.SIGTERM, _stop)  # a pod's shutdown: finish the calls in flight
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop(grace_s=5.0)
        if metrics is not None:
            metrics.shutdown()
    say("storage proxy stopped")


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@dataclass(frozen=True)
class Security:
    """What the options ask of the proxy: ProxyServer's ``auth``, ``limits`` and ``tls``, and
    on a loopback address without --auth the secret to publish once the port is bound."""

    auth: Authenticator | None
    limits: Limits
    tls: ServerTLS | None
    local_secret: str | None = None

    def server_kwargs(self) -> dict[str, Any]:
        return {"auth": self.auth, "limits": self.limits, "tls": self.tls}


def build_security(host: str, port: int, opts: SecurityOptions) -> Security:
    """The proxy's security from the options (a usage error for a combination that would
    serve plaintext off loopback)."""
    from sweeper.proxy.limits import Limits
    from sweeper.proxy.tls import ServerTLS
    from sweeper.study.remote.localsecret import is_loopback

    loopback = is_loopback(host)
    tls = None
    if opts.tls_cert or opts.tls_key:
        if not (opts.tls_cert and opts.tls_key):
            raise OptionError("--tls-cert and --tls-key go together")
        tls = ServerTLS.from_files(opts.tls_cert, opts.tls_key)
    elif not loopback and not opts.insecure_plaintext:
        raise OptionError(f"--host {host} is not loopback: serve TLS (--tls-cert, "
                               "--tls-key) or pass --insecure-plaintext")
    limits = Limits(max_message_bytes=int(opts.max_message_mb * 1024 * 1024),
                    rate=opts.rate, burst=opts.burst)
    mode = opts.auth or ("local" if loopback else "kubernetes")
    if mode == "local":
        from sweeper.proxy.auth import SharedSecret
        from sweeper.study.remote.credentials import new_local_secret
        from sweeper.study.remote.localsecret import existing_secret

        secret = existing_secret(host, port) or new_local_secret()
        return Security(SharedSecret(secret, name="holder of the local proxy secret"), limits,
                        tls, local_secret=secret)
    return Security(_authenticator(mode, opts), limits, tls)


def _authenticator(mode: str, opts: SecurityOptions) -> Authenticator | None:
    if mode == "none":
        return None
    if mode == "secret":
        from sweeper.proxy.auth import SharedSecret

        secret = os.environ.get("SWEEPER_PROXY_SECRET", "")
        if len(secret) < 16:
            raise SweeperError("--auth secret needs $SWEEPER_PROXY_SECRET (16 characters "
                               "or more)")
        return SharedSecret(secret, name="holder of the proxy secret")
    from sweeper.backends.kubernetes.client import ClientFactory
    from sweeper.proxy.kubeauth import KubernetesAuthenticator, in_cluster_namespace

    namespace = opts.namespace or in_cluster_namespace()
    return KubernetesAuthenticator(ClientFactory(opts.kubeconfig), namespace,
                                   audience=opts.audience, ttl_s=opts.auth_cache_ttl)


def announce(security: Security, host: str, port: int, say: Say) -> None:
    """Before the proxy serves: the loopback secret written to its file (its path said, never
    the secret), or the one-line warning of a proxy that lets anyone in."""
    from sweeper.study.remote.localsecret import write_secret

    if security.local_secret is not None:
        path = write_secret(host, port, security.local_secret)
        say(f"callers need the secret in {path} (mode 0600: this user only); sweeper commands "
            "and runners of this user read it there")
    elif security.auth is None:
        say(f"warning: --auth none: anyone who reaches {host}:{port} (on loopback: every user "
            "of this machine) can read, change and delete every study")
