"""The credential of a storage proxy on loopback: a random secret in a file only its user can
read, one file per address, in the user's runtime directory.

Every user of a machine reaches 127.0.0.1, so a loopback proxy is no private one. ``sweeper
proxy`` on a loopback address makes a secret (256 bits) and writes it, mode 0600, to
``RUNTIME/sweeper/proxy-HOST-PORT.secret``; sweeper commands and runners of the same user that
are pointed at ``grpc://HOST:PORT`` read it there (:mod:`.credentials`), so no flag is needed,
while other users can neither read the file nor enter its directory (0700).

RUNTIME is ``$XDG_RUNTIME_DIR`` (a tmpfs only its user may enter, emptied at logout), else
``/run/user/UID``, else ``TMPDIR/sweeper-UID``; a directory that is not this user's own, or
that others may enter, is refused. A proxy started again at the same address keeps the secret
of the file it finds (runners in flight go on across a restart); deleting the file makes the
next start draw a new one. Nothing here logs or shows a secret.
"""

from __future__ import annotations

import ipaddress
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from sweeper.errors import StorageError

#: A secret shorter than this in a file is not one this module wrote: a new one replaces it.
_MIN_LENGTH = 32


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only: where a proxy's secret is a file, not a flag."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def runtime_dir(env: Mapping[str, str] = os.environ) -> Path:
    """This user's directory for proxy secrets, created (0700) when missing; StorageError
    when it is not private (another user's, or open to others)."""
    uid = os.geteuid()
    return _ensure_private(_candidate(env, uid), uid)


def secret_path(host: str, port: int, env: Mapping[str, str] = os.environ) -> Path:
    """Where the secret of the loopback proxy at ``host:port`` lives ("localhost" and
    127.0.0.1 are one address, as a client may name either); its directory is created."""
    return runtime_dir(env) / _file_name(host, port)


def expected_path(host: str, port: int, env: Mapping[str, str] = os.environ) -> Path:
    """Where a client looks for the secret of the loopback proxy at ``host:port`` (nothing is
    created: the file may not be there yet, or ever)."""
    uid = os.geteuid()
    return _candidate(env, uid) / _file_name(host, port)


def existing_secret(host: str, port: int, env: Mapping[str, str] = os.environ) -> str | None:
    """The secret a proxy at ``host:port`` wrote before (port 0, any free port: none), for a
    proxy started again at the same address to keep: its runners go on across the restart."""
    return read_secret(expected_path(host, port, env)) if port else None


def write_secret(host: str, port: int, secret: str, env: Mapping[str, str] = os.environ
                 ) -> Path:
    """Write ``secret`` as the one of the proxy at ``host:port``, mode 0600, atomically (a
    reader never sees half a secret); returns the file's path."""
    path = secret_path(host, port, env)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(secret + "\n")
    os.replace(tmp, path)
    return path


def read_secret(path: Path) -> str | None:
    """The secret in ``path``: None when there is none, or the file is not this user's own,
    not a regular file, or readable by others (then it is no secret)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, encoding="utf-8") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or \
                info.st_mode & 0o077:
            return None
        secret = f.read().strip()
    return secret if len(secret) >= _MIN_LENGTH else None


def _candidate(env: Mapping[str, str], uid: int) -> Path:
    for base in (env.get("XDG_RUNTIME_DIR"), f"/run/user/{uid}"):
        if base and _private_dir(Path(base), uid):
            return Path(base) / "sweeper"
    return Path(tempfile.gettempdir()) / f"sweeper-{uid}"


def _file_name(host: str, port: int) -> str:
    return f"proxy-{_address_name(host)}-{port}.secret"


def _address_name(host: str) -> str:
    host = host.strip("[]").lower()
    if host in ("localhost", "127.0.0.1"):
        return "127.0.0.1"
    return host.replace(":", "_")


def _private_dir(path: Path, uid: int) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and not info.st_mode & 0o077


def _ensure_private(path: Path, uid: int) -> Path:
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError as e:
        raise StorageError(f"cannot create {path} for the storage proxy's secret: "
                           f"{e.strerror}") from None
    if not _private_dir(path, uid):
        raise StorageError(f"{path} is not a directory only this user may enter (mode 0700, "
                           "owned by this user): refusing to keep the storage proxy's secret "
                           "there; set $XDG_RUNTIME_DIR to one")
    return path
