"""One plain-Optuna worker process: ``SWEEPER_BENCH_JOB=<job as JSON> python -m benchmarks.plain``.

What an Optuna user writes without an orchestrator: load the shared study from the RDB storage
and call ``study.optimize``. Jobs:
  optimize  RandomSampler, ``n_trials`` of an objective that suggests the parameters, sleeps
            ``duration`` seconds and reports once (the same work as sweeper's ``sleep`` example)
  grid      GridSampler over the job's grid, until the sampler stops the study
  tpe       TPESampler (constant liar, as in parallel use) on a synthetic test function
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _objective(dims: int, duration: float, grid: bool) -> Any:
    def objective(trial: Any) -> float:
        if grid:
            xs = [trial.suggest_int(f"x{k + 1}", 0, 10**6) for k in range(dims)]
        else:
            xs = [trial.suggest_float(f"x{k + 1}", -5.0, 5.0) for k in range(dims)]
        value = float(sum(x * x for x in xs))
        time.sleep(duration)
        trial.report(value, 0)
        return value

    return objective


def main(argv: list[str]) -> int:
    # The job (with the storage URL and its password) comes through the environment, not argv.
    job = json.loads(argv[0] if argv else os.environ["SWEEPER_BENCH_JOB"])
    import optuna
    from optuna.storages import RDBStorage

    url = job["url"].replace("postgresql://", "postgresql+psycopg2://", 1)
    storage = RDBStorage(url)
    if job["kind"] == "optimize":
        sampler: Any = optuna.samplers.RandomSampler(seed=job.get("seed"))
        study = optuna.load_study(study_name=job["study"], storage=storage, sampler=sampler)
        study.optimize(_objective(job["dims"], job["duration"], grid=False),
                       n_trials=job["n_trials"])
    elif job["kind"] == "grid":
        space = {k: list(v) for k, v in job["grid"].items()}
        sampler = optuna.samplers.GridSampler(space)
        study = optuna.load_study(study_name=job["study"], storage=storage, sampler=sampler)
        study.optimize(_objective(len(space), job["duration"], grid=True),
                       n_trials=job["n_trials"])
    elif job["kind"] == "tpe":
        from benchmarks.quality import evaluate

        sampler = optuna.samplers.TPESampler(seed=job["seed"], multivariate=True,
                                             constant_liar=True)
        study = optuna.load_study(study_name=job["study"], storage=storage, sampler=sampler)
        lo, hi, name, delay = job["low"], job["high"], job["function"], job["duration"]

        def objective(trial: Any) -> float:
            xs = {f"x{k + 1}": trial.suggest_float(f"x{k + 1}", lo, hi)
                  for k in range(job["dims"])}
            time.sleep(delay)
            return evaluate(name, xs)

        study.optimize(objective, n_trials=job["n_trials"])
    else:
        raise SystemExit(f"unknown job kind {job['kind']!r}")
    storage.engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
