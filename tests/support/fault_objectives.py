"""Objectives for fault-injection tests: fixed-duration work that reports every step, saves a
checkpoint per step, and leaves an execution marker so tests can prove no attempt ran twice."""

from __future__ import annotations

import os
import time
from pathlib import Path

from trial_runner.context import TrialContext


def steady(ctx: TrialContext) -> float:
    """``duration`` seconds in ``steps`` steps; resumes from its checkpoint on a retry."""
    markers = os.environ.get("SWEEPER_TEST_MARKERS")
    if markers:
        # O_EXCL: a second execution of the same trial (attempt) would fail loudly here.
        with Path(markers, f"trial-{ctx.trial_number}").open("x") as f:
            f.write(str(ctx.index))
    steps = int(ctx.params.get("steps", 10))
    pause = float(ctx.params.get("duration", 1.0)) / steps
    start = 0
    state = ctx.load_checkpoint()
    if state is not None:
        start = state[1] + 1
    ctx.set("start_step", start)
    x = float(ctx.params.get("x", 0.0))
    for step in range(start, steps):
        time.sleep(pause)
        ctx.report(step, loss=x * x + (steps - step))
        ctx.save_checkpoint({"step": step}, step=step)
    return x * x
