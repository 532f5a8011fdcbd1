"""A W&B sweep program as W&B's examples write one: parameters from wandb.config (a nested
one too), metrics only through wandb.log (commit=False for a partial step, run.log too).
It prints nothing sweeper could read."""

import wandb

run = wandb.init(config={"learning_rate": 1.0, "epochs": 1, "optimizer": {"momentum": 0.0}})
config = wandb.config
loss = 1.0
for epoch in range(config.epochs):
    loss = abs(config.learning_rate - 0.01) * 10 + 1.0 / (epoch + 1)
    run.log({"train": {"loss": loss * 1.1}}, commit=False)
    wandb.log({"val_loss": loss, "epoch": epoch, "lr_seen": config.learning_rate,
               "momentum_seen": config.optimizer["momentum"]})
wandb.finish()
