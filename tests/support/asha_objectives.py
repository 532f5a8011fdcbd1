"""A synthetic learning curve for the scheduler's tests: ``loss = a + 1 / (step + 1)``, one
report and one checkpoint per step, honouring the pruner (a pause under a scheduler).

``$ASHA_LOG``: a file that gets ``trial_number resumed_step`` per run (-1: not resumed), so a
test sees where each promotion resumed. ``$ASHA_KILL``: a marker file; the first resumed run
that finds it missing creates it after its first step, and SIGKILLs its own process (a
promoter dying after its claim)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from optuna import TrialPruned

from trial_runner.context import TrialContext


def curve(ctx: TrialContext) -> float:
    a = float(ctx.params["a"])
    start = 0
    resumed = ctx.load_checkpoint()
    if resumed is not None:
        start = resumed[1] + 1
    if os.environ.get("ASHA_LOG"):
        with open(os.environ["ASHA_LOG"], "a") as f:
            f.write(f"{ctx.trial_number} {resumed[1] if resumed is not None else -1}\n")
    kill = os.environ.get("ASHA_KILL")
    loss = float("nan")
    for step in range(start, int(ctx.params["steps"]) + 1):
        loss = a + 1.0 / (step + 1)
        ctx.report(step, loss=loss)
        ctx.save_checkpoint({"a": a}, step=step)
        if kill and resumed is not None and not Path(kill).exists() and step >= start:
            Path(kill).write_text("killed")
            ctx.should_prune()  # writes the reports so far
            os.kill(os.getpid(), signal.SIGKILL)
        if ctx.should_prune():
            raise TrialPruned()
    return loss
