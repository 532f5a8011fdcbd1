"""A small PyTorch MLP on scikit-learn's bundled 8x8 digits (no download, seconds on a CPU).

Reports val_loss and val_accuracy every epoch, saves a checkpoint per epoch (a retried
attempt resumes from it), honours the pruner, and uses the GPU when there is one (data on
the device, ``ctx.autocast()``: bf16 on CUDA that has it, fp16 with a GradScaler otherwise).
Under ``launcher: torchrun`` it trains with DistributedDataParallel, each rank on its share
of every batch. It returns its training throughput (``train_samples_per_s``, all ranks
together), which the runner stores as a user attr. The final model's state_dict is saved as an
artifact (``model.pt``; fixed param ``save_model: false`` turns that off).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trial_runner.context import TrialContext

logger = logging.getLogger(__name__)


@functools.cache
def _arrays() -> tuple[Any, Any, int]:
    """The standardised digits in a fixed order, and where training ends and validation
    starts: read once a process (a process that trains many trials reads it once)."""
    import numpy as np
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)  # the same split for every trial: comparable results
    order = rng.permutation(len(x))
    x, y = x[order] / 16.0, y[order]
    cut = int(0.8 * len(x))
    mean, std = x[:cut].mean(0), x[:cut].std(0) + 1e-6
    return (x - mean) / std, y, cut


def _data(device: Any) -> tuple[Any, Any, Any, Any]:
    import torch

    x, y, cut = _arrays()

    def t(a: Any, dtype: Any) -> Any:
        return torch.tensor(a, dtype=dtype, device=device)  # a copy: the arrays stay as read

    return (t(x[:cut], torch.float32), t(y[:cut], torch.long),
            t(x[cut:], torch.float32), t(y[cut:], torch.long))


def _distributed() -> tuple[int, int]:
    """(rank, world size): (0, 1) unless torchrun started this process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _resume(ctx: TrialContext, model: Any, opt: Any, lr: float) -> int:
    """Load the trial's checkpoint, if it has one, into ``model`` and ``opt``; the first epoch
    to train. The optimizer goes on at ``lr``, the trial's lr now: under PBT the checkpoint
    may be another member's, and this member's lr a perturbation of that member's."""
    resumed = ctx.load_checkpoint()
    if resumed is None:
        return 0
    state, step = resumed
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    for group in opt.param_groups:
        group["lr"] = lr
    return int(step) + 1


@dataclass(frozen=True)
class Epoch:
    """One epoch trained: its number (from 0), the validation figures after it, and the
    samples (all ranks together) and seconds of its training steps (not the evaluation)."""

    epoch: int
    val_loss: float
    val_accuracy: float
    samples: int
    train_s: float


def build(ctx: TrialContext) -> tuple[Any, Any, Any]:
    """The trial's model, the module that trains it (the model, or its DistributedDataParallel
    wrapper under torchrun) and its optimizer, from ``ctx.params``; the torch seed is the
    trial's, so the same (seed, index, params) start from the same weights."""
    import torch
    from torch import nn

    p = ctx.params
    device = torch.device(ctx.device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(p.get("threads", 1))))
    torch.manual_seed(int(p.get("seed", 0)) + ctx.index)
    hidden = int(p.get("hidden", 64))
    model = nn.Sequential(
        nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(float(p.get("dropout", 0.0))),
        nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10),
    ).to(device)
    net: Any = model
    if _distributed()[1] > 1:  # launcher: torchrun: gradients averaged over the ranks
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    lr = float(p.get("lr", 1e-2))
    if p.get("optimizer", "adam") == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    return model, net, opt


def fit(ctx: TrialContext, model: Any, net: Any, opt: Any, start: int) -> Iterator[Epoch]:
    """Train epochs ``start`` .. ``epochs - 1`` of ``build``'s model, one per ``next``: the
    batch order is drawn from a generator seeded by the trial's index (at ``start``, whatever
    ``start`` is), dropout from torch's global generator."""
    import torch
    from torch import nn

    p = ctx.params
    device = torch.device(ctx.device)
    x_train, y_train, x_val, y_val = _data(device)
    rank, world = _distributed()
    epochs = int(p.get("epochs", 5))
    batch = int(p.get("batch_size", 64))
    loss_fn = nn.CrossEntropyLoss()
    scaler = ctx.grad_scaler()  # scales only for fp16 autocast; a pass-through otherwise
    generator = torch.Generator(device="cpu").manual_seed(ctx.index)
    for epoch in range(start, epochs):
        net.train()
        order = torch.randperm(len(x_train), generator=generator).to(device)
        began, trained = time.perf_counter(), 0
        for i in range(0, len(order), batch):
            if len(order[i:i + batch]) < world:
                continue  # too small to share out (the same on every rank)
            idx = order[i:i + batch][rank::world]  # this rank's share of the batch
            opt.zero_grad(set_to_none=True)
            with ctx.autocast():
                loss = loss_fn(net(x_train[idx]), y_train[idx])
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            trained += len(idx) * world
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_s = time.perf_counter() - began
        model.eval()
        with torch.no_grad(), ctx.autocast():
            logits = model(x_val).float()
            val_loss = float(loss_fn(logits, y_val))
            val_acc = float((logits.argmax(1) == y_val).float().mean())
        yield Epoch(epoch, val_loss, val_acc, trained, train_s)


def train(ctx: TrialContext) -> dict[str, float | None]:
    p = ctx.params
    model, net, opt = build(ctx)
    start = _resume(ctx, model, opt, float(p.get("lr", 1e-2)))
    ctx.set("start_epoch", start)

    val_loss = val_acc = float("nan")
    trained, train_s = 0, 0.0  # samples and seconds of the training steps (not evaluation)
    for ep in fit(ctx, model, net, opt, start):
        val_loss, val_acc = ep.val_loss, ep.val_accuracy
        trained, train_s = trained + ep.samples, train_s + ep.train_s
        ctx.report(ep.epoch, val_loss=val_loss, val_accuracy=val_acc)
        ctx.save_checkpoint({"model": model.state_dict(), "optimizer": opt.state_dict()},
                            step=ep.epoch)
        if ctx.should_prune():
            from optuna import TrialPruned

            raise TrialPruned()
    if p.get("save_model", True):
        # The final model as an artifact: listed in the dashboard, fetched by
        # `sweeper best NAME --download DIR`, loaded with torch.load(..., weights_only=True).
        import io

        import torch

        from sweeper.errors import ArtifactError

        buf = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buf)
        try:
            ctx.save_artifact(buf.getvalue(), name="model.pt")
        except ArtifactError as e:  # the metrics are still the result; say why there is no model
            logger.error("%s", e)
            ctx.set("model_artifact_error", str(e)[:500])
    # Throughput of the training steps, all ranks together (a user attr in the dashboard).
    rate = round(trained / train_s, 1) if train_s > 0 else None
    return {"val_accuracy": val_acc, "val_loss": val_loss, "train_samples_per_s": rate}
