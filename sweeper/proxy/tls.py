"""TLS on the proxy's port: the certificate and key a platform team issues (cert-manager's
``Certificate`` writes them into a Secret, mounted into the proxy's pod), and the rule that
plaintext is served only on loopback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sweeper.errors import StorageError


@dataclass(frozen=True)
class ServerTLS:
    certificate_chain: bytes
    private_key: bytes

    @classmethod
    def from_files(cls, cert: str, key: str) -> ServerTLS:
        try:
            with open(cert, "rb") as c, open(key, "rb") as k:
                return cls(c.read(), k.read())
        except OSError as e:
            raise StorageError(f"cannot read the proxy's TLS certificate or key {e.filename}: "
                               f"{e.strerror}") from None


def add_port(server: Any, host: str, port: int, tls: ServerTLS | None) -> int:
    """Bind ``host:port``: TLS with ``tls``, else plaintext (the CLI allows that only on
    loopback, see :func:`check_plaintext`). Returns the port (0: not bound)."""
    import grpc

    address = f"{host}:{port}"
    if tls is None:
        return int(server.add_insecure_port(address))
    creds = grpc.ssl_server_credentials([(tls.private_key, tls.certificate_chain)])
    return int(server.add_secure_port(address, creds))
