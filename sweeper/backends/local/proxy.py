"""The in-process storage proxy of one run of the local backend (sweeper.backends.local), if
it has one: started before exec'd workers, or, where the first workers are forked, on a port
reserved before the forks and started after them (gRPC's threads must not be inherited)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from sweeper.protocol import ENV_PROXY_TOKEN

#: The local backend's logger: these lines keep the name they had before they moved here.
logger = logging.getLogger("sweeper.backends.local")


@dataclass
class LocalProxy:
    """The proxy's state in one run: ``url`` is what the workers open the study with (the
    storage's own URL when there is no proxy); ``server`` the proxy once it serves;
    ``reserved`` the port held for one started after the forks."""

    storage_url: str
    metrics: Any
    url: str
    server: Any = None
    reserved: Any = None
    #: Whether this run put its secret in ``$SWEEPER_PROXY_TOKEN`` (for its workers to
    #: inherit), and what was there before: :meth:`close` puts that back, so that the secret
    #: outlives the run in no later call of this process (a library user's, a benchmark's).
    owns_token: bool = False
    token_before: str | None = None

    @classmethod
    def plan(cls, storage_url: str, metrics: Any, *, wanted: bool, fork: bool) -> LocalProxy:
        """No proxy (not ``wanted``, or ``storage_url`` is one already), one started now
        (workers exec'd), or a port reserved for one started once the first workers are
        forked (``fork``)."""
        from sweeper.proxy.client import is_proxy_url

        if not wanted or is_proxy_url(storage_url):
            return cls(storage_url, metrics, storage_url)
        from sweeper.proxy.server import reserve_local_port, start_local_proxy

        before = os.environ.get(ENV_PROXY_TOKEN)
        if fork:
            reserved = reserve_local_port()
            return cls(storage_url, metrics, f"grpc://127.0.0.1:{reserved.getsockname()[1]}",
                       reserved=reserved, owns_token=True, token_before=before)
        server = start_local_proxy(storage_url, metrics)
        logger.info("workers reach the study through the storage proxy on %s", server.url)
        return cls(storage_url, metrics, server.url, server=server, owns_token=True,
                   token_before=before)

    def start_reserved(self) -> bool:
        """Start the proxy on the reserved port, if one is; True when it started (from then on
        this process has gRPC's threads: no further worker may be forked)."""
        if self.reserved is None:
            return False
        from sweeper.proxy.server import start_local_proxy

        try:
            self.server = start_local_proxy(self.storage_url, self.metrics,
                                            reserved=self.reserved)
        finally:
            self.reserved.close()
        logger.info("workers reach the study through the storage proxy on %s",
                    self.server.url)
        return True

    def close(self) -> None:
        """After the workers have stopped (stopping ones still mark their trials FAIL)."""
        if self.reserved is not None:  # closed already once the proxy serves; not if it did not
            self.reserved.close()
        if self.server is not None:
            self.server.stop()
        if self.owns_token:
            if self.token_before is None:
                os.environ.pop(ENV_PROXY_TOKEN, None)
            else:
                os.environ[ENV_PROXY_TOKEN] = self.token_before
