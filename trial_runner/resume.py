"""Where a trial starts again: a retry's or a promotion's checkpoint restored before user
code runs, and a promoted trial's metric history: what :mod:`trial_runner.runner` does before a
resumed trial's user code runs."""

from __future__ import annotations

import logging

import optuna

from sweeper import protocol
from sweeper.errors import ArtifactError
from sweeper.protocol import RUNG_ATTR
from trial_runner.checkpoints import CheckpointMirror
from trial_runner.context import TrialContext

logger = logging.getLogger(__name__)


def history_so_far(trial: optuna.Trial) -> dict[str, list[list[float]]]:
    """A promoted trial's metric history before its pause, which its reports extend (empty for
    a trial that never paused: a retry is a new trial)."""
    attrs = trial.user_attrs  # (a deep copy: read once)
    if RUNG_ATTR not in attrs:
        return {}
    return {k: [list(p) for p in v] for k, v in (attrs.get(protocol.HISTORY_ATTR) or {}).items()}


def restore_checkpoint(mirror: CheckpointMirror | None, ctx: TrialContext) -> str | None:
    """A retry's (and a promotion's) first step: the latest checkpoint of the previous
    attempts into this pod, before user code runs (the user's ``ctx.load_checkpoint()`` then
    records the step it resumes from). Returns why it could not, or None."""
    if mirror is None or (ctx.attempt == 0 and RUNG_ATTR not in ctx.trial.user_attrs):
        return None  # the first attempt, not resumed from a rung
    try:
        meta = mirror.pull(ctx.checkpoint_dir)
    except ArtifactError as e:
        return f"cannot restore the checkpoint: {e}"
    if meta is not None:
        logger.info("index %d: restored the checkpoint of step %s (trial #%s) from %s",
                    ctx.index, meta.get("step"), meta.get("trial_number"), mirror.where)
    return None
