"""One plain-Optuna worker of the ``compute`` section:
``SWEEPER_BENCH_JOB=<job as JSON> python -m benchmarks.compute_plain``.

What an Optuna user writes for the same task without an orchestrator: load the shared study with
``HyperbandPruner``, take the enqueued trials (the same configurations sweeper's runs train, in
the same order) one after another with ``study.ask``, train with ``trial.report`` /
``trial.should_prune`` each step, and ``study.tell`` the result. W such processes share one
study. The trial code is the same function sweeper's runners call, given a small context over
the Optuna trial (no checkpoints: a stopped trial is never resumed).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


class PlainContext:
    """The part of sweeper's ``TrialContext`` the benchmark's trials use, on a plain trial."""

    def __init__(self, trial: Any, params: dict[str, Any], index: int, metric: str) -> None:
        self.trial = trial
        self.params = params
        self.index = index
        self.metric = metric
        self.device = "cpu"

    def report(self, step: int, **metrics: float) -> None:
        self.trial.report(float(metrics[self.metric]), step)

    def should_prune(self) -> bool:
        return bool(self.trial.should_prune())

    def load_checkpoint(self) -> tuple[Any, int] | None:
        return None

    def save_checkpoint(self, state: Any, step: int) -> None:
        """Nothing to keep: plain Optuna's pruners stop trials, they never resume them."""

    def set(self, key: str, value: Any) -> None:
        self.trial.set_user_attr(key, value)

    def autocast(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def grad_scaler(self) -> Any:
        import torch

        return torch.amp.GradScaler("cuda", enabled=False)


def _entrypoint(ref: str) -> Callable[[Any], Any]:
    module, _, name = ref.partition(":")
    fn: Callable[[Any], Any] = getattr(importlib.import_module(module), name)
    return fn


def work(job: dict[str, Any]) -> int:
    """Run enqueued trials until none is waiting; the number this worker trained."""
    import optuna
    from optuna.distributions import json_to_distribution
    from optuna.storages import RDBStorage
    from optuna.trial import TrialState

    storage = RDBStorage(job["url"].replace("postgresql://", "postgresql+psycopg2://", 1))
    pruner = optuna.pruners.HyperbandPruner(**job["pruner"])
    study = optuna.load_study(study_name=job["study"], storage=storage, pruner=pruner,
                              sampler=optuna.samplers.RandomSampler(seed=job["seed"]))
    dists = {k: json_to_distribution(v) for k, v in job["distributions"].items()}
    entry, metric = _entrypoint(job["entrypoint"]), job["metric"]
    done = 0
    while True:
        trial = study.ask(dists)
        index = trial.user_attrs.get("index")
        if index is None:  # the queue was empty: Optuna made a new trial; it trains nothing
            study.tell(trial, state=TrialState.FAIL)
            break
        ctx = PlainContext(trial, {**trial.params, **job["fixed"]}, int(index), metric)
        try:
            result = entry(ctx)
        except optuna.TrialPruned:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            value = result[metric] if isinstance(result, dict) else result
            study.tell(trial, float(value))
        done += 1
    storage.engine.dispose()
    return done


def main() -> int:
    # The job (with the storage URL and its password) comes through the environment, not argv.
    work(json.loads(os.environ["SWEEPER_BENCH_JOB"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
