"""A synthetic learning curve for the scheduler's tests: ``loss = a + 1 / (step + 1)``, one
report and one checkpoint per step, honouring the pruner (a pause under a scheduler).

``$ASHA_LOG``: a file that gets ``trial_number resumed_step`` per run (-1: not resumed), so a
test sees where each promotion resumed. ``$ASHA_KILL``: a marker file; the first resumed run
that finds it missing creates it after its first step, and SIGKILLs its own process (a
promoter dying after its claim). In a container the runner is PID 1, and the kernel drops a
signal PID 1 sends itself that it has no handler for, SIGKILL included: there it exits at once
with 137, the code a SIGKILLed container ends with, without cleanup or a last heartbeat."""

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
            if os.getpid() == 1:
                os._exit(128 + signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        if ctx.should_prune():
            raise TrialPruned()
    return loss


def k8s_promotion_spec(name: str, claim: str, *, entrypoint: str = "curve", configs: int = 9,
                       parallelism: int = 1, retries: int = 0,
                       env: dict[str, str] | None = None, extra: str = "") -> str:
    """A promotion-ASHA grid sweep on Kubernetes over ``a`` in 0..configs-1 (rungs at steps
    1 and 3 of 9, eta 3), checkpoints on the volume of PVC ``claim``; ``entrypoint`` names a
    function of this module or a ``module:function``; ``extra``: more lines of the
    ``kubernetes:`` section; ``env``: the pods' environment."""
    target = entrypoint if ":" in entrypoint else f"tests.support.asha_objectives:{entrypoint}"
    pairs = ", ".join(f"{k}: '{v}'" for k, v in (env or {}).items())
    return f"""
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: {parallelism}
scheduler: {{type: asha, mode: promotion, min_resource: 1, max_resource: 9,
             reduction_factor: 3}}
trial:
  entrypoint: {target}
  fixed: {{steps: 9}}
  retries: {retries}
parameters:
  a: {{type: int, low: 0, high: {configs - 1}}}
kubernetes:
  volumes: [{{name: ckpt, mount_path: /ckpt, pvc: {claim}}}]
  checkpoint_volume: ckpt
{extra}{"  env: {" + pairs + "}" if pairs else ""}
"""
