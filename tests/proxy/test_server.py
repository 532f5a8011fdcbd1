"""The proxy server itself: kubelet's gRPC health checks, a retryable database error seen by the
client as UNAVAILABLE (and retried), errors that are one line, a malformed request refused
(the wire itself: tests/proxy/test_wire.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc
import pytest
import sqlalchemy as sa

from sweeper.errors import StorageError
from sweeper.proxy.server import ProxyServer, _health_service
from sweeper.study import create_or_resume, open_storage
from sweeper.study.remote import wire
from tests.support.helpers import make_spec


@pytest.fixture
def server(sqlite_url: str) -> Iterator[ProxyServer]:
    server = ProxyServer(sqlite_url, port=0).start()
    yield server
    server.stop(0)


def _check(port: int, service: str) -> bytes:
    request = b"" if not service else b"\x0a" + bytes([len(service)]) + service.encode()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
        reply: bytes = check(request, timeout=10)
        return reply


def test_health_checks_answer_as_kubelet_expects(server: ProxyServer) -> None:
    assert _check(server.port, "") == b"\x08\x01"  # SERVING: the database answers
    assert _check(server.port, "liveness") == b"\x08\x01"
    with pytest.raises(grpc.RpcError) as e:
        _check(server.port, "nope")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert _health_service(b"") == "" and _health_service(b"\x0a\x03abc") == "abc"


def test_a_retryable_database_error_is_unavailable_and_the_client_retries(
        server: ProxyServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    import sweeper.study.sql.index as index

    storage = open_storage(server.url)
    sweep, _ = create_or_resume(storage, make_spec())
    real = index.attempts
    import psycopg2

    # What psycopg2 raises when the server goes away (no SQLSTATE): transient.
    lost = psycopg2.OperationalError("server closed the connection unexpectedly")
    failures = [sa.exc.OperationalError("SELECT", {}, lost)]

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return real(*args, **kwargs)

    monkeypatch.setattr(index, "attempts", flaky)  # what the server's handler calls
    with caplog.at_level(logging.WARNING, logger="sweeper.study.remote.client"):
        assert len(storage.attempts(sweep.study_id, 0)) == 1  # failed once, then served
    assert "storage proxy unavailable during Attempts" in caplog.text


def test_a_busy_port_and_a_proxy_of_a_proxy_are_one_line(server: ProxyServer,
                                                         sqlite_url: str) -> None:
    with pytest.raises(StorageError) as e:
        ProxyServer(sqlite_url, port=server.port)
    assert "in use" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(StorageError, match="must be a database"):
        ProxyServer(server.url)


@pytest.mark.parametrize("request_bytes", [b"not json", b"[1, 2]", b'{"study_id": "7"}',
                                           b'{"study_id": 1, "index": 0, "bogus": 1}',
                                           b'{"index": 0}'])
def test_a_malformed_request_is_invalid_argument_and_the_proxy_serves_on(
        server: ProxyServer, request_bytes: bytes) -> None:
    """A request that does not decode to the operation's arguments writes nothing and is
    INVALID_ARGUMENT naming what is wrong; the next well-formed call is served."""
    op = wire.OPERATIONS["attempts"]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        call = channel.unary_unary(op.path)
        with pytest.raises(grpc.RpcError) as raised:
            call(request_bytes, timeout=10)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed request" in (raised.value.details() or "")
        assert op.decode_reply(call(op.encode_call((1, 0), {}), timeout=10)) == []
