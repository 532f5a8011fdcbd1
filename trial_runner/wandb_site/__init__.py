"""The directory the runner puts first on a W&B program's ``PYTHONPATH``
(:mod:`trial_runner.wandb_bridge`); Python runs its ``sitecustomize`` at start-up."""
