"""The kubelet's log endpoint for the process node: ``GET /containerLogs/NS/POD/CONTAINER``
over HTTPS, which the apiserver calls for ``kubectl logs`` (``pods/log``), with ``follow``,
``tailLines`` and ``limitBytes``. Callers are not authenticated: the server listens on
loopback only, for the local test cluster."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

#: (namespace, pod, container or None) -> (log file, still running) or None
Lookup = Callable[[str, str, str | None], "tuple[Path, bool] | None"]


def tail(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


class LogServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], lookup: Lookup, cert: str, key: str) -> None:
        super().__init__(addr, _Handler)
        self.lookup = lookup
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)


class _Handler(BaseHTTPRequestHandler):
    server: LogServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if len(parts) not in (3, 4) or parts[0] != "containerLogs":
            self._plain(404, f"no such endpoint: {url.path}\n")
            return
        found = self.server.lookup(parts[1], parts[2], parts[3] if len(parts) == 4 else None)
        if found is None:
            self._plain(404, f"container logs of {parts[1]}/{parts[2]} not found\n")
            return
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path, running = found
        data = path.read_bytes()
        if "tailLines" in q:
            data = tail(data, int(q["tailLines"]))
        if "limitBytes" in q:
            data = data[: int(q["limitBytes"])]
        follow = q.get("follow") in ("true", "1") and running
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunk(data)
        if follow:
            self._follow(parts, path, path.stat().st_size if "limitBytes" not in q else None)
        self._end()

    def _follow(self, parts: list[str], path: Path, offset: int | None) -> None:
        if offset is None:
            return
        while True:
            size = path.stat().st_size
            if size > offset:
                with path.open("rb") as f:
                    f.seek(offset)
                    self._chunk(f.read(size - offset))
                offset = size
                continue
            found = self.server.lookup(parts[1], parts[2], parts[3] if len(parts) == 4 else None)
            if found is None or not found[1]:
                with path.open("rb") as f:  # what the last moments wrote
                    f.seek(offset)
                    self._chunk(f.read())
                return
            time.sleep(0.1)

    def _chunk(self, data: bytes) -> None:
        if data:  # an empty chunk would end the response
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _plain(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
