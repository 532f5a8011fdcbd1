"""Snapshots: deterministic, honour the ignore files, warn about what looks unintended, and
unpack only what stays inside the directory, after checking the hash."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from sweeper.code.snapshot import MARKER, pack, parse_digest, unpack, unpacked, verify
from sweeper.errors import CodeError


def _tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text("X = 1\n")
    (root / "train.py").write_text("import pkg.model\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    return root


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getnames()


def test_the_same_tree_gives_the_same_archive_and_hash(tmp_path: Path) -> None:
    a = pack(_tree(tmp_path / "a"))
    b_root = _tree(tmp_path / "b")
    os.utime(b_root / "train.py", (1, 1))  # mtimes are not part of it
    b = pack(b_root)
    assert a.data == b.data and a.digest == b.digest
    assert a.files == 4 and a.digest.startswith("sha256:") and len(parse_digest(a.digest)) == 64
    (b_root / "train.py").write_text("import pkg.model  # edited\n")
    assert pack(b_root).digest != a.digest


def test_gitignore_sweeperignore_and_sweepers_own_files_are_left_out(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    (root / ".gitignore").write_text("data/\n*.log\n")
    (root / ".sweeperignore").write_text("secret.txt\n")
    (root / "pkg" / ".gitignore").write_text("local.py\n")
    for name in ("data/big.bin", "x.log", "secret.txt", "pkg/local.py", "pkg/__pycache__/m.pyc",
                 "sweeps.db", ".sweeper/logs/index-0.log", "sweeps-artifacts/a"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    names = _names(pack(root).data)
    assert sorted(names) == [".gitignore", ".sweeperignore", "pkg/.gitignore", "pkg/__init__.py",
                             "pkg/model.py", "run.sh", "train.py"]


def test_warnings_name_a_git_directory_a_venv_and_links_out(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / "venv").mkdir()
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "out").symlink_to("/etc/hostname")
    (root / "inside").symlink_to("train.py")
    (root / "kubeconfig-ci").write_text("token")
    snap = pack(root)
    text = "\n".join(snap.warnings)
    assert ".git directory" in text and "venv/" in text and "out" in text
    assert "kubeconfig-ci, which look(s) like credentials" in text
    assert "inside" in _names(snap.data)


@pytest.mark.parametrize("make", ["missing", "file", "empty"])
def test_a_missing_or_empty_code_directory_is_one_line(tmp_path: Path, make: str) -> None:
    root = tmp_path / "code"
    if make == "file":
        root.write_text("x")
    elif make == "empty":
        root.mkdir()
        (root / ".gitignore").write_text("*\n")
    with pytest.raises(CodeError) as e:
        pack(root)
    assert str(root) in str(e.value) and "\n" not in str(e.value)


def test_unpack_checks_the_hash_first_and_marks_the_directory(tmp_path: Path) -> None:
    snap = pack(_tree(tmp_path / "code"))
    dest = tmp_path / "out"
    assert unpacked(dest) is None
    unpack(snap.data, snap.digest, dest, "s3://b/code/x")
    assert (dest / "pkg" / "model.py").read_text() == "X = 1\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert unpacked(dest) == snap.digest and (dest / MARKER).exists()
    other = "sha256:" + "0" * 64
    with pytest.raises(CodeError, match=r"s3://b/code/x.*does not match"):
        unpack(snap.data, other, tmp_path / "out2", "s3://b/code/x")
    assert not (tmp_path / "out2").exists()  # nothing written
    with pytest.raises(CodeError, match="not a gzip"):
        verify(b"garbage", snap.digest, "here")


def _archive(entries: list[tarfile.TarInfo]) -> tuple[bytes, str]:
    import hashlib

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info in entries:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    plain = buf.getvalue()
    return gzip.compress(plain), "sha256:" + hashlib.sha256(plain).hexdigest()


@pytest.mark.parametrize("name,link", [("/etc/evil", None), ("../evil", None),
                                       ("a/../../evil", None), ("ln", "../../etc/passwd"),
                                       ("ln", "/etc/passwd")])
def test_unpack_refuses_names_and_links_outside(tmp_path: Path, name: str,
                                                link: str | None) -> None:
    info = tarfile.TarInfo(name)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
    else:
        info.size = 1
    data, digest = _archive([info])
    with pytest.raises(CodeError):
        unpack(data, digest, tmp_path / "out", "here")
    assert not (tmp_path / "evil").exists()


def test_a_file_that_cannot_be_read_is_one_line_naming_it(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A namespace bind-mounted over a file (a local cluster's state under the code
    directory) reads as EINVAL: pack says which file, never a traceback."""
    (tmp_path / "train.py").write_text("x = 1\n")
    (tmp_path / "ns").write_text("")
    real = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "ns":
            raise OSError(22, "Invalid argument")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.raises(CodeError) as e:
        pack(tmp_path)
    assert "cannot read ns (Invalid argument)" in str(e.value)
    assert ".sweeperignore" in str(e.value)
