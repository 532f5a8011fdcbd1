"""TLS on the proxy's port (issue 28): a certificate signed by a CA of the test's own (made with
openssl, as tests/cluster/pki.py makes the cluster's); a runner with that CA in
``$SWEEPER_PROXY_CA`` works, one without it or with another CA is refused at once with one
line; ``sweeper proxy`` serves plaintext off loopback only when told to."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.errors import StorageError
from sweeper.protocol import ENV_PROXY_CA, ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE
from sweeper.proxy.auth import SharedSecret
from sweeper.proxy.server import ProxyServer
from sweeper.proxy.tls import ServerTLS
from sweeper.study.remote.client import ProxyStorage
from sweeper.study.remote.localsecret import is_loopback

SECRET = "tls-test-secret-0123456789abcdef"


def _openssl(d: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=sweeper-test-ca")
    _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out",
             "tls.csr", "-subj", "/CN=sweeper-storage-proxy")
    (d / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(d, "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "ext")
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other.key",
             "-out", "other.crt", "-days", "2", "-subj", "/CN=another-ca")
    return d


@pytest.fixture
def server(sqlite_url: str, pki: Path) -> Iterator[ProxyServer]:
    tls = ServerTLS.from_files(str(pki / "tls.crt"), str(pki / "tls.key"))
    server = ProxyServer(sqlite_url, port=0, auth=SharedSecret(SECRET), tls=tls).start()
    yield server
    server.stop(0)


def _open(url: str, ca: Path | None, monkeypatch: pytest.MonkeyPatch) -> ProxyStorage:
    monkeypatch.setenv(ENV_PROXY_TOKEN, SECRET)
    monkeypatch.delenv(ENV_PROXY_TOKEN_FILE, raising=False)
    if ca is None:
        monkeypatch.delenv(ENV_PROXY_CA, raising=False)
    else:
        monkeypatch.setenv(ENV_PROXY_CA, str(ca))
    storage = ProxyStorage(url)
    try:
        storage.wait_ready(20)
    except BaseException:
        storage.close()
        raise
    return storage


def test_a_runner_with_the_ca_works_and_one_without_is_refused_with_one_line(
        server: ProxyServer, pki: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = _open(server.url, pki / "ca.crt", monkeypatch)
    assert storage.get_all_studies() == []
    storage.close()
    with pytest.raises(StorageError) as e:
        _open(server.url, None, monkeypatch)
    assert str(e.value) == (f"storage proxy {server.url} serves TLS: set $SWEEPER_PROXY_CA "
                            "to the CA that signed its certificate")
    with pytest.raises(StorageError) as e:
        _open(server.url, pki / "other.crt", monkeypatch)
    assert str(e.value) == (f"storage proxy {server.url}: TLS handshake failed during "
                            "connecting (the CA in $SWEEPER_PROXY_CA did not sign its "
                            "certificate)")
    with pytest.raises(StorageError, match="cannot read the storage proxy's CA"):
        _open(server.url, pki / "missing.crt", monkeypatch)


def test_plaintext_is_served_off_loopback_only_when_asked(sqlite_url: str, pki: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")
    result = CliRunner().invoke(cli, ["proxy", "--storage", sqlite_url, "--host", "0.0.0.0",
                                      "--port", "0", "--metrics-port", "0"])
    assert result.exit_code == 2
    assert "--host 0.0.0.0 is not loopback: serve TLS (--tls-cert, --tls-key) or pass " \
           "--insecure-plaintext" in result.output
    result = CliRunner().invoke(cli, ["proxy", "--storage", sqlite_url, "--tls-cert",
                                      str(pki / "tls.crt"), "--port", "0"])
    assert result.exit_code == 2 and "--tls-cert and --tls-key go together" in result.output
