"""What ``run`` and ``resume`` say about the sweep's stop rules (``stop:``): a stopped sweep
starts nothing unless ``--ignore-stop``; the last line of a launch names the rule that fired."""

from __future__ import annotations

from typing import Any

import click

from sweeper.errors import SweepFailedError

ignore_stop_option = click.option(
    "--ignore-stop", is_flag=True,
    help="Continue a sweep that a stop: rule stopped (the rules are then off for it).")


def may_launch(sweep: Any, ignore: bool) -> bool:
    """False (after saying so) when a stop rule has stopped the sweep and ``ignore`` is not
    set; with it, records that the rules are off for this sweep and says so."""

    state = sweep.storage.stop_state(sweep.study_id)
    if state is None or not state.stopped:
        return True
    if not ignore:
        from sweeper.accounting import BUDGET_RULE

        how = "a larger budget in the spec, run again, continues it" \
            if state.rule == BUDGET_RULE else \
            f"`sweeper resume {sweep.name} --ignore-stop` continues it"
        click.echo(f"sweep {sweep.name} is stopped: {state.describe()}; nothing started "
                   f"({how})", err=True)
        return False
    sweep.storage.ignore_stop(sweep.study_id)
    click.echo(f"ignoring the stop ({state.describe()}): the stop rules are off for this "
               "sweep from now on", err=True)
    return True


def report_stop(sweep: Any, missing: list[int], failed_for_good: bool) -> bool:
    """After a launch: if a stop rule fired, say which and when as the last line and return
    True (exit 1 when indexes failed for good or the rule was max_failed_trials, else 0)."""
    from sweeper.accounting import BUDGET_RULE
    from sweeper.study.stop import BRAKE_RULE

    state = sweep.storage.stop_state(sweep.study_id)
    if state is None or not state.stopped:
        return False
    how = "a larger budget in the spec, run again, runs them" if state.rule == BUDGET_RULE \
        else f"`sweeper resume {sweep.name} --ignore-stop` runs them"
    of = "" if sweep.spec.open_ended else f" of {sweep.spec.trials}"  # open-ended: no total
    line = f"stopped: {state.describe()}; " + (
        f"{len(missing)}{of} indexes not finished ({how})" if missing
        else "every index finished")
    if failed_for_good or state.rule in ("max_failed_trials", BRAKE_RULE):
        raise SweepFailedError(line)
    click.echo(line, err=True)
    return True
