"""``trial.metrics: {wandb: ...}``: a W&B sweep program runs as a ``trial.command``, unchanged.

W&B's agent starts a sweep's program with the run's parameters and reads what it logs from
W&B's servers. Here the runner starts it with :mod:`trial_runner.wandb_site` first on its
``PYTHONPATH``: that directory's ``sitecustomize`` waits for the program to import the real
``wandb`` package, then puts the trial's parameters into ``wandb.config`` at ``wandb.init``
and appends every ``wandb.log`` call's numbers, with W&B's step, as one JSON line to the file
named by :data:`ENV_LOG`, which the runner follows as it follows ``trial.metrics.file``. So the
dashboard and the pruner see each step as the program logs it.

Only public names of ``wandb`` are touched (``wandb.init``, ``wandb.Run.log``, ``run.config
.update``), and the step is W&B's documented one, counted from the calls themselves: nothing
depends on W&B's run files, whose format is W&B's own business and changes between releases.
``WANDB_MODE`` is ``offline`` unless the user's environment sets it: nothing goes to W&B's
servers unless the user asks (their ``WANDB_MODE``, or ``mode=`` in ``wandb.init``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The JSON lines file the program's ``wandb.log`` calls are appended to.
ENV_LOG = "SWEEPER_WANDB_LOG"
#: The JSON object the program's ``wandb.config`` is updated with at ``wandb.init``.
ENV_CONFIG = "SWEEPER_WANDB_CONFIG"
#: The directory whose ``sitecustomize`` hooks ``wandb`` (stdlib only: the program's Python
#: may be another than the runner's, without sweeper).
SITE_DIR = Path(__file__).resolve().parent / "wandb_site"


def wandb_config(params: Mapping[str, Any], keys: tuple[tuple[str, str], ...]
                 ) -> dict[str, Any]:
    """The trial's parameters as W&B's agent puts a sweep's into ``wandb.config``: under each
    one's W&B key, a dotted key nested (``optimizer.lr`` -> ``{"optimizer": {"lr": ...}}``);
    a parameter without a key keeps its name."""
    names = dict(keys)
    out: dict[str, Any] = {}
    for name, value in params.items():
        *parents, leaf = names.get(name, name).split(".")
        node = out
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a key that is also a parent: keep it flat
                node = out
                leaf = names.get(name, name)
                break
            node = child
        node[leaf] = value
    return out


def wandb_env(env: Mapping[str, str], params: Mapping[str, Any],
              keys: tuple[tuple[str, str], ...], log_file: Path) -> dict[str, str]:
    """What the program's environment gets on top of ``env`` (the one it would have)."""
    path = env.get("PYTHONPATH")
    out = {ENV_LOG: str(log_file), ENV_CONFIG: json.dumps(wandb_config(params, keys)),
           "PYTHONPATH": os.pathsep.join([str(SITE_DIR), *([path] if path else [])])}
    if not env.get("WANDB_MODE"):
        out["WANDB_MODE"] = "offline"
    return out
