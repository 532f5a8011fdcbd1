"""Runner logs split into attempts at the runner's header lines, local index files read by
attempt, and following a file until the index ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper import protocol
from sweeper.errors import SweeperError
from sweeper.runlogs import (
    Section,
    follow_file,
    in_run_order,
    last_lines,
    pick,
    read_local_log,
    segments_of,
    split_attempts,
)


def _h(index: int, attempt: int, number: int, promoted_from: int | None = None) -> str:
    return protocol.encode_log_header(protocol.LogHeader(index, attempt, number,
                                                         promoted_from))


def test_header_round_trips_and_nothing_else_parses() -> None:
    header = protocol.LogHeader(12, 3, 456)
    line = protocol.encode_log_header(header)
    assert line.endswith("\n") and line.count("\n") == 1
    assert protocol.parse_log_header(line) == header
    for other in ("=== attempt 1 trial #2 ===", "index 1: trial #2 attempt 0 {}", "",
                  line.replace("#", "")):
        assert protocol.parse_log_header(other) is None


def test_split_keeps_the_preamble_with_the_first_attempt() -> None:
    text = "starting\n" + _h(1, 0, 4) + "boom\n" + _h(1, 1, 9) + "ok\n"
    sections = split_attempts(text)
    assert [(s.header.attempt if s.header else None) for s in sections] == [0, 1]
    assert sections[0].text == "starting\n" + _h(1, 0, 4) + "boom\n"
    assert sections[1].text == _h(1, 1, 9) + "ok\n"
    assert "".join(s.text for s in sections) == text  # nothing lost, nothing repeated
    assert split_attempts("") == []
    (plain,) = split_attempts("no headers at all\n")  # a log from before headers
    assert plain.header is None and plain.text == "no headers at all\n"


def test_pick_an_attempt_of_one_index_in_a_pod_that_ran_several() -> None:
    text = _h(4, 0, 1) + "four\n" + _h(5, 0, 2) + "five\n" + _h(4, 1, 3) + "four again\n"
    sections = split_attempts(text)
    assert pick(sections, 4, None).text == _h(4, 1, 3) + "four again\n"  # type: ignore[union-attr]
    assert pick(sections, 4, 0).text == _h(4, 0, 1) + "four\n"  # type: ignore[union-attr]
    assert pick(sections, 5, None).text == _h(5, 0, 2) + "five\n"  # type: ignore[union-attr]
    assert pick(sections, 5, 1) is None and pick(sections, 6, None) is None


def _end(index: int, number: int) -> str:
    return protocol.encode_log_end(protocol.LogHeader(index, 0, number))


def test_end_line_round_trips_and_is_not_a_header() -> None:
    line = _end(7, 12)
    assert line.endswith(" ends ===\n") and protocol.parse_log_end(line) == (7, 12)
    assert protocol.parse_log_header(line) is None
    assert protocol.parse_log_end(_h(7, 0, 12)) is None


def test_a_slot_log_is_cut_at_its_end_lines() -> None:
    """An open-ended sweep's slot runs index after index in one pod: what its runner logs
    between two parts (the next index's claim) goes with the next part, what follows the
    last part (the budget's refusal) with none, and an end line of another trial is text."""
    text = ("start\n" + _h(1, 0, 1) + "one\n" + _end(1, 1) + "claim 3\n" + _h(3, 0, 4)
            + "three\n" + _end(9, 9) + "still three\n" + _end(3, 4)
            + "index 5 not started: the budget is spent\n")
    sections = split_attempts(text)
    assert [s.header.index for s in sections if s.header] == [1, 3]
    assert sections[0].text == "start\n" + _h(1, 0, 1) + "one\n" + _end(1, 1)
    assert sections[1].text == ("claim 3\n" + _h(3, 0, 4) + "three\n" + _end(9, 9)
                                + "still three\n" + _end(3, 4))
    assert "budget" not in "".join(s.text for s in sections)
    assert pick(sections, 5, None) is None


def test_index_parts_streams_one_index_of_a_slot_until_the_slot_goes_on() -> None:
    """``logs --follow`` on a slot's pod: index 3's parts (its retry too, not a promoted
    segment of another index), however the stream is cut, until index 5 begins."""
    from sweeper.runlogs import index_parts

    text = ("start\n" + _h(1, 0, 1) + "one\n" + _end(1, 1) + _h(3, 0, 2) + "three\n"
            + _end(3, 2) + "gap\n" + _h(0, 0, 0, promoted_from=0) + "zero\n" + _end(0, 0)
            + _h(3, 1, 4) + "three again\n" + _end(3, 4) + _h(5, 0, 6) + "five\n")
    want = (_h(3, 0, 2) + "three\n" + _end(3, 2) + _h(3, 1, 4) + "three again\n"
            + _end(3, 4))
    for size in (1, 7, len(text)):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert "".join(index_parts(iter(chunks), 3)) == want
    assert "".join(index_parts(iter([text]), 7)) == ""  # the slot went on past it
    running = _h(7, 0, 9) + "seven so far"  # no newline yet: the pod is still writing
    assert "".join(index_parts(iter([running]), 7)) == running


def test_an_attempt_is_picked_with_every_segment_it_ran_in() -> None:
    """Promotion (scheduler:): attempt 0 of index 4 ran to rung 0, was promoted (in a pod that
    ran index 5 first), and again; its segments come as one attempt, headers kept, nothing of
    index 5 in between."""
    text = (_h(4, 0, 1) + "to rung 0\n" + _h(5, 0, 2) + "five\n"
            + _h(4, 0, 1, promoted_from=0) + "to rung 1\n"
            + _h(4, 0, 1, promoted_from=1) + "to the end\n")
    sections = split_attempts(text)
    whole = _h(4, 0, 1) + "to rung 0\n" + _h(4, 0, 1, 0) + "to rung 1\n" \
        + _h(4, 0, 1, 1) + "to the end\n"
    for attempt in (None, 0):
        got = pick(sections, 4, attempt)
        assert got is not None and got.text == whole
        assert got.header == protocol.LogHeader(4, 0, 1)  # the first segment's
    assert [s.header for s in segments_of(sections, 4, None)] == [
        protocol.LogHeader(4, 0, 1), protocol.LogHeader(4, 0, 1, 0),
        protocol.LogHeader(4, 0, 1, 1)]
    assert pick(sections, 5, None).text == _h(5, 0, 2) + "five\n"  # type: ignore[union-attr]
    # A retry after a promoted segment failed: the latest attempt is the retry alone.
    retried = split_attempts(text + _h(4, 1, 9) + "retry\n")
    assert pick(retried, 4, None).text == _h(4, 1, 9) + "retry\n"  # type: ignore[union-attr]
    assert pick(retried, 4, 0).text == whole  # type: ignore[union-attr]
    assert segments_of(retried, 4, 2) == [] and pick(retried, 4, 2) is None


def test_last_lines() -> None:
    assert last_lines("a\nb\nc\n", 2) == "b\nc\n"
    assert last_lines("a\nb\nc", 5) == "a\nb\nc"
    assert last_lines("a\nb\n", 0) == "" and last_lines("a\n", None) == "a\n"


def test_read_local_log_by_attempt(tmp_path: Path) -> None:
    path = tmp_path / protocol.index_log_name(3)
    path.write_text(_h(3, 0, 3) + "first try\n" + _h(3, 1, 8) + "second try\n")
    latest = read_local_log(tmp_path, 3)
    assert latest.section.text.endswith("second try\n") and latest.latest
    assert latest.attempts == (0, 1) and latest.size == path.stat().st_size
    first = read_local_log(tmp_path, 3, attempt=0)
    assert first.section.text == _h(3, 0, 3) + "first try\n" and not first.latest
    with pytest.raises(SweeperError, match=r"holds no attempt 2 of index 3 \(attempts in it: "
                                           r"0, 1\)"):
        read_local_log(tmp_path, 3, attempt=2)
    with pytest.raises(SweeperError, match=r"no log of index 4 at .*index-4\.log"):
        read_local_log(tmp_path, 4)


def test_read_local_log_counts_an_attempts_segments_once_each(tmp_path: Path) -> None:
    path = tmp_path / protocol.index_log_name(3)
    path.write_text(_h(3, 0, 3) + "to rung 0\n" + _h(3, 0, 3, 0) + "promoted\n"
                    + _h(3, 1, 8) + "retry\n" + _h(3, 1, 8, 0) + "retry promoted\n")
    latest = read_local_log(tmp_path, 3)
    assert latest.attempts == (0, 1) and latest.segments == 2 and latest.latest
    assert latest.section.text == _h(3, 1, 8) + "retry\n" + _h(3, 1, 8, 0) + \
        "retry promoted\n"
    first = read_local_log(tmp_path, 3, attempt=0)
    assert first.segments == 2 and not first.latest
    assert first.section.text == _h(3, 0, 3) + "to rung 0\n" + _h(3, 0, 3, 0) + "promoted\n"
    assert read_local_log(tmp_path, 3, attempt=1).segments == 2
    path.write_text(_h(3, 0, 3) + "one segment\n")
    assert read_local_log(tmp_path, 3).segments == 1


def test_follow_writes_what_is_appended_until_the_index_ends(tmp_path: Path) -> None:
    """The file grows between polls; after ``done`` turns true, what the runner still wrote
    (its last line comes just after the trial ends) is written, then following stops."""
    path = tmp_path / "index-0.log"
    path.write_bytes(b"old\n")
    accented = "caf\u00e9\n".encode()
    appends = [b"step 1\n", accented[:4], accented[4:], b"", b"complete\n"]
    polls: list[int] = []
    out: list[str] = []

    def sleep(_: float) -> None:
        polls.append(1)
        if appends:
            with path.open("ab") as f:
                f.write(appends.pop(0))

    follow_file(path, 4, out.append, done=lambda: len(polls) >= 4, sleep=sleep)
    text = "".join(out)
    assert text == "step 1\ncaf\u00e9\ncomplete\n"  # a character split across two reads
    assert "old" not in text


def test_segments_from_several_pods_go_in_the_order_they_ran() -> None:
    """The first run, then by the rung each segment was promoted from; a rung twice (its
    promoter died) by when its pod started; the order within one log kept."""
    def seg(rung: int | None, text: str) -> Section:
        h = protocol.LogHeader(4, 0, 7, rung)
        return Section(h, protocol.encode_log_header(h) + text)

    first, r0_dead, r0, r1 = seg(None, "a"), seg(0, "b"), seg(0, "c"), seg(1, "d")
    got = in_run_order([("2026-01-01T00:05", r1), ("2026-01-01T00:09", r0),
                        ("2026-01-01T00:00", first), ("2026-01-01T00:02", r0_dead)])
    assert got == [first, r0_dead, r0, r1]
    assert in_run_order([("t", r1), ("t", r0)]) == [r0, r1]
    assert in_run_order([("t", r0), ("t", r0_dead)]) == [r0, r0_dead]  # same pod: as read
    assert in_run_order([]) == []
