"""A stand-in for a W&B training script whose batch size and width are integers (argparse
refuses `--batch_size=238.692`): metrics printed as name=value lines instead of wandb.log."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--learning_rate", type=float, required=True)
parser.add_argument("--batch_size", type=int, required=True)
parser.add_argument("--hidden", type=int, required=True)
parser.add_argument("--dropout", type=float, required=True)
args = parser.parse_args()
loss = (args.learning_rate - 0.05) ** 2 + args.dropout / 10 + 32 / args.batch_size
print(f"batch_size_seen={args.batch_size} hidden_seen={args.hidden}", flush=True)
print(f"val_loss={loss:.6f}", flush=True)
