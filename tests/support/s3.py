"""moto's S3 in server mode on a free port of this machine, for tests whose S3 clients live in
other processes (trial runners, pods on the local cluster): they reach it at ``endpoint`` with
``credentials``."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test-key-id", "AWS_SECRET_ACCESS_KEY": "test-secret"}
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])

    def env(self) -> dict[str, str]:
        """What a process needs to use it: credentials, region, no proxy for its address."""
        host = self.endpoint.split("//", 1)[1].rsplit(":", 1)[0]
        no_proxy = ",".join(dict.fromkeys((host, "127.0.0.1", "localhost")))
        return {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION,
                "NO_PROXY": no_proxy, "no_proxy": no_proxy}


@contextmanager
def moto_s3(host: str = "127.0.0.1") -> Iterator[S3Server]:
    """The server on ``host`` (an address of this machine: the real node's pods reach it at
    their gateway, not at 127.0.0.1)."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    endpoint = f"http://{host}:{port}"
    # moto keeps its buckets in process-wide state that every ThreadedMotoServer shares: start
    # each test from an empty S3 (another test's objects under the same bucket and prefix
    # would otherwise show up in this one's listings).
    _reset(endpoint)
    try:
        yield S3Server(endpoint)
    finally:
        _reset(endpoint)
        server.stop()


def _reset(endpoint: str) -> None:
    import urllib.request

    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def clean_aws_env() -> dict[str, str | None]:
    """Environment overrides that keep a developer's AWS settings out of a test."""
    return {k: None for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                              "AWS_SESSION_TOKEN") if k in os.environ}


@contextmanager
def s3_in_env(monkeypatch: Any) -> Iterator[S3Server]:
    """:func:`moto_s3`, with this process's environment pointed at it (a developer's AWS
    settings taken out) and sweeper's cached artifact stores cleared before and after."""
    from sweeper.artifacts import cached_artifact_store

    with moto_s3() as server:
        for key, value in {**server.env(), **clean_aws_env()}.items():
            if value is None:
                monkeypatch.delenv(key, raising=False)
            else:
                monkeypatch.setenv(key, value)
        cached_artifact_store.cache_clear()
        try:
            yield server
        finally:
            cached_artifact_store.cache_clear()
