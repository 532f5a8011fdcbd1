"""The code snapshot of a launch (``run``, ``resume``, ``render``): pack ``trial.code``,
compare it with the snapshot the sweep recorded, put it where the pods fetch it, and record it.

The study user attr ``sweeper:code`` names the snapshot the sweep's next trials run with;
each trial records the one it ran with (``protocol.CODE_ATTR``, see the runner). On
Kubernetes a launch whose code differs from the recorded snapshot is refused unless the user
asks for the new code (``--code new``): its remaining trials then run the new snapshot. A
local launch runs the code on the machine whatever it is; it records the new snapshot and
says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sweeper.code.snapshot import Snapshot, pack, walk
from sweeper.code.stores import open_code_store
from sweeper.errors import CodeError
from sweeper.protocol import CODE_ATTR, CODE_SPEC_FILE_ATTR

if TYPE_CHECKING:
    from sweeper.spec import SweepSpec
    from sweeper.study import Sweep
    from sweeper.study.open import StudyStorage


@dataclass(frozen=True)
class CodeLaunch:
    """A launch's snapshot and what the sweep recorded before it."""

    snapshot: Snapshot
    directory: Path
    #: The snapshot the sweep recorded (None: a new sweep, or one from before snapshots).
    recorded: str | None
    #: Whether a trial of the sweep has started (with the recorded snapshot).
    ran: bool = False
    #: The spec file (relative to the directory) the snapshot leaves out, if inside it.
    spec_file: str | None = None

    @property
    def changed(self) -> bool:
        return self.recorded is not None and self.recorded != self.snapshot.digest


def code_dir(spec: SweepSpec) -> Path | None:
    """``trial.code`` as an absolute directory (relative to the spec file's); None when the
    image holds the code, or when no spec file is known (a sweep its pods created from
    rendered objects: a resume runs the snapshot it recorded)."""
    if spec.trial.code is None or not spec.base_dir:
        return None
    return (Path(spec.base_dir) / spec.trial.code).resolve()


def spec_dir_in_code(spec: SweepSpec) -> str:
    """The spec file's directory relative to the code directory (``.``: the same; also
    when the spec lies outside it)."""
    code, base = code_dir(spec), spec.base_dir
    if code is None or not base:
        return "."
    rel = os.path.relpath(Path(base).resolve(), code)
    return "." if rel.startswith("..") else Path(rel).as_posix()


def recorded_code(storage: StudyStorage, name: str) -> tuple[str | None, bool]:
    """The snapshot the sweep ``name`` recorded (None: no sweep, or none recorded), and
    whether any of its trials has started."""
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return None, False
    value = storage.get_study_user_attrs(study_id).get(CODE_ATTR)
    if not isinstance(value, str):
        return None, False
    counts = storage.state_counts(study_id)
    return value, any(n for state, n in counts.items() if state != "WAITING")


def spec_file_of(spec: SweepSpec, directory: Path, storage: StudyStorage | None
                 ) -> tuple[bool, str | None]:
    """(known, name): the spec file relative to ``directory`` that the snapshot leaves out.
    A spec read from a file names it; a stored one (``resume NAME``) takes the name its
    sweep recorded, which needs the open ``storage`` (known is False without it)."""
    source = Path(spec.source)
    if source.is_file():
        rel = os.path.relpath(source.resolve(), directory)
        return True, None if rel.startswith("..") else Path(rel).as_posix()
    if storage is None:
        return False, None
    try:
        study_id = storage.get_study_id_from_name(spec.name)
    except KeyError:
        return True, None
    name = storage.get_study_user_attrs(study_id).get(CODE_SPEC_FILE_ATTR)
    return True, name if isinstance(name, str) else None


def prepare(spec: SweepSpec, storage: StudyStorage | None) -> CodeLaunch | None:
    """Pack the spec's code, leaving its spec file out, and read what its sweep recorded
    (nothing is written). None when there is nothing to pack (``trial.code: null``, or the
    default ``.`` holding nothing but the spec), or (a stored spec) until the storage is
    given. Raises CodeError for a code directory that does not exist or is
    empty."""
    directory = code_dir(spec)
    if directory is None:
        return None
    known, spec_file = spec_file_of(spec, directory, storage)
    if not known:
        return None
    leave_out = (spec_file,) if spec_file else ()
    if spec.trial.code == "." and directory.is_dir() and next(walk(directory, leave_out),
                                                              None) is None:
        return None  # the default, and nothing but the spec: the image holds the code
    try:
        snapshot = pack(directory, leave_out)
    except CodeError as e:
        raise CodeError(f"{spec.source}: {e}") from None
    recorded, ran = recorded_code(storage, spec.name) if storage is not None else (None, False)
    return CodeLaunch(snapshot, directory, recorded, ran, spec_file)


def check_fits(spec: SweepSpec, code: CodeLaunch, storage_url: str) -> None:
    """CodeError when the snapshot is over the limit of the store it would go to (checked
    before anything is written)."""
    from sweeper.code.stores import STUDY_LIMIT_BYTES, store_kind, too_large
    from sweeper.study.urls import redact

    if store_kind(spec.artifacts) == "study" and code.snapshot.size > STUDY_LIMIT_BYTES:
        raise CodeError(f"{spec.source}: " + too_large(code.snapshot, redact(storage_url)))


def changed_line(name: str, code: CodeLaunch) -> str:
    """One line: the code differs from what the sweep ran."""
    return (f"the code of sweep {name} changed: {code.directory} is now "
            f"{short(code.snapshot.digest)}, the sweep recorded {short(code.recorded or '')}")


def check_change(name: str, code: CodeLaunch, *, new_code: bool, refuse: bool) -> str | None:
    """The line to print about changed code (None: unchanged); CodeError when the launch
    must not go on (``refuse`` without ``new_code``, once a trial ran the recorded code)."""
    if not code.changed:
        return None
    if not code.ran:
        return changed_line(name, code) + "; no trial ran it, the new code replaces it"
    if refuse and not new_code:
        raise CodeError(changed_line(name, code) + "; `--code new` runs the remaining trials "
                        "on the new code (each trial records its snapshot); nothing launched")
    return changed_line(name, code) + ("; the remaining trials run the new code"
                                       if refuse else "; local trials run the code on disk")


def publish(sweep: Sweep, code: CodeLaunch, storage_url: str, *, upload: bool) -> bool:
    """Put the snapshot where the pods fetch it (``upload``) and record it on the sweep;
    whether it was uploaded now (False: it was there, or no upload)."""
    uploaded = False
    if upload:
        store = open_code_store(sweep.spec, storage_url, sweep.storage, sweep.study_id)
        uploaded = store.put(code.snapshot)
    sweep.storage.set_study_user_attr(sweep.study_id, CODE_ATTR, code.snapshot.digest)
    if code.spec_file:
        sweep.storage.set_study_user_attr(sweep.study_id, CODE_SPEC_FILE_ATTR, code.spec_file)
    return uploaded


def short(digest: str) -> str:
    """``sha256:`` and the first 12 hex digits (what people compare)."""
    return digest[:19]


def summary(code: CodeLaunch) -> str:
    """``code DIR: N files, X KiB (Y KiB packed), sha256:...``."""
    s = code.snapshot
    return (f"code {code.directory}: {s.files} files, {_size(s.raw_bytes)} ({_size(s.size)} "
            f"packed), {s.digest}")


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"
