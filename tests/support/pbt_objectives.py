"""A PBT member for the scheduler's tests: ``loss = a + 1 / (step + 1)`` with ``a`` from the
member's current params, one report and one checkpoint (``{"owner", "a", "step"}``) per step.

The members run in separate processes; ``$PBT_DIR`` holds the file barriers that keep them in
step at each interval's end (every member has reported the step before any decides, and none
goes on before the one that copies has loaded its donor's checkpoint), so the decisions do
not depend on timing (``population: 1`` turns them off), and ``loads.jsonl``: one line per
checkpoint a run loaded (trial number, the state and step loaded, the ``a`` it goes on with).
``save: false``: no checkpoints."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from optuna import TrialPruned

from trial_runner.context import TrialContext

#: trial number -> the step at which it stopped to copy (this process's runs of it).
_copying: dict[int, int] = {}


def _mark_and_wait(kind: str, step: int, index: int, population: int) -> None:
    d = Path(os.environ["PBT_DIR"])
    (d / f"{kind}{step}-{index}").touch()
    deadline = time.monotonic() + 90.0  # a bound on the wait, not a timed assertion
    while len(list(d.glob(f"{kind}{step}-*"))) < population:
        if time.monotonic() > deadline:  # a member never came: the population did not run
            raise RuntimeError(f"member {index}: not every member reached {kind}{step}")
        time.sleep(0.05)


def member(ctx: TrialContext) -> float:
    a = float(ctx.params["a"])
    steps, interval = int(ctx.params["steps"]), int(ctx.params["interval"])
    population = int(ctx.params["population"])
    start = 0
    loaded = ctx.load_checkpoint()
    if loaded is not None:
        state, at = loaded
        start = at + 1
        with open(Path(os.environ["PBT_DIR"]) / "loads.jsonl", "a") as f:
            f.write(json.dumps({"trial": ctx.trial_number, "state": state, "step": at,
                                "a": a}) + "\n")
    if ctx.trial_number in _copying:  # the copy is loaded: the others may go on
        _mark_and_wait("p", _copying.pop(ctx.trial_number), ctx.index, 0)
    loss = float("nan")
    for step in range(start, steps + 1):
        loss = a + 1.0 / (step + 1)
        ctx.report(step, loss=loss)
        if ctx.params.get("save", True):
            ctx.save_checkpoint({"owner": ctx.trial_number, "a": a, "step": step}, step=step)
        decides = (step + 1) % interval == 0 and step < steps
        if decides:
            if ctx.writer is not None:
                ctx.writer.flush()
            _mark_and_wait("b", step, ctx.index, population)  # everyone reported the step
        if ctx.should_prune():
            _copying[ctx.trial_number] = step
            raise TrialPruned()
        if decides:
            _mark_and_wait("p", step, ctx.index, population)
    return loss
