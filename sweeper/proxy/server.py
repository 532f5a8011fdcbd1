"""``sweeper proxy``: one grpc.Server, one port, three services.

- Optuna's StorageService (what ``optuna.storages.run_grpc_proxy_server`` serves) over Optuna's
  in-process trial cache, as Optuna's docs advise for the proxy;
- sweeper's IndexProtocol (:mod:`sweeper.study.remote.wire`): each call runs the same method
  of the index store the direct path runs (``SqlStore``), on the proxy's database connection,
  so every guarantee of the index protocol is the database's, whichever path a runner takes
  (and any number of proxy replicas may serve one database: each step is one transaction);
- ``grpc.health.v1.Health/Check`` (kubelet's gRPC probes): service ``""`` (readiness) answers
  SERVING when the database answers, ``liveness`` whenever the process does.

Every call is timed per method (Prometheus, :mod:`.metrics`); a database error that a retry
can fix becomes UNAVAILABLE, which the client retries.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import optuna
import sqlalchemy as sa

from sweeper._optuna_compat import (
    add_optuna_storage_servicer,
    cached_storage,
    is_finishing_request,
)
from sweeper.errors import SpecError, StorageError, StudyNotFoundError, SweeperError
from sweeper.protocol import ENV_PROXY_TOKEN
from sweeper.proxy.auth import Authenticator, SharedSecret, server_interceptors
from sweeper.proxy.limits import Limits, message_options
from sweeper.proxy.metrics import ProxyMetrics
from sweeper.proxy.tls import ServerTLS, add_port
from sweeper.study.remote import wire
from sweeper.study.remote.client import SCHEME, is_proxy_url
from sweeper.study.remote.codec import WireError
from sweeper.study.remote.credentials import new_local_secret
from sweeper.study.retry import StorageFailure, is_transient
from sweeper.study.sql import SqlStore, open_sql_store

logger = logging.getLogger(__name__)

#: Database connections one proxy holds at most (pool + overflow): with the orchestrator's
#: two, a sweep of any width stays at 10 connections (PostgreSQL allows 100 by default).
DEFAULT_POOL_SIZE = 4
DEFAULT_MAX_OVERFLOW = 4
#: Threads serving calls. Calls beyond the pool wait for a connection; more threads than
#: connections keep cheap calls (heartbeats, cached reads) from queueing behind slow ones.
DEFAULT_THREADS = 16

_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_SERVING, _NOT_SERVING = b"\x08\x01", b"\x08\x02"  # HealthCheckResponse{status: 1 | 2}


def _operation(store: SqlStore, op: wire.Operation) -> Callable[[bytes], bytes]:
    """The server side of one operation of :mod:`sweeper.study.remote.wire`: the store's
    method of its name, run on the proxy's database."""
    method = getattr(store, op.name)

    def serve(raw: bytes) -> bytes:
        return op.encode_reply(method(**op.decode_call(raw)))

    return serve


def _info(shown_url: str) -> Callable[[bytes], bytes]:
    import sweeper

    reply = wire.Info(shown_url, getattr(sweeper, "__version__", "0")).encode()
    return lambda raw: reply


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, kind: str, message: str,
           field: str | None = None) -> None:
    context.abort(code, wire.RemoteError(kind, message, field).details())


def _handler(fn: Callable[[bytes], bytes]) -> grpc.RpcMethodHandler:
    def behavior(raw: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            return fn(raw)
        except WireError as e:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "SweeperError",
                   f"malformed request: {e}")
        except KeyError as e:
            _abort(context, grpc.StatusCode.NOT_FOUND, "KeyError", str(e.args[0] if e.args
                                                                        else e))
        except optuna.exceptions.UpdateFinishedTrialError as e:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, "UpdateFinishedTrialError",
                   str(e))
        except SpecError as e:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "SpecError", e.message, e.field)
        except StudyNotFoundError as e:
            _abort(context, grpc.StatusCode.NOT_FOUND, "StudyNotFoundError", str(e))
        except StorageFailure as e:  # no retry fixes it: the client must not retry either
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, "StorageError", str(e))
        except StorageError as e:
            _abort(context, grpc.StatusCode.UNAVAILABLE, "StorageError", str(e))
        except SweeperError as e:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, "SweeperError", str(e))
        raise AssertionError("unreachable: context.abort raises")

    return grpc.unary_unary_rpc_method_handler(behavior)


