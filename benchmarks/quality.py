"""Item 5, search quality: normalised regret after ``trials`` trials on standard test functions
with known optima (D-dimensional), over several seeds.

* sweeper parallel TPE: a ``method: tpe`` sweep run by the local backend with W workers: real
  runner processes, each asking the sampler when it starts an index (constant liar), exactly
  as ``sweeper run`` does; every trial sleeps ``delay`` seconds first so the W runners overlap
  like real training jobs;
* sequential TPE: plain Optuna ``TPESampler`` with the same settings sweeper uses
  (``multivariate=True``, ``constant_liar=True``: also Optuna 5's defaults for one objective),
  one trial at a time: the cost of parallelism is the ratio of the two;
* random: ``RandomSampler``, the normaliser;
* with ``--full``, also plain Optuna's parallel TPE: W processes calling ``study.optimize`` with
  the same sampler settings on one PostgreSQL study (is a gap sweeper's, or parallel TPE's?).

Normalised regret per function = mean over seeds of (best - optimum) divided by the same mean
for random search (so random is 1.0 by construction); the summary is the mean over functions.
"""

from __future__ import annotations

import statistics
import tempfile
import types
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Disturbed,
    Row,
    fresh_database,
    launch_plain,
    optuna_storage,
    undisturbed,
    verdict,
    wait_all,
)

#: name -> (search bounds per dimension, argmin per dimension)
FUNCTIONS: dict[str, tuple[tuple[float, float], float]] = {
    "sphere": ((-5.12, 5.12), 0.0),
    "rosenbrock": ((-5.0, 10.0), 1.0),
    "rastrigin": ((-5.12, 5.12), 0.0),
    "styblinski_tang": ((-5.0, 5.0), -2.903534027771178),
}
METHODS = ("sweeper_parallel_tpe", "sequential_tpe", "random", "plain_parallel_tpe")


def _fn(name: str) -> Callable[[Any], float]:
    from trial_runner.examples import synthetic

    f: Callable[[Any], float] = getattr(synthetic, name)
    return f


def evaluate(name: str, xs: dict[str, float]) -> float:
    return _fn(name)(types.SimpleNamespace(params=xs))


def optimum(name: str, dims: int) -> float:
    return evaluate(name, {f"x{k + 1}": FUNCTIONS[name][1] for k in range(dims)})


def _space(name: str, dims: int) -> dict[str, dict[str, Any]]:
    lo, hi = FUNCTIONS[name][0]
    return {f"x{k + 1}": {"type": "float", "low": lo, "high": hi} for k in range(dims)}


def sequential(name: str, dims: int, trials: int, sampler: Any) -> float:
    import optuna

    lo, hi = FUNCTIONS[name][0]
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: evaluate(name, {f"x{k + 1}": t.suggest_float(f"x{k + 1}", lo, hi)
                                             for k in range(dims)}), n_trials=trials)
    return float(study.best_value)


def sweeper_parallel(name: str, dims: int, trials: int, workers: int, seed: int,
                     delay: float) -> float:
    from benchmarks.sweeps import run_sweep, spec_dict
    from sweeper.study.sql import open_sql_store

    spec = spec_dict(f"bench-quality-{name.replace('_', '-')}", method="tpe", trials=trials,
                     parallelism=workers, seed=seed,
                     entrypoint=f"benchmarks.objectives:{name}", fixed={"delay": delay},
                     parameters=_space(name, dims))
    with fresh_database("quality") as (_, url):
        run = run_sweep(url, spec)
        if run.counts.get("COMPLETE") != trials:
            raise Disturbed(f"quality sweep {name} seed {seed}: {run.counts}")
        storage = open_sql_store(url)
        study_id = storage.get_study_id_from_name(spec["name"])
        best = float(storage.get_best_trial(study_id).values[0])
        storage.close()
    return best


