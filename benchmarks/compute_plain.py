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
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, fresh_database, plain_env, wait_all


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


def plain_run(spec: dict[str, Any], tmp: Path) -> dict[str, int]:
    """W plain-Optuna processes over the sweep's own planned sets, enqueued in index order."""
    import optuna
    from optuna.distributions import distribution_to_json

    from benchmarks.common import optuna_storage
    from sweeper.space import distributions, random_point
    from sweeper.spec import parse_spec_dict

    parsed = parse_spec_dict(spec, source="<benchmark>")
    with fresh_database("compute_plain") as (_, url):
        storage = optuna_storage(url)
        study = optuna.create_study(study_name=spec["name"], storage=storage)
        for i in range(parsed.trials):
            study.enqueue_trial(random_point(parsed, i), user_attrs={"index": i})
        job = {"url": url, "study": spec["name"], "seed": spec["seed"],
               "pruner": {k: v for k, v in spec["pruner"].items() if k != "type"},
               "distributions": {k: distribution_to_json(d)
                                 for k, d in distributions(parsed).items()},
               "entrypoint": spec["trial"]["entrypoint"], "fixed": spec["trial"]["fixed"],
               "metric": "val_loss"}
        log = tmp / "plain.log"
        env = dict(plain_env(), SWEEPER_BENCH_JOB=json.dumps(job))  # not argv: a password
        with open(log, "ab") as out:
            procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.compute_plain"],
                                      cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=out) for _ in range(spec["parallelism"])]
        wait_all(procs, f"plain {spec['name']}", log)
        counts: dict[str, int] = {}
        for t in study.get_trials(deepcopy=False):
            if t.user_attrs.get("index") is not None:
                counts[t.state.name] = counts.get(t.state.name, 0) + 1
        storage.engine.dispose()
    return counts


def main() -> int:
    # The job (with the storage URL and its password) comes through the environment, not argv.
    work(json.loads(os.environ["SWEEPER_BENCH_JOB"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
