"""What ``sweeper logs``, ``cancel`` and ``delete`` do with a sweep that ran on this machine:
its index log files (read, followed while the index runs), and its own directories (logs,
checkpoints) as its launches recorded them."""

from __future__ import annotations

import time
from pathlib import Path

from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.base import IndexLog, SweepRef, Write
from sweeper.report import ranges_of
from sweeper.runlogs import follow_file, index_log_path, last_lines, read_local_log
from sweeper.study import Sweep
from sweeper.study.values import Attempt


def sweep_log_dir(ref: SweepRef, log_dir: Path | None, default_root: Path) -> Path:
    """The directory of the sweep's index logs: ``log_dir``/NAME-UID8 when given, else the
    one its last local launch recorded, else ``default_root``/NAME-UID8 (without the
    storage: the newest of the sweep's name there); relative to the working directory when
    it is below it."""
    sweep = ref.sweep
    if sweep is not None:
        key = sweep.state_key
        recorded = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.LOG_DIR_ATTR)
    else:
        key, recorded = newest_log_key(log_dir or default_root, ref.name), None
    if log_dir is not None:
        return shown(log_dir / key)
    return shown(Path(recorded) if isinstance(recorded, str) and recorded
                 else default_root / key)


def newest_log_key(root: Path, name: str) -> str:
    """The most recently written of NAME-UID8 (and a plain NAME from before identities)."""
    found = [p for p in root.glob(f"{name}-*") if p.is_dir() and len(p.name) == len(name) + 9]
    found += [root / name] if (root / name).is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime).name if found else name


def shown(path: Path) -> Path:
    """``path`` relative to the working directory when it is below it (shorter to read)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def ended(sweep: Sweep, index: int) -> Attempt | None:
    """The latest attempt of ``index`` if it has ended (COMPLETE, PRUNED or FAIL)."""
    found = sweep.storage.attempts(sweep.study_id, index)
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return found[-1] if found and found[-1].state in done else None


def file_log(log_dir: Path, index: int, attempt: int | None, tail: int | None
             ) -> tuple[IndexLog, Path, int]:
    """Attempt ``attempt`` of ``index`` from its log file, the file, and its size read."""
    log = read_local_log(log_dir, index, attempt)
    h = log.section.header
    what = f", attempt {h.attempt}, trial #{h.trial_number}" if h is not None else ""
    if log.segments > 1:  # promoted after a pause (scheduler:): each part has its header
        what += f", {log.segments} segments"
    held = f"; attempts in the file: {ranges_of(log.attempts)}" \
        if len(log.attempts) > 1 else ""
    note = f"file {log.path} (index {index}{what}{held})"
    return IndexLog((note,), last_lines(log.section.text, tail)), log.path, log.size


def follow_log(ref: SweepRef, log_dir: Path, index: int, tail: int | None, write: Write,
               say: Write) -> None:
    """The latest attempt of ``index`` from its file, then what is appended to it until the
    attempt ends (without the record at hand: until Ctrl-C)."""
    sweep = ref.sweep
    path = index_log_path(log_dir, index)
    if not path.exists() and (sweep is None or ended(sweep, index) is None):
        say(f"waiting for index {index} to start ({path}) ...")
        while not path.exists() and (sweep is None or ended(sweep, index) is None):
            time.sleep(0.5)
    log, path, size = file_log(log_dir, index, None, tail)
    for note in log.notes:
        say(note)
    write(log.text)
    if sweep is None:
        say("(the sweep's storage is not at hand: following until Ctrl-C)")
    follow_file(path, size, write, lambda: sweep is not None and ended(sweep, index) is not None)
    last = ended(sweep, index) if sweep is not None else None
    if last is not None:
        say(f"index {index}: attempt {last.attempt} (trial #{last.number}) ended "
            f"{last.state.name}")


def own_directories(sweep: Sweep) -> tuple[tuple[str, str], ...]:
    """The sweep's own directories on this machine (logs, checkpoints) as its local launches
    recorded them, as (what, path); a sweep from before identities (no uid) shares them by
    name: kept."""
    if sweep.uid is None:
        return ()
    attrs = sweep.storage.get_study_user_attrs(sweep.study_id)
    return tuple((what, str(attrs[key])) for what, key in (
        ("logs", protocol.LOG_DIR_ATTR), ("checkpoints", protocol.CHECKPOINT_DIR_ATTR))
        if isinstance(attrs.get(key), str) and Path(attrs[key]).name == sweep.state_key)
