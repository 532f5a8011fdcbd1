"""The ``sweeper`` click group, alone in its module so that every command module can attach
its commands to it without importing the package (no import cycles), and the options it
shares with every command (:class:`GroupOptions`, the context's object, which builds each
command's :class:`~sweeper.app.options.StorageOptions`)."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Final

import click

from sweeper import __version__
from sweeper.app.options import CHATTY_LIBRARY_LOGGERS, DEFAULT_STORAGE_WAIT_S, StorageOptions
from sweeper.errors import EXIT_CODES

ENV_STORAGE_WAIT: Final = "SWEEPER_STORAGE_WAIT"


@dataclass(frozen=True)
class GroupOptions:
    """The group's options, for the commands (``click.Context.obj``). ``storage_wait_s`` is
    None where not given: each command has its default."""

    storage_wait_s: float | None = None

    def storage(self, url: str | None,
                default_wait_s: float = DEFAULT_STORAGE_WAIT_S) -> StorageOptions:
        """A command's ``--storage URL`` with the group's ``--storage-wait`` (the command's
        ``default_wait_s`` when that is not given)."""
        wait = default_wait_s if self.storage_wait_s is None else self.storage_wait_s
        return StorageOptions(url=url, wait_s=wait)


def group_options() -> GroupOptions:
    """The running command's group options (the defaults outside a command)."""
    ctx = click.get_current_context(silent=True)
    found = ctx.find_object(GroupOptions) if ctx is not None else None
    return found if found is not None else GroupOptions()


def _exit_codes_epilog() -> str:
    lines = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES)
    return f"\b\nExit codes:\n{lines}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]},
             epilog=_exit_codes_epilog())
@click.version_option(__version__, prog_name="sweeper")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv: debug).")
@click.option("--storage-wait", "storage_wait", type=click.FloatRange(min=0), metavar="SECONDS",
              envvar=ENV_STORAGE_WAIT, show_envvar=True,
              help="How long a command retries a storage that is unavailable (a database "
                   "restarting, failing over or dropping connections, too many connections, "
                   "a storage proxy that is down), with a line on stderr while it waits; then "
                   "exit code 75. Wrong passwords, unknown databases or hosts fail at once. "
                   f"0: no retry. Default: {DEFAULT_STORAGE_WAIT_S:g} (sweeper proxy: 60).")
@click.pass_context
def cli(ctx: click.Context, verbose: int, storage_wait: float | None) -> None:
    """Hyperparameter sweeps: a YAML search space -> an Optuna study -> indexed trial runners,
    on local processes or as one Kubernetes Indexed Job."""
    ctx.obj = GroupOptions(storage_wait_s=storage_wait)
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("sweeper").setLevel(min(level, logging.INFO) if verbose else level)
    for noisy in CHATTY_LIBRARY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING if verbose < 2 else logging.INFO)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING if verbose < 2 else optuna.logging.INFO)


def storage_wait_s(default: float = DEFAULT_STORAGE_WAIT_S) -> float:
    """The running command's ``--storage-wait`` (``default`` when not given, or outside a
    command)."""
    return group_options().storage(None, default).wait_s
