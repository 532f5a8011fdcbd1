"""A TCP proxy between sweeper and PostgreSQL that injects database faults at chosen moments.

It reads the PostgreSQL wire protocol in both directions (psycopg2 sends every statement as a
simple Query message 'Q' with its parameters inlined, so the text says which protocol step it
is; a step sweeper prepared is matched as the statement its ``EXECUTE`` runs, see
:class:`Prepared`), and when a client statement matches an armed fault it does one of:

- ``cut_request``: close the connection instead of forwarding the statement (it never runs);
- ``cut_reply``: forward it, and when the server acknowledges the transaction's ``COMMIT``
  (CommandComplete "COMMIT"), close the connection instead of forwarding that reply: the
  commit landed, the client never hears it (the lost acknowledgement). A statement sent
  outside a transaction (autocommit: sweeper's single-statement steps on PostgreSQL) is its
  own transaction: its own CommandComplete is the reply dropped;
- ``stall``: hold the statement for ``delay`` seconds, then forward it;
- ``terminate``: ``pg_terminate_backend`` the backend serving this connection (its pid comes
  from the server's BackendKeyData message), then forward the statement into the dead session;
- ``restart``: what a server restart looks like to clients: every backend of the database is
  terminated and, for ``delay`` seconds, new connections are refused the way a starting server
  refuses them (FATAL 57P03 "the database system is starting up").

Tests arm faults (:meth:`FaultProxy.arm`) or install a random policy (the chaos run), and read
back what was injected (:attr:`FaultProxy.injected`). SSL is declined at the proxy so the
stream stays readable. Test support only: never between a user and their database.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa

KINDS = ("cut_request", "cut_reply", "stall", "terminate", "restart")

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


@dataclass
class Fault:
    """One armed fault: ``kind`` at the next ``count`` statements matching ``pattern``."""

    kind: str
    pattern: re.Pattern[str]
    step: str = ""
    count: int = 1
    delay: float = 1.0
    #: Run when the fault fires, before the client sees anything (another writer's move;
    #: for ``cut_request`` after the connection is closed, so the locks it held are free).
    on_fire: Callable[[], None] | None = None


@dataclass(frozen=True)
class Injection:
    """A fault that fired: what, where, and the statement it hit (first 160 characters)."""

    kind: str
    step: str
    statement: str


#: A random policy: statement -> (kind, step, delay) to inject, or None.
Policy = Callable[[str], "tuple[str, str, float] | None"]


class _Reader:
    """Buffered reads of one socket: whole messages, and whether more are already here (so
    the pumps forward a burst of messages in one send, not one small packet each)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def message(self) -> tuple[bytes, bytes]:
        """One typed message: (type byte, whole message bytes)."""
        head = self.exact(5)
        (length,) = struct.unpack("!I", head[1:5])
        return head[:1], head + self.exact(length - 4)

    def has_message(self) -> bool:
        if len(self.buf) < 5:
            return False
        (length,) = struct.unpack("!I", self.buf[1:5])
        return len(self.buf) >= 1 + length


def _connect_nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _statement(kind: bytes, msg: bytes) -> str | None:
    """The SQL text of a Query ('Q') or Parse ('P') message."""
    body = msg[5:]
    if kind == b"Q":
        return body.rstrip(b"\0").decode("utf-8", "replace")
    if kind == b"P":
        parts = body.split(b"\0")
        return parts[1].decode("utf-8", "replace") if len(parts) > 1 else None
    return None


_PREPARE = re.compile(r"^\s*PREPARE\s+(\w+)\s+AS\s+(.*)$", re.IGNORECASE | re.DOTALL)
_EXECUTE = re.compile(r"^\s*EXECUTE\s+(\w+)\s*(?:\((.*)\))?\s*$", re.IGNORECASE | re.DOTALL)
_PARAM = re.compile(r"\$(\d+)")


def _split_args(args: str) -> list[str]:
    """The literals of an ``EXECUTE``'s argument list as psycopg2 inlines them: split at the
    commas outside quotes, brackets and parentheses."""
    parts: list[str] = []
    depth, quoted, start = 0, False, 0
    for i, ch in enumerate(args):
        if ch == "'":
            quoted = not quoted  # '' inside a string toggles twice
        elif not quoted and ch in "([":
            depth += 1
        elif not quoted and ch in ")]":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            parts.append(args[start:i].strip())
            start = i + 1
    parts.append(args[start:].strip())
    return parts


