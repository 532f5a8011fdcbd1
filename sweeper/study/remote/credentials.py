"""The caller's end of the proxy's security: which credential every call carries and how the
channel is secured.

- the credential: ``$SWEEPER_PROXY_TOKEN`` (a local run's per-run secret, or a token a user
  exported: ``kubectl create token NAME --audience sweeper-proxy``), else the file
  ``$SWEEPER_PROXY_TOKEN_FILE`` names (a pod's projected ServiceAccount token, re-read when the
  kubelet renews it), else, for a proxy on loopback, the secret file that proxy wrote for its
  address in this user's runtime directory (:mod:`.localsecret`), else none; sent on every
  call as ``authorization: Bearer TOKEN`` metadata by a client interceptor (call credentials
  would need TLS; a loopback proxy has none);
- TLS: ``$SWEEPER_PROXY_CA`` names the CA (PEM) that signed the proxy's certificate; the
  channel then verifies it, and a proxy with another certificate is refused.

Nothing here logs or shows a token. grpc is imported on first use.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweeper.errors import StorageError
from sweeper.protocol import ENV_PROXY_CA, ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE

#: The audience of the tokens the proxy accepts (a pod's projected token names it).
DEFAULT_AUDIENCE = "sweeper-proxy"
#: The metadata key the credential travels in (gRPC metadata keys are lower case).
METADATA_KEY = "authorization"
#: A projected token file is looked at again at most this often (the kubelet renews it at
#: 80 % of its lifetime, so minutes of slack).
REREAD_S = 10.0


class TokenSource:
    """The credential of this process: a literal token or a file re-read when it changes.
    ``optional``: a file that is not there (yet) is no credential, looked for again on the
    next call (a loopback proxy's secret, written when that proxy starts)."""

    def __init__(self, token: str | None = None, path: str | None = None,
                 clock: Callable[[], float] = time.monotonic, optional: bool = False) -> None:
        self._token = token
        self._path = path
        self._optional = optional
        self._clock = clock
        self._read_at = float("-inf")
        self._mtime = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> TokenSource | None:
        token, path = env.get(ENV_PROXY_TOKEN), env.get(ENV_PROXY_TOKEN_FILE)
        if token:
            return cls(token=token)
        if path:
            return cls(path=path)
        return None

    def token(self) -> str:
        if self._path is None:
            return self._token or ""
        with self._lock:
            if self._clock() - self._read_at >= REREAD_S or self._token is None:
                self._reread(self._path)
            return self._token or ""

    def _reread(self, path: str) -> None:
        try:
            mtime = os.stat(path).st_mtime
            if self._token is None or mtime != self._mtime:
                with open(path, encoding="utf-8") as f:
                    self._token = f.read().strip()
                self._mtime = mtime
        except OSError as e:
            if self._token is None and not self._optional:
                raise StorageError(f"cannot read the storage proxy token {path}: "
                                   f"{e.strerror}") from None
        self._read_at = self._clock()


def _interceptor(source: TokenSource) -> Any:
    import grpc

    class Bearer(grpc.UnaryUnaryClientInterceptor):
        """Adds the credential to every call's metadata."""

        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            token = source.token()
            if not token:  # an optional credential that is not there: the call goes without
                return continuation(details, request)
            metadata = list(details.metadata or [])
            metadata.append((METADATA_KEY, f"Bearer {token}"))
            return continuation(details._replace(metadata=metadata), request)

    return Bearer()


def open_channel(host: str, port: int, options: Sequence[tuple[str, Any]],
                 env: Mapping[str, str] = os.environ) -> Any:
    """A grpc channel to the proxy: TLS verified with ``$SWEEPER_PROXY_CA`` when it is set,
    every call carrying the credential of :meth:`TokenSource.from_env` when there is one."""
    import grpc

    target = f"{host}:{port}"
    ca = env.get(ENV_PROXY_CA)
    if ca:
        try:
            with open(ca, "rb") as f:
                roots = f.read()
        except OSError as e:
            raise StorageError(f"cannot read the storage proxy's CA {ca}: {e.strerror}") from None
        channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(roots),
                                      options=list(options))
    else:
        channel = grpc.insecure_channel(target, options=list(options))
    source = TokenSource.from_env(env) or _local_secret(host, port, env)
    if source is None:
        return channel
    source.token()  # a missing token file fails here, with one line, not on the first call
    return grpc.intercept_channel(channel, _interceptor(source))