class _Health:
    """``grpc.health.v1.Health/Check`` by hand (two tiny protobuf messages, no extra
    package): readiness pings the database at most once a second."""

    def __init__(self, storage: SqlStore) -> None:
        self.storage = storage
        self._checked_at = 0.0
        self._ok = False
        self._lock = threading.Lock()

    def check(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        service = _health_service(raw)
        if service == "liveness":
            return _SERVING
        if service != "":
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {service!r}")
        with self._lock:
            if time.monotonic() - self._checked_at > 1.0:
                self._ok = self._ping()
                self._checked_at = time.monotonic()
            return _SERVING if self._ok else _NOT_SERVING

    def _ping(self) -> bool:
        try:
            with self.storage.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return True
        except sa.exc.SQLAlchemyError as e:
            logger.warning("readiness: database unreachable (%s)", type(e.__cause__ or e).__name__)
            return False


def _health_service(raw: bytes) -> str:
    """HealthCheckRequest{string service = 1}: empty, or 0x0a, a length byte, the name."""
    if len(raw) >= 2 and raw[0] == 0x0A and raw[1] == len(raw) - 2:
        return raw[2:].decode(errors="replace")
    return ""


class _Observe(grpc.ServerInterceptor):
    """Times every unary call by method; turns a retryable database error into UNAVAILABLE."""

    def __init__(self, metrics: ProxyMetrics | None) -> None:
        self.metrics = metrics

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        method: str = details.method
        inner = handler.unary_unary
        metrics = self.metrics

        def behavior(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            reply = None
            try:
                reply = inner(request, context)
                return reply
            except Exception as e:
                if is_transient(e):
                    _abort(context, grpc.StatusCode.UNAVAILABLE, "StorageError",
                           f"database unavailable: {type(e.__cause__ or e).__name__}")
                raise
            finally:
                if metrics is not None:
                    metrics.observe(method, time.perf_counter() - start,
                                    tell=is_finishing_request(method, request),
                                    claim=wire.is_claim(method, reply))

        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


class ProxyServer:
    """The storage proxy on ``host:port`` (port 0: any free port), fronting ``url``."""

    def __init__(self, url: str, *, host: str = "127.0.0.1", port: int = 13000,
                 metrics: ProxyMetrics | None = None, pool_size: int = DEFAULT_POOL_SIZE,
                 max_overflow: int = DEFAULT_MAX_OVERFLOW, threads: int = DEFAULT_THREADS,
                 connect_deadline_s: float = 0.0, reuse_port: bool = False,
                 auth: Authenticator | None = None, limits: Limits | None = None,
                 tls: ServerTLS | None = None) -> None:
        from sweeper.study.urls import redact

        if is_proxy_url(url):
            raise StorageError(f"the proxy's storage must be a database, not {url}: use "
                               "postgresql://... or sqlite:///...")
        storage = open_sql_store(url, pool_size=pool_size, max_overflow=max_overflow,
                                 connect_deadline_s=connect_deadline_s)
        self.storage = storage
        self.metrics = metrics
        self.host = host
        self.shown_url = redact(url)
        self._server = grpc.server(ThreadPoolExecutor(max_workers=threads,
                                                      thread_name_prefix="sweeper-proxy"),
                                   interceptors=[*server_interceptors(auth, storage, limits),
                                                 _Observe(metrics)],
                                   options=[("grpc.so_reuseport", int(reuse_port)),
                                            *message_options(limits)])
        add_optuna_storage_servicer(self._server, cached_storage(storage))
        served = {op.wire_name: _handler(_operation(storage, op))
                  for op in wire.OPERATIONS.values()}
        served["Info"] = _handler(_info(self.shown_url))
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            wire.SERVICE, served)])
        health = _Health(storage)
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(
                health.check)})])
        try:
            self.port = add_port(self._server, host, port, tls)
        except RuntimeError:
            self.port = 0
        if not self.port:
            storage.engine.dispose()
            raise StorageError(f"cannot serve the storage proxy on {host}:{port}: the "
                               "address is in use or not available here")

    @property
    def url(self) -> str:
        """``grpc://`` URL a runner on this machine reaches the proxy at."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "[::]", "") else self.host
        return f"{SCHEME}{host}:{self.port}"

    def start(self) -> ProxyServer:
        self._server.start()
        logger.info("storage proxy for %s on %s:%d", self.shown_url, self.host, self.port)
        return self

    def stop(self, grace_s: float | None = 2.0) -> None:
        """Stop serving (calls in flight get ``grace_s`` to finish) and close the database."""
        self._server.stop(grace_s).wait()
        self.storage.engine.dispose()

    def wait(self) -> None:
        self._server.wait_for_termination()

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_local_proxy(storage_url: str, registry: Any = None,
                      reserved: socket.socket | None = None) -> ProxyServer:
    """A proxy in this process for local workers: loopback only, any free port (or the one
    ``reserved`` holds, see :func:`reserve_local_port`), its metrics in ``registry`` (a
    prometheus_client CollectorRegistry) when given. Every call must carry a random secret of
    this run, put in this process's environment (``$SWEEPER_PROXY_TOKEN``) for the workers it
    starts to inherit: never an argument, never logged."""
    metrics = ProxyMetrics(registry) if registry is not None else None
    port = reserved.getsockname()[1] if reserved is not None else 0
    secret = os.environ.get(ENV_PROXY_TOKEN) if reserved is not None else None
    if not secret:
        secret = os.environ[ENV_PROXY_TOKEN] = new_local_secret()
    # One caller (the run's secret) for every worker: no per-caller rate limit.
    return ProxyServer(storage_url, host="127.0.0.1", port=port, metrics=metrics,
                       reuse_port=reserved is not None, auth=SharedSecret(secret),
                       limits=Limits(rate=0)).start()


def reserve_local_port() -> socket.socket:
    """A loopback port for a local proxy started later: the local backend forks its workers
    (whose environment names the port) before the proxy's gRPC threads exist. The socket is
    bound with SO_REUSEPORT and never listens, so the proxy binds the same port beside it;
    close it once the proxy serves. The run's secret is made here too: the workers forked
    before the proxy starts find it in their environment, as ``$SWEEPER_PROXY_TOKEN``."""
    os.environ[ENV_PROXY_TOKEN] = new_local_secret()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    return sock
