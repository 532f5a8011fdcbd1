"""The shape of the command tree: each command takes few parameters of its own (shared
options arrive as one object each: LaunchOptions, StorageOptions, ClusterOptions, ...)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import click

from sweeper.cli import cli


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def test_no_command_has_more_than_six_parameters_of_its_own() -> None:
    counts = {name: len(inspect.signature(command.callback).parameters)
              for name, command in _commands(cli) if command.callback is not None}
    assert {n for n, c in counts.items() if c > 6} == set(), counts
    assert counts["run"] == counts["resume"] == 3  # SPEC_FILE/NAME, LaunchOptions, --format
