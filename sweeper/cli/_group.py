"""The ``sweeper`` click group, alone in its module so that every command module can attach
its commands to it without importing the package (no import cycles)."""

from __future__ import annotations

import logging
import sys

import click

from sweeper import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sweeper")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv: debug).")
def cli(verbose: int) -> None:
    """Hyperparameter sweeps: a YAML search space -> an Optuna study -> indexed trial runners,
    on local processes or as one Kubernetes Indexed Job."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("sweeper").setLevel(min(level, logging.INFO) if verbose else level)
    for noisy in ("sqlalchemy", "alembic", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING if verbose < 2 else logging.INFO)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING if verbose < 2 else optuna.logging.INFO)