def _local_secret(host: str, port: int, env: Mapping[str, str]) -> TokenSource | None:
    """The secret a loopback ``sweeper proxy`` of this user writes for ``host:port``
    (:mod:`.localsecret`), read when a call is made (the proxy may start after this client)
    and again when it changes; None off loopback."""
    from sweeper.study.remote.localsecret import expected_path, is_loopback

    if not is_loopback(host):
        return None
    return TokenSource(path=str(expected_path(host, port, env)), optional=True)


def new_local_secret() -> str:
    """A random secret for one run's in-process proxy (256 bits)."""
    return secrets.token_urlsafe(32)


#: What a proxy that refuses this caller answers (no retry fixes them).
_REFUSED = ("UNAUTHENTICATED", "PERMISSION_DENIED")
#: What gRPC says when the TLS handshake fails (a CA that did not sign the proxy's
#: certificate, a plaintext client against a TLS port, or the reverse): the channel reports
#: UNAVAILABLE, which would otherwise be retried as a proxy that is down.
_TLS_FAILURES = ("handshake", "ssl", "tls", "certificate", "wrong_version_number")


def refusal(error: Exception, url: str, what: str) -> StorageError | None:
    """The one line for an error of ``what`` no retry can fix: the proxy refused this
    caller's credential or operation, or the TLS handshake failed. None for anything else."""
    import grpc

    if not isinstance(error, grpc.Call):
        return None
    code, details = error.code(), str(error.details() or "")
    if code.name in _REFUSED:
        hint = ""
        if "no credential" in details:
            hint = (" (a proxy on loopback is called with the secret it writes to a file of "
                    "its user's runtime directory: is it another user's? Else set "
                    "$SWEEPER_PROXY_TOKEN)")
        return StorageError(f"storage proxy {url} refused {what} ({code.name}): "
                            f"{details}{hint}")
    if code == grpc.StatusCode.UNAVAILABLE and any(w in details.lower() for w in _TLS_FAILURES):
        has_ca = bool(os.environ.get(ENV_PROXY_CA))
        hint = ("the CA in $SWEEPER_PROXY_CA did not sign its certificate" if has_ca else
                "set $SWEEPER_PROXY_CA to the CA that signed its certificate")
        return StorageError(f"storage proxy {url}: TLS handshake failed during {what} "
                            f"({hint})")
    return None


def diagnose(channel: Any, host: str, port: int, url: str) -> StorageError | None:
    """Why a proxy that does not become ready will not: one call's error, when it is one no
    wait fixes (a TLS handshake that fails). None: it may still come up."""
    import grpc

    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
    try:
        check(b"", timeout=2.0)
    except grpc.RpcError as e:
        found = refusal(e, url, "connecting")
        if found is None and not os.environ.get(ENV_PROXY_CA) and _speaks_tls(host, port):
            # A plaintext client's connection to a TLS port is merely "closed".
            return StorageError(f"storage proxy {url} serves TLS: set $SWEEPER_PROXY_CA to "
                                "the CA that signed its certificate")
        return found
    return None


def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a TLS handshake (its certificate unchecked: this only
    tells a TLS port from a plaintext one, for the error message)."""
    import socket
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=2.0) as sock, \
                context.wrap_socket(sock, server_hostname=host):
            return True
    except (OSError, ssl.SSLError):
        return False


def is_throttled(error: Exception) -> bool:
    """The proxy's rate limit (``sweeper.proxy.limits``): wait and call again, as for a proxy
    that is unavailable (a message over the size limit is RESOURCE_EXHAUSTED too, and final)."""
    import grpc

    return isinstance(error, grpc.Call) and \
        error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and \
        "calls/s" in str(error.details() or "")