def plain_parallel(name: str, dims: int, trials: int, workers: int, seed: int,
                   delay: float) -> float:
    import optuna

    lo, hi = FUNCTIONS[name][0]
    with fresh_database("quality_plain") as (_, url), \
            tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        storage = optuna_storage(url)
        optuna.create_study(study_name="bench-tpe", storage=storage)
        log = Path(tmp) / "plain.log"
        shares = [trials // workers + (1 if k < trials % workers else 0) for k in range(workers)]
        procs = [launch_plain({"kind": "tpe", "url": url, "study": "bench-tpe",
                               "n_trials": share, "duration": delay, "dims": dims,
                               "function": name, "low": lo, "high": hi,
                               "seed": seed * 1000 + k}, log)
                 for k, share in enumerate(shares) if share]
        wait_all(procs, "plain parallel tpe", log)
        best = float(optuna.load_study(study_name="bench-tpe", storage=storage).best_value)
        storage.engine.dispose()
    return best


def _summary_ratio(best: dict[str, dict[str, list[float]]], dims: int,
                   picks: dict[str, list[int]]) -> float:
    means = {}
    for m in ("sweeper_parallel_tpe", "sequential_tpe"):
        norm = []
        for name in FUNCTIONS:
            opt = optimum(name, dims)
            b = best[name]
            norm.append(statistics.fmean(b[m][i] - opt for i in picks[name])
                        / statistics.fmean(b["random"][i] - opt for i in picks[name]))
        means[m] = statistics.fmean(norm)
    return means["sweeper_parallel_tpe"] / means["sequential_tpe"]


def bootstrap_ratio(best: dict[str, dict[str, list[float]]], dims: int,
                    rounds: int = 2000) -> tuple[float, float]:
    """5th and 95th percentiles of the parallel/sequential ratio when the seeds of each
    function are resampled with replacement: how much of a difference is seed noise."""
    import random

    from benchmarks.common import percentile

    rng = random.Random(0)
    n = len(best["sphere"]["random"])
    ratios = [_summary_ratio(best, dims, {f: [rng.randrange(n) for _ in range(n)]
                                          for f in FUNCTIONS}) for _ in range(rounds)]
    return percentile(ratios, 5), percentile(ratios, 95)


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dims, trials, seeds = sizes["q_dims"], sizes["q_trials"], sizes["q_seeds"]
    workers, delay = sizes["q_w"], sizes["q_delay"]
    best = _best_values(sizes, log)
    methods = [m for m in METHODS if best["sphere"][m]]
    per_function = _normalised_regret(best, dims, methods)
    mean = {m: statistics.fmean(per_function[f][m] for f in FUNCTIONS) for m in methods}
    rows = _rows(best, per_function, mean, sizes)
    return rows, {"dims": dims, "trials": trials, "seeds": seeds, "workers": workers,
                  "delay_s": delay, "best_values": best, "normalised_regret": per_function,
                  "mean_normalised_regret": mean}


def _best_values(sizes: dict[str, Any], log: Any) -> dict[str, dict[str, list[float]]]:
    """function -> method -> the best value of each seed's sweep."""
    import optuna

    dims, trials, seeds = sizes["q_dims"], sizes["q_trials"], sizes["q_seeds"]
    workers, delay = sizes["q_w"], sizes["q_delay"]
    best: dict[str, dict[str, list[float]]] = {f: {m: [] for m in METHODS} for f in FUNCTIONS}
    for name in FUNCTIONS:
        for seed in range(seeds):
            log(f"quality: {name} {dims}-D, seed {seed}: sweeper tpe W={workers}, "
                "sequential tpe, random")
            b = best[name]
            b["sweeper_parallel_tpe"].append(undisturbed(
                partial(sweeper_parallel, name, dims, trials, workers, seed, delay),
                f"quality {name} seed {seed}", log))
            b["sequential_tpe"].append(sequential(name, dims, trials, optuna.samplers.TPESampler(
                seed=seed, multivariate=True, constant_liar=True)))
            b["random"].append(sequential(name, dims, trials,
                                          optuna.samplers.RandomSampler(seed=seed)))
            if sizes.get("q_plain_parallel"):
                b["plain_parallel_tpe"].append(undisturbed(
                    partial(plain_parallel, name, dims, trials, workers, seed, delay),
                    f"quality plain {name} seed {seed}", log))
    return best


def _normalised_regret(best: dict[str, dict[str, list[float]]], dims: int,
                       methods: list[str]) -> dict[str, dict[str, float]]:
    """function -> method -> its mean regret over random's (and the function's optimum)."""
    per_function: dict[str, dict[str, float]] = {}
    for name in FUNCTIONS:
        opt = optimum(name, dims)
        regret = {m: statistics.fmean(v - opt for v in best[name][m]) for m in methods}
        per_function[name] = {m: regret[m] / regret["random"] for m in methods}
        per_function[name]["optimum"] = opt
    return per_function


def _rows(best: dict[str, dict[str, list[float]]], per_function: dict[str, dict[str, float]],
          mean: dict[str, float], sizes: dict[str, Any]) -> list[Row]:
    dims, trials, seeds, workers = sizes["q_dims"], sizes["q_trials"], sizes["q_seeds"], \
        sizes["q_w"]
    par, seq = mean["sweeper_parallel_tpe"], mean["sequential_tpe"]
    detail = "; ".join(f"{f} {per_function[f]['sweeper_parallel_tpe']:.2f}/"
                       f"{per_function[f]['sequential_tpe']:.2f}" for f in FUNCTIONS)
    size = f"{dims}-D, {trials} trials, {seeds} seed(s)"
    lo, hi = bootstrap_ratio(best, dims)
    spread = ""
    if seeds > 1:
        spread = f"; 90% bootstrap interval over seeds {lo:.2f}-{hi:.2f}"
    rows = [
        Row(f"quality ({size}): parallel vs sequential TPE",
            f"normalised regret sweeper W={workers} {par:.3f} vs sequential {seq:.3f} = "
            f"{par / seq:.2f}x{spread} ({detail})", "<= 1.25x", verdict(par <= 1.25 * seq),
            {"ratio": par / seq, "ratio_interval_90": [lo, hi], **mean}),
        Row("quality: both well below random (1.0)",
            f"sweeper {par:.3f}, sequential {seq:.3f}, random 1.000", "both <= 0.5",
            verdict(par <= 0.5 and seq <= 0.5), dict(mean)),
    ]
    if "plain_parallel_tpe" in mean:
        pp = mean["plain_parallel_tpe"]
        rows.append(Row(f"quality: plain Optuna TPE, {workers} processes (reference)",
                        f"normalised regret {pp:.3f} = {pp / seq:.2f}x sequential; sweeper "
                        f"{par / pp:.2f}x plain parallel", "-", "INFO", {"plain_parallel": pp}))
    return rows
