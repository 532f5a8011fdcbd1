"""What the runners wrote: logs split into attempts, the local backend's index log files, and
following one as it grows (``sweeper logs``, and the log lines in ``run``'s failure summary).

A runner writes one header line (:func:`sweeper.protocol.encode_log_header`) before each
attempt, and before each segment of an attempt that a promotion scheduler paused and another
runner resumed (the header names the rung it was promoted from). A local index file collects
every attempt and segment of its index, one after another, whichever worker ran it; a pod's log
holds one attempt of one index, or several indexes with ``indexes_per_pod``, or (promotion) the
segments of other indexes that its runner resumed, or (an open-ended sweep's slot) index after
index; a pod's runner closes each part with an end line, so that what it logs between parts
is no index's. An attempt is shown with all its segments.
Pure except for :func:`read_local_log` and :func:`follow_file`, which read the file.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sweeper.errors import SweeperError
from sweeper.protocol import LogHeader, index_log_name, parse_log_end, parse_log_header


@dataclass(frozen=True)
class Section:
    """One attempt's (or segment's) part of a log: from its header to the next header.
    ``header`` is None only for a log with no header at all (written before attempts had
    headers)."""

    header: LogHeader | None
    text: str


def split_attempts(text: str) -> list[Section]:
    """The log cut at its header lines. What comes before the first header (a runner starting)
    belongs to the first attempt. A pod's runner ends each part with an end line
    (:func:`sweeper.protocol.encode_log_end`): what follows it is the pod's own until the
    next header, which it joins (looking for that index's trial); after the last part it
    belongs to no index (the next index refused, the slot's end)."""
    sections: list[tuple[LogHeader | None, list[str]]] = [(None, [])]
    gap: list[str] | None = None  # lines after an end line, None while a part is open
    for line in text.splitlines(keepends=True):
        header = parse_log_header(line)
        if header is not None:
            if sections[-1][0] is None:
                sections[-1] = (header, sections[-1][1] + [line])  # the preamble joins it
            else:
                sections.append((header, (gap or []) + [line]))
            gap = None
        elif gap is not None:
            gap.append(line)
        else:
            sections[-1][1].append(line)
            gap = [] if _ends(sections[-1][0], line) else None
    if len(sections) == 1 and not sections[0][1]:
        return []
    return [Section(h, "".join(lines)) for h, lines in sections]


def _ends(header: LogHeader | None, line: str) -> bool:
    """``line`` is the end line of the part ``header`` began."""
    return header is not None and parse_log_end(line) == (header.index, header.trial_number)


def index_parts(chunks: Iterable[str], index: int) -> Iterator[str]:
    """A slot's log as it is written (``chunks``: any cut) -> the parts of ``index`` in it,
    line by line, each from its header to its end line; it stops once the slot starts a
    later index of its own (a promoted segment of another index is skipped, not an end)."""
    rest, part = "", None
    for chunk in chunks:
        lines = (rest + chunk).split("\n")
        rest = lines.pop()
        for line in lines:
            header = parse_log_header(line)
            if header is not None and header.index > index and header.promoted_from is None:
                return
            if header is not None:
                part = header if header.index == index else None
            if part is not None:
                yield line + "\n"
                part = None if _ends(part, line) else part
    if part is not None and rest:
        yield rest


def attempts_of(sections: list[Section], index: int) -> list[Section]:
    """The sections of ``index`` (a log without headers is taken as all one index's)."""
    return [s for s in sections if s.header is None or s.header.index == index]


def segments_of(sections: list[Section], index: int, attempt: int | None) -> list[Section]:
    """The segments of attempt ``attempt`` of ``index`` (None: its latest), in order: its first
    run and each promoted part (``scheduler:``), every one with its header; [] if none."""
    mine = attempts_of(sections, index)
    if attempt is None:
        if not mine or mine[-1].header is None:
            return mine[-1:]
        attempt = mine[-1].header.attempt
    return [s for s in mine if s.header is not None and s.header.attempt == attempt]


def pick(sections: list[Section], index: int, attempt: int | None) -> Section | None:
    """Attempt ``attempt`` of ``index`` (None: its latest) among ``sections``: one section, its
    segments' text joined (each starts with its header line); the first segment's header."""
    parts = segments_of(sections, index, attempt)
    if not parts:
        return None
    return Section(parts[0].header, "".join(s.text for s in parts))


def in_run_order(parts: list[tuple[str, Section]]) -> list[Section]:
    """An attempt's segments gathered from several logs (pods), each with when its log began
    (a key that sorts in time), in the order they ran: the first run, then each promoted part
    by the rung it was promoted from; one rung twice (a promoter that died, the promotion
    claimed again) by when their logs began, the order within one log kept."""
    def key(part: tuple[str, Section]) -> tuple[int, str]:
        h = part[1].header
        return (-1 if h is None or h.promoted_from is None else h.promoted_from, part[0])

    return [s for _, s in sorted(parts, key=key)]


def last_lines(text: str, n: int | None) -> str:
    """The last ``n`` lines of ``text`` (all of it for None)."""
    if n is None:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-n:]) if n > 0 else ""


# --------------------------------------------------------------------------- local files


@dataclass(frozen=True)
class LocalLog:
    path: Path
    section: Section
    attempts: tuple[int, ...]  # the attempts the file holds, in order
    latest: bool  # the section ends the file (new output goes on it)
    size: int  # bytes read: where following the file starts
    segments: int = 1  # the parts the attempt ran in (promoted after a pause: more than one)


def index_log_path(log_dir: Path, index: int) -> Path:
    return log_dir / index_log_name(index)


def read_local_log(log_dir: Path, index: int, attempt: int | None = None) -> LocalLog:
    """Attempt ``attempt`` (None: the latest) of ``index`` from its local log file."""
    path = index_log_path(log_dir, index)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SweeperError(f"no log of index {index} at {path} (the index has not run with "
                           "the local backend in this log directory; `run --log-dir` "
                           "elsewhere? pass the same --log-dir)") from None
    except OSError as e:
        raise SweeperError(f"cannot read {path}: {e.strerror}") from None
    sections = split_attempts(data.decode("utf-8", errors="replace"))
    numbers = tuple(dict.fromkeys(s.header.attempt for s in attempts_of(sections, index)
                                  if s.header is not None))
    parts = segments_of(sections, index, attempt)
    if not parts and attempt is not None:
        held = ", ".join(map(str, numbers)) or "none"
        raise SweeperError(f"{path} holds no attempt {attempt} of index {index} "
                           f"(attempts in it: {held})")
    section = pick(sections, index, attempt) or Section(None, "")
    latest = not sections or (bool(parts) and parts[-1] is sections[-1])
    return LocalLog(path, section, numbers, latest, len(data), max(1, len(parts)))


def follow_file(path: Path, offset: int, write: Callable[[str], None],
                done: Callable[[], bool], poll_s: float = 0.5,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """Write what is appended to ``path`` after byte ``offset`` as it comes, until ``done()``
    says the index has ended; then what was written after that, and return."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    ended = False
    while True:
        try:
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        if chunk:
            offset += len(chunk)
            write(decoder.decode(chunk))
        elif ended:
            write(decoder.decode(b"", final=True))
            return
        # The runner writes its last lines just after the trial ends: read once more after.
        ended = ended or done()
        sleep(poll_s)
