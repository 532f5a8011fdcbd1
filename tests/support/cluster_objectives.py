"""Objectives for the cluster-readiness tests (issue 10), run by real trial runners (local
processes, or pods of the local cluster) as
``tests.support.cluster_objectives:NAME``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from trial_runner.context import TrialContext


def stubborn(ctx: TrialContext) -> float:
    """Swallows SIGTERM's Interrupted and keeps going: only the runner's own deadline after
    SIGTERM (the termination grace period) ends it. Writes ``started`` into $MARKER_DIR."""
    Path(os.environ["MARKER_DIR"], "started").write_text(str(os.getpid()))
    while True:
        try:
            time.sleep(0.1)
        except BaseException:  # noqa: BLE001 - the point: user code that ignores SIGTERM
            continue


def resumable(ctx: TrialContext) -> float:
    """``steps`` steps of ``delay`` seconds, a checkpoint after each, resuming from the last
    one; the first attempt of each index raises after step ``fail_at`` (if given). Each saved
    step leaves ``saved-INDEX-ATTEMPT-STEP`` in $MARKER_DIR (when set)."""
    steps, delay = int(ctx.params.get("steps", 6)), float(ctx.params.get("delay", 0.0))
    fail_at = ctx.params.get("fail_at")
    start = 0
    resumed = ctx.load_checkpoint()
    if resumed is not None:
        state, step = resumed
        assert state == {"step": step}, state
        start = step + 1
    ctx.set("start_step", start)
    for step in range(start, steps):
        time.sleep(delay)
        ctx.report(step, loss=float(steps - step))
        ctx.save_checkpoint({"step": step}, step=step)
        if os.environ.get("MARKER_DIR"):
            Path(os.environ["MARKER_DIR"], f"saved-{ctx.index}-{ctx.attempt}-{step}").touch()
        if fail_at is not None and step == int(fail_at) and ctx.attempt == 0:
            raise RuntimeError(f"the first attempt fails after step {step}")
    return float(steps - start)


def reads_data(ctx: TrialContext) -> float:
    """Reads every file of ``ctx.data_dir`` (numbers, one per file) and returns their sum
    plus ``x``; records the files it saw and the directory."""
    data = ctx.data_dir
    assert data is not None, "the spec has no data:"
    files = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    ctx.set("data_files", files)
    ctx.set("data_dir", str(data))
    total = sum(float((data / f).read_text()) for f in files)
    return total + float(ctx.params.get("x", 0))


def ddp(ctx: TrialContext) -> dict[str, float]:
    """Runs on every rank of a ``launcher: torchrun`` trial: an all-reduce over the group,
    ``steps`` reports (rank 0's count), a pruning question per step; each rank writes what
    it saw to $MARKER_DIR/rank-INDEX-ATTEMPT-RANK.json. Fixed ``kill_rank``: that rank kills
    itself (SIGKILL) at step 1 of the first attempt; ``kill_node``: the ranks of that node
    of a ``trial.nodes`` gang kill their whole process group (the node's torchrun agent
    too: what losing a pod is to the gang); ``delay``: seconds before each step."""
    import json
    import signal
    import socket

    import torch
    import torch.distributed as dist
    from optuna import TrialPruned

    rank = dist.get_rank()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    node = int(os.environ.get("SWEEPER_NODE_RANK", "0"))
    seen: dict[str, object] = {"rank": rank, "world_size": dist.get_world_size(),
                               "params": ctx.params, "device": ctx.device, "decisions": [],
                               "node": node, "pgid": os.getpgid(0),
                               "host": socket.gethostname(),
                               "main": getattr(ctx, "is_main", True)}
    out = Path(os.environ["MARKER_DIR"], f"rank-{ctx.index}-{ctx.attempt}-{rank}.json")
    steps, loss = int(ctx.params.get("steps", 3)), 0.0
    for step in range(steps):
        time.sleep(float(ctx.params.get("delay", 0.0)))
        loss = float(ctx.params["x"]) * 10 + steps - step
        ctx.report(step, loss=loss)
        if ctx.params.get("kill_rank") == rank and ctx.attempt == 0 and step == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if ctx.params.get("kill_node") == node and ctx.attempt == 0 and step == 1:
            os.killpg(0, signal.SIGKILL)
        decision = ctx.should_prune()
        seen["decisions"].append(decision)  # type: ignore[attr-defined]
        out.write_text(json.dumps(seen))
        if decision:
            raise TrialPruned()
    return {"loss": loss, "sum_of_ranks": float(total.item())}