class Prepared:
    """The statements prepared through the proxy (sweeper's one-statement steps on PostgreSQL,
    ``sweeper.study.sql.prepared``), so that an ``EXECUTE`` is matched as the statement it
    runs, its parameters in place, as the text it replaces was. A ``PREPARE`` is no step: no
    fault lands on it (a fault meant for a step lands on the step's ``EXECUTE``). Names are
    hashes of the text, the same on every connection: one table serves them all."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._lock = threading.Lock()

    def as_run(self, sql: str) -> str | None:
        """The statement ``sql`` runs, or None for a ``PREPARE``."""
        if m := _PREPARE.match(sql):
            with self._lock:
                self._texts[m.group(1)] = m.group(2)
            return None
        if m := _EXECUTE.match(sql):
            with self._lock:
                text = self._texts.get(m.group(1))
            if text is not None:
                args = _split_args(m.group(2)) if m.group(2) else []
                return _PARAM.sub(lambda p: args[int(p.group(1)) - 1], text)
        return sql


def _error_response(sqlstate: str, message: str) -> bytes:
    fields = b"".join(k + v.encode() + b"\0" for k, v in
                      ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", sqlstate), (b"M", message)))
    body = fields + b"\0"
    return b"E" + struct.pack("!I", len(body) + 4) + body


class _Connection:
    """One client connection and its upstream: two pump threads."""

    def __init__(self, proxy: FaultProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server: socket.socket | None = None
        self.backend_pid: int | None = None
        self.reply_fault: Fault | None = None  # cut_reply armed: drop the next COMMIT reply
        #: The session's transaction status from its last ReadyForQuery (I: idle, T, E).
        self.tx_status = b"I"
        #: The cut_reply statement was sent outside a transaction: it commits by itself.
        self.reply_alone = False
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()
        for s in (self.client, self.server):
            if s is None:
                continue
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.proxy.forget(self)

    def start(self) -> None:
        threading.Thread(target=self._client_side, daemon=True, name="faultproxy-c2s").start()

    def _startup(self, reader: _Reader) -> bool:
        """Relay the untyped startup packets; False when the connection ends here."""
        _connect_nodelay(self.client)
        while True:
            (length,) = struct.unpack("!I", reader.exact(4))
            body = reader.exact(length - 4)
            (code,) = struct.unpack("!I", body[:4])
            if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                self.client.sendall(b"N")  # no encryption: the proxy must read the stream
                continue
            if self.proxy.refusing():
                self.client.sendall(_error_response("57P03",
                                                    "the database system is starting up"))
                return False
            self.server = socket.create_connection(self.proxy.upstream, timeout=10)
            self.server.settimeout(None)
            _connect_nodelay(self.server)
            self.server.sendall(struct.pack("!I", length) + body)
            if code == _CANCEL_REQUEST:
                return False
            threading.Thread(target=self._server_side, daemon=True,
                             name="faultproxy-s2c").start()
            return True

    def _client_side(self) -> None:
        reader = _Reader(self.client)
        try:
            if not self._startup(reader):
                return
            assert self.server is not None
            out = bytearray()
            while not self.closed.is_set():
                kind, msg = reader.message()
                sql = _statement(kind, msg)
                if sql is not None:
                    sql = self.proxy.prepared.as_run(sql)
                fault = self.proxy.decide(sql) if sql is not None else None
                if fault is not None:
                    if out:
                        self.server.sendall(out)
                        out.clear()
                    if not self._inject(fault, sql or ""):
                        return
                out += msg
                if not reader.has_message():
                    self.server.sendall(out)
                    out.clear()
        except (OSError, ConnectionError, struct.error):
            pass
        finally:
            self.close()

    def _inject(self, fault: Fault, sql: str) -> bool:
        """Apply ``fault`` before forwarding ``sql``; False: the connection is gone."""
        proxy = self.proxy
        if fault.kind == "cut_request":
            self.close()  # first: the server rolls back, releasing the locks it held
            proxy.record(fault, sql)
            return False
        if fault.kind == "cut_reply":
            self.reply_fault = fault  # recorded when the COMMIT reply is dropped
            # ReadyForQuery came before the client sent this: the status is this statement's.
            self.reply_alone = self.tx_status == b"I"
            return True
        if fault.kind == "stall":
            proxy.record(fault, sql)
            time.sleep(fault.delay)
            return True
        if fault.kind == "terminate":
            proxy.record(fault, sql)
            if self.backend_pid is not None:
                proxy.terminate(self.backend_pid)
            return True
        if fault.kind == "restart":
            proxy.record(fault, sql)
            proxy.restart(fault.delay)
            return False
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _server_side(self) -> None:
        assert self.server is not None
        reader = _Reader(self.server)
        out = bytearray()
        try:
            while not self.closed.is_set():
                kind, msg = reader.message()
                if kind == b"K":
                    (self.backend_pid,) = struct.unpack("!I", msg[5:9])
                elif kind == b"Z":
                    self.tx_status = msg[5:6]
                elif kind == b"C" and self.reply_fault is not None:
                    tag = msg[5:].rstrip(b"\0")
                    if tag == b"COMMIT" or self.reply_alone:  # landed; the client never hears
                        what = "COMMIT" if tag == b"COMMIT" else f"{tag.decode()} (autocommit)"
                        self.proxy.record(self.reply_fault, f"{what} (reply dropped)")
                        return
                    if tag == b"ROLLBACK":
                        self.reply_fault = None
                out += msg
                if not reader.has_message():
                    self.client.sendall(out)
                    out.clear()
        except (OSError, ConnectionError, struct.error):
            pass
        finally:
            self.close()


@dataclass
class FaultProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream``. ``admin`` is a direct
    (AUTOCOMMIT) engine to the same server, for ``pg_terminate_backend``."""

    upstream: tuple[str, int]
    admin: sa.Engine
    database: str
    faults: list[Fault] = field(default_factory=list)
    policy: Policy | None = None
    injected: list[Injection] = field(default_factory=list)
    prepared: Prepared = field(default_factory=Prepared)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._conns: set[_Connection] = set()
        self._refuse_until = 0.0
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self._running = True
        threading.Thread(target=self._accept, daemon=True, name="faultproxy-accept").start()

    @classmethod
    def for_url(cls, pg_url: str, admin: sa.Engine) -> FaultProxy:
        parts = urlsplit(pg_url)
        return cls((parts.hostname or "127.0.0.1", parts.port or 5432), admin,
                   parts.path.lstrip("/"))

    def url(self, pg_url: str) -> str:
        """``pg_url`` with its host and port replaced by the proxy's."""
        parts = urlsplit(pg_url)
        userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit(parts._replace(netloc=f"{userinfo}127.0.0.1:{self.port}"))

    # ---- control

    def arm(self, kind: str, pattern: str, *, step: str = "", count: int = 1,
            delay: float = 1.0, on_fire: Callable[[], None] | None = None) -> Fault:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        fault = Fault(kind, re.compile(pattern, re.IGNORECASE | re.DOTALL), step, count, delay,
                      on_fire)
        with self._lock:
            self.faults.append(fault)
        return fault

    def disarm(self) -> None:
        with self._lock:
            self.faults.clear()
            self.policy = None

    def kinds_fired(self, step: str | None = None) -> list[str]:
        with self._lock:
            return [i.kind for i in self.injected if step is None or i.step == step]

    def close(self) -> None:
        self._running = False
        self._listener.close()
        for conn in list(self._conns):
            conn.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- faults that act on the server

    def terminate(self, pid: int) -> None:
        """``pg_terminate_backend`` and wait until that backend is gone."""
        with self.admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid})

    def restart(self, downtime: float) -> None:
        """Terminate every backend of the database and refuse new connections for a while."""
        with self._lock:
            self._refuse_until = time.monotonic() + downtime
        with self.admin.connect() as conn:
            conn.execute(sa.text(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE datname = :d AND pid <> pg_backend_pid()"), {"d": self.database})
        for conn in list(self._conns):
            conn.close()

    def refusing(self) -> bool:
        return time.monotonic() < self._refuse_until

    # ---- used by the connections

    def _accept(self) -> None:
        while self._running:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            conn = _Connection(self, client)
            with self._lock:
                self._conns.add(conn)
            conn.start()

    def forget(self, conn: _Connection) -> None:
        with self._lock:
            self._conns.discard(conn)

    def decide(self, sql: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.count > 0 and fault.pattern.search(sql):
                    fault.count -= 1
                    return fault
            policy = self.policy
        if policy is not None:
            hit = policy(sql)
            if hit is not None:
                kind, step, delay = hit
                return Fault(kind, re.compile(""), step, 1, delay)
        return None

    def record(self, fault: Fault, sql: str) -> None:
        with self._lock:
            self.injected.append(Injection(fault.kind, fault.step, " ".join(sql.split())[:160]))
        if fault.on_fire is not None:
            fault.on_fire()


def random_policy(steps: dict[str, str], *, rate: float, kinds: tuple[str, ...] = KINDS,
                  seed: int = 0, delay: float = 0.5) -> Policy:
    """For the chaos run: each statement of a protocol step (name -> regex) gets a fault of a
    random kind with probability ``rate``."""
    rng = random.Random(seed)
    compiled = {name: re.compile(p, re.IGNORECASE | re.DOTALL) for name, p in steps.items()}
    lock = threading.Lock()

    def decide(sql: str) -> tuple[str, str, float] | None:
        for name, pattern in compiled.items():
            if pattern.search(sql):
                with lock:
                    if rng.random() < rate:
                        return rng.choice(kinds), name, delay
                return None
        return None

    return decide
