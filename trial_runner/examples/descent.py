"""A learning curve whose hyperparameters matter along the way, for PBT
(``search_spaces/synthetic_pbt.yaml``): gradient descent with momentum on the ill-conditioned
quadratic ``f(x) = x0**2 + 10 * x1**2`` from ``(3, 3)``, one step per report, the state
``(x, v)`` checkpointed every step. A step size that is good early (large) diverges late or
oscillates; one that is safe (small) is slow: a schedule found by copying and perturbing
beats any fixed value. No torch: runs in milliseconds.

After ``ctx.load_checkpoint()`` the run goes on with the state it loaded and ``ctx.params``'
(possibly perturbed) ``lr`` and ``momentum``: hyperparameters are read from ``ctx.params``,
never from the checkpoint.
"""

from __future__ import annotations

from optuna import TrialPruned

from trial_runner.context import TrialContext

SCALES = (1.0, 10.0)


def descent(ctx: TrialContext) -> float:
    lr, momentum = float(ctx.params["lr"]), float(ctx.params["momentum"])
    steps = int(ctx.params["steps"])
    x, v, start = [3.0, 3.0], [0.0, 0.0], 0
    resumed = ctx.load_checkpoint()
    if resumed is not None:
        state, step = resumed
        x, v, start = list(state["x"]), list(state["v"]), step + 1
    loss = sum(s * xi * xi for s, xi in zip(SCALES, x, strict=True))
    for step in range(start, steps + 1):
        grad = [2.0 * s * xi for s, xi in zip(SCALES, x, strict=True)]
        v = [momentum * vi - lr * g for vi, g in zip(v, grad, strict=True)]
        x = [min(max(xi + vi, -1e6), 1e6) for xi, vi in zip(x, v, strict=True)]
        loss = sum(s * xi * xi for s, xi in zip(SCALES, x, strict=True))
        ctx.report(step, loss=loss)
        ctx.save_checkpoint({"x": x, "v": v}, step=step)
        if ctx.should_prune():
            raise TrialPruned()
    return loss
