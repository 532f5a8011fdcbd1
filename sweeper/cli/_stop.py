"""The option of ``run`` and ``resume`` about the sweep's stop rules (``stop:``): a stopped
sweep starts nothing unless ``--ignore-stop`` (:func:`sweeper.app.launch.may_launch`)."""

from __future__ import annotations

import click

ignore_stop_option = click.option(
    "--ignore-stop", is_flag=True,
    help="Continue a sweep that a stop: rule stopped (the rules are then off for it).")
