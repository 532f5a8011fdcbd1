"""A code directory as a deterministic, content-addressed archive, and its safe unpacking.

The archive is a tar (regular files and links inside the tree only) with every entry in
sorted order, mtimes, uids and gids zeroed and modes reduced to 0644 / 0755, compressed with
gzip (mtime 0, no file name). Its identity is the sha256 of the uncompressed tar
(``sha256:<hex>``): the same tree gives the same identity on any machine, whatever zlib
compresses it with. Files the code directory's ``.gitignore`` files or its ``.sweeperignore``
exclude are left out, and so are ``__pycache__`` directories (bytecode differs from machine
to machine) and what sweeper writes next to a spec (:data:`ALWAYS_IGNORED`).

Unpacking checks the identity before it writes anything, and refuses absolute names, ``..``,
links that point outside the directory and anything but files, directories and links.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import stat
import tarfile
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sweeper.errors import CodeError

#: Ignore files read at the root of the code directory (``.gitignore`` also below it).
SWEEPERIGNORE = ".sweeperignore"
GITIGNORE = ".gitignore"
#: Always left out: bytecode caches, and what sweeper itself writes next to a spec (SQLite
#: studies, local logs, default artifact directories), which changes from run to run.
ALWAYS_IGNORED = ("__pycache__/", "*.pyc", "*.db", "*.db-wal", "*.db-shm", "*.db-journal",
                  ".sweeper/", "*-artifacts/", ".sweeper-snapshot")
#: A file this large in a snapshot is worth a warning (a dataset or a checkpoint, probably).
LARGE_FILE_BYTES = 50 * 1024 * 1024
#: The marker an unpacked directory holds: the identity of the snapshot in it, written last.
MARKER = ".sweeper-snapshot"
_DIGEST_RE = re.compile(r"^sha256:([0-9a-f]{64})$")
#: File names that look like credentials (worth a warning: the snapshot is stored in the
#: artifact store or the study, readable by whoever reads those).
_CREDENTIAL_RE = re.compile(r"(^|[-_.])(kubeconfig|credentials)([-_.]|$)|^\.env$|^\.netrc$|"
                            r"^id_(rsa|ecdsa|ed25519)$|\.(pem|key|p12)$", re.IGNORECASE)


@dataclass(frozen=True)
class Snapshot:
    """A packed code directory."""

    #: ``sha256:<hex>`` of the uncompressed tar.
    digest: str
    #: The archive (tar.gz) as stored.
    data: bytes
    files: int
    #: Bytes of the files before compression.
    raw_bytes: int
    #: What looks unintended in it (a ``.git`` directory, a large file, a virtualenv).
    warnings: tuple[str, ...] = ()

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]

    @property
    def size(self) -> int:
        return len(self.data)


def parse_digest(value: str) -> str:
    """The hex of a ``sha256:<hex>`` identity; ValueError for anything else."""
    m = _DIGEST_RE.match(value.strip())
    if not m:
        raise ValueError(f"{value!r} is not a code snapshot identity (sha256:<64 hex digits>)")
    return m.group(1)


def _ignore_spec(root: Path, rel_dir: str) -> object | None:
    """The patterns of ``rel_dir``'s ignore files (``.gitignore``; at the root also
    ``.sweeperignore``), or None when it has none."""
    import pathspec

    lines: list[str] = []
    names = [GITIGNORE, SWEEPERIGNORE] if rel_dir == "" else [GITIGNORE]
    for name in names:
        f = root / rel_dir / name
        if f.is_file():
            lines += f.read_text(encoding="utf-8", errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _ignored(specs: list[tuple[str, object]], rel: str, is_dir: bool) -> bool:
    for base, spec in specs:
        sub = rel[len(base) + 1:] if base else rel
        if spec.match_file(sub + "/" if is_dir else sub):  # type: ignore[attr-defined]
            return True
    return False


def walk(root: Path, leave_out: Collection[str] = ()) -> Iterator[tuple[str, Path]]:
    """(relative POSIX name, path) of every file and link the snapshot holds, sorted;
    ``leave_out``: relative names left out too."""
    import pathspec

    always = pathspec.GitIgnoreSpec.from_lines(ALWAYS_IGNORED)
    stack: list[tuple[str, list[tuple[str, object]]]] = [("", [("", always)])]
    while stack:
        rel_dir, specs = stack.pop()
        own = _ignore_spec(root, rel_dir)
        specs = [*specs, (rel_dir, own)] if own is not None else specs
        subdirs: list[str] = []
        for entry in sorted(os.scandir(root / rel_dir), key=lambda e: e.name):
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            is_dir = entry.is_dir(follow_symlinks=False)
            if rel in leave_out or _ignored(specs, rel, is_dir):
                continue
            if is_dir:
                subdirs.append(rel)
            else:
                yield rel, Path(entry.path)
        stack += [(d, specs) for d in reversed(subdirs)]


def _link_inside(rel: str, target: str) -> bool:
    if os.path.isabs(target):
        return False
    parts = list(PurePosixPath(rel).parent.parts) + list(PurePosixPath(target).parts)
    depth = 0
    for part in parts:
        if part == "..":
            depth -= 1
        elif part != ".":
            depth += 1
        if depth < 0:
            return False
    return True


def _entry(rel: str, path: Path) -> tuple[tarfile.TarInfo, bytes | None] | None:
    """The tar entry of one file or link (None: a link out of the tree, a socket, ...).
    Raises CodeError for a file that cannot be read (a namespace or device bind-mounted
    there, a file without permission)."""
    st = path.lstat()
    info = tarfile.TarInfo(rel)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        if not _link_inside(rel, target):
            return None
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        return info, None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CodeError(f"{path}: trial.code: cannot read {rel} ({e.strerror}); leave it out "
                        f"with {SWEEPERIGNORE}, or set trial.code to the directory of the "
                        "code alone") from None
    info.size = len(data)
    info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    return info, data


def pack(root: Path, leave_out: Collection[str] = ()) -> Snapshot:
    """The snapshot of the code directory ``root`` (without the relative names
    ``leave_out``). Raises CodeError when it does not exist, is not a directory, or holds no
    file."""
    if not root.exists():
        raise CodeError(f"{root}: trial.code: the code directory does not exist")
    if not root.is_dir():
        raise CodeError(f"{root}: trial.code: not a directory")
    tar_bytes = io.BytesIO()
    files, raw = 0, 0
    notes = _Notes()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path in walk(root, leave_out):
            entry = _entry(rel, path)
            if entry is None:
                notes.skipped.append(rel)
                continue
            info, data = entry
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
            files += 1
            raw += info.size
            notes.see(rel, info.size)
    if files == 0:
        raise CodeError(f"{root}: trial.code: the code directory holds no file (after "
                        f"{GITIGNORE} and {SWEEPERIGNORE})")
    plain = tar_bytes.getvalue()
    digest = "sha256:" + hashlib.sha256(plain).hexdigest()
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="", compresslevel=6) as gz:
        gz.write(plain)
    return Snapshot(digest, out.getvalue(), files, raw, tuple(notes.lines()))


class _Notes:
    """What a snapshot holds that looks unintended."""

    def __init__(self) -> None:
        self.git = False
        self.venvs: set[str] = set()
        self.large: list[tuple[str, int]] = []
        self.skipped: list[str] = []
        self.credentials: list[str] = []

    def see(self, rel: str, size: int) -> None:
        parts = rel.split("/")
        self.git = self.git or ".git" in parts[:-1]
        if parts[-1] == "pyvenv.cfg":
            self.venvs.add("/".join(parts[:-1]) or ".")
        if size > LARGE_FILE_BYTES:
            self.large.append((rel, size))
        if _CREDENTIAL_RE.search(parts[-1]):
            self.credentials.append(rel)

    def lines(self) -> list[str]:
        out = []
        if self.git:
            out.append("it holds a .git directory (add .git/ to .sweeperignore)")
        out += [f"it holds a virtual environment: {v}/ (add it to .sweeperignore)"
                for v in sorted(self.venvs)]
        out += [f"it holds {rel}, {size / 2**20:.0f} MiB (data or a checkpoint? add it to "
                f".sweeperignore)" for rel, size in self.large]
        if self.credentials:
            out.append(f"it holds {', '.join(self.credentials[:3])}, which look(s) like "
                       "credentials (add to .sweeperignore)")
        if self.skipped:
            out.append(f"left out {len(self.skipped)} link(s) pointing outside the directory "
                       f"or special file(s), e.g. {self.skipped[0]}")
        return out


# --------------------------------------------------------------------------- unpacking


def verify(data: bytes, digest: str, where: str) -> bytes:
    """The uncompressed tar of ``data`` if its sha256 is ``digest``; CodeError otherwise
    (a corrupted or replaced object)."""
    want = parse_digest(digest)
    try:
        plain = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise CodeError(f"{where}: the code snapshot {digest} is not a gzip archive ({e}): "
                        "corrupted or replaced") from None
    got = hashlib.sha256(plain).hexdigest()
    if got != want:
        raise CodeError(f"{where}: the code snapshot's hash does not match: expected "
                        f"{digest}, got sha256:{got} (corrupted or replaced)")
    return plain


def unpacked(dest: Path) -> str | None:
    """The identity of the snapshot unpacked completely in ``dest`` (None: none is)."""
    try:
        return (dest / MARKER).read_text().strip() or None
    except OSError:
        return None


def unpack(data: bytes, digest: str, dest: Path, where: str) -> int:
    """Verify ``data`` and unpack it into ``dest`` (emptied first); the marker last, so a
    pod killed half-way unpacks again. Returns the number of entries."""
    plain = verify(data, digest, where)
    dest.mkdir(parents=True, exist_ok=True)
    _empty(dest)
    n = 0
    with tarfile.open(fileobj=io.BytesIO(plain), mode="r:") as tar:
        for info in tar:
            _extract(tar, info, dest, where)
            n += 1
    (dest / MARKER).write_text(digest + "\n")
    return n


def _empty(dest: Path) -> None:
    import shutil

    for entry in os.scandir(dest):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def _safe_name(name: str, where: str) -> PurePosixPath:
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise CodeError(f"{where}: the code snapshot holds an unsafe name {name!r}")
    return p


def _extract(tar: tarfile.TarFile, info: tarfile.TarInfo, dest: Path, where: str) -> None:
    rel = _safe_name(info.name, where)
    target = dest.joinpath(*rel.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    if info.isdir():
        target.mkdir(exist_ok=True)
    elif info.issym():
        if not _link_inside(str(rel), info.linkname):
            raise CodeError(f"{where}: the code snapshot's link {info.name} points outside "
                            f"it ({info.linkname})")
        os.symlink(info.linkname, target)
    elif info.isreg():
        src = tar.extractfile(info)
        assert src is not None
        with open(target, "xb") as f:
            f.write(src.read())
        os.chmod(target, 0o755 if info.mode & 0o111 else 0o644)
    else:
        raise CodeError(f"{where}: the code snapshot holds {info.name}, neither a file, a "
                        "directory nor a link")
