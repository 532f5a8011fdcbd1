"""A stand-in for a W&B training script: argparse flags as `${args}` passes them, metrics
printed as name=value lines (what sweeper reads) instead of wandb.log."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--layers", type=int, required=True)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
loss = 1.0
for epoch in range(args.epochs):
    loss = (args.lr - 0.01) ** 2 * 100 + 0.1 * args.layers + 1.0 / (epoch + 1)
    print(f"step={epoch} val/loss={loss:.6f}", flush=True)
print(f"val/loss={loss:.6f}")
