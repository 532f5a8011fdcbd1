"""A stand-in for Katib's /opt/pytorch-mnist/mnist.py (no torch, no download): the same flags
and the same output lines (`Train Epoch: ... loss=...`, `{metricName: accuracy, metricValue:
...}`), so an imported Katib example runs end to end on this machine."""

from __future__ import annotations

import argparse
import math

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--log-path", default="")
parser.add_argument("--logger", default="standard")
args = parser.parse_args()
for epoch in range(1, args.epochs + 1):
    loss = abs(math.log10(args.lr) + 1.5) + abs(args.momentum - 0.7) + 0.1 / epoch
    print(f"Train Epoch: {epoch} [0/60000 (0%)]\tloss={loss:.4f}", flush=True)
    print(f"{{metricName: accuracy, metricValue: {1 - loss / 4:.4f}}};"
          f"{{metricName: loss, metricValue: {loss:.4f}}}", flush=True)
