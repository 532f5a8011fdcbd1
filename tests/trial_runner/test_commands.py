"""The worker's command pipe: the next command, and a look at it once it has arrived."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sweeper import messages
from trial_runner.commands import Commands


@pytest.fixture
def pipe() -> Iterator[tuple[Commands, int]]:
    r, w = os.pipe()
    yield Commands(r), w
    os.close(r)
    try:
        os.close(w)
    except OSError:
        pass


def _send(fd: int, *msgs: messages.Message) -> None:
    os.write(fd, b"".join(messages.encode_message(m).encode() for m in msgs))


def test_peek_shows_the_next_run_without_taking_it(pipe: tuple[Commands, int]) -> None:
    commands, w = pipe
    assert commands.peek() is None and commands.next_index() is None  # nothing yet: no wait
    _send(w, messages.Run(3), messages.Run(4))
    assert commands.next_index() == 3
    assert commands.next() == messages.Run(3)
    assert commands.peek() == messages.Run(4)
    assert commands.next() == messages.Run(4)
    assert commands.peek() is None


def test_a_line_is_a_command_only_once_it_is_whole(pipe: tuple[Commands, int]) -> None:
    commands, w = pipe
    line = messages.encode_message(messages.Run(12)).encode()
    os.write(w, line[:3])
    assert commands.peek() is None
    os.write(w, line[3:])
    assert commands.next_index() == 12 and commands.next() == messages.Run(12)


def test_exit_and_the_end_of_the_pipe_are_no_next_index(pipe: tuple[Commands, int]) -> None:
    commands, w = pipe
    _send(w, messages.Exit())
    assert commands.peek() == messages.Exit() and commands.next_index() is None
    assert commands.next() == messages.Exit()
    os.close(w)
    assert commands.peek() is None
    assert commands.next() == messages.Exit()  # the parent is gone: the loop ends
