"""The storage proxy for tests: in this process (``ProxyServer``) or as a real ``sweeper proxy``
process that a test can SIGKILL and start again on the same port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEPER = Path(sys.executable).parent / "sweeper"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def in_process_proxy(storage_url: str, **kwargs: object) -> Iterator[str]:
    """A proxy in this process for ``storage_url``; yields its ``grpc://`` URL."""
    from sweeper.proxy.server import ProxyServer

    server = ProxyServer(storage_url, port=0, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield server.url
    finally:
        server.stop(0)


def wait_ready(url: str, timeout: float = 60.0) -> None:
    from sweeper.study.remote.client import ProxyStorage

    client = ProxyStorage(url)
    try:
        client.wait_ready(timeout)
    finally:
        client.close()


class ProxyProcess:
    """``sweeper proxy`` as a child process; the database URL goes through the environment."""

    def __init__(self, storage_url: str, workdir: Path, *, port: int | None = None,
                 metrics_port: int = 0) -> None:
        self.storage_url = storage_url
        self.port = port or free_port()
        self.metrics_port = metrics_port
        self.log = workdir / "proxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    def start(self) -> ProxyProcess:
        env = dict(os.environ, SWEEPER_STORAGE=self.storage_url,
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(SWEEPER), "proxy", "--port", str(self.port),
                 "--metrics-port", str(self.metrics_port)],
                env=env, stdout=log, stderr=log)
        wait_ready(self.url)
        return self

    def kill(self) -> None:
        """SIGKILL: no grace, calls in flight are cut (what a node failure does)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(predicate: object, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not met after {timeout}s")
