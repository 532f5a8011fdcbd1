"""The price of parallelism (issue 29): normalised regret of W asynchronous workers against one
worker at the same number of trials, per method (tpe, gp, cmaes, qmc), on the project's own
function set, sweeper's way of sampling beside plain parallel Optuna's.

Both are simulated in one process on one in-memory study, with a simulated clock: W workers,
each trial lasting a duration drawn from the run's seed (0.5-1.5 time units, so the workers
drift apart as real trials do); a free worker asks, the trial stays RUNNING (visible to the
sampler as such) until the clock reaches its end, then it is told. Only the sampling differs:

* ``sweeper``: what a sweeper runner builds (``sweeper.spec.registry.build_sampler``, the
  method's defaults), a fresh sampler per index seeded ``index_seed(seed, index)``; qmc is
  sweeper's plan (Sobol point i for index i, ``sweeper.qmc``), enqueued up front;
* ``plain``: what an Optuna user writes for W processes on one study: one sampler per worker
  (same class and settings), seeded ``seed * 1000 + k`` (qmc: the same seed for every worker,
  as Optuna's documentation asks);
* ``sequential``: one worker, the sampler seeded ``seed``.

Simulating the clock makes the figures independent of the machine's load (2 shared cores) and
lets ``--full`` run 30 seeds (the (function, seed) pairs run in as many processes as there
are cores, or ``SWEEPER_BENCH_JOBS``); whether the real runners sample as the simulation does is a
separate check (``python -m benchmarks.parallel --real``: sweeper's local backend against
plain Optuna's processes on PostgreSQL, both through ``benchmarks.quality``).
"""

from __future__ import annotations

import heapq
import os
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.common import Row, percentile, verdict
from benchmarks.quality import FUNCTIONS, evaluate, optimum

METHODS = ("tpe", "gp", "cmaes", "qmc")
MODES = ("sequential", "sweeper", "plain")
#: The targets of issue 29: W=8 regret over sequential, for these methods.
TARGET_RATIO = 1.10
TARGETED = ("tpe", "gp")
#: Methods whose sweeper sets are planned (not Optuna's sampler): the price of sweeper's
#: parallelism is against its own plan run by one worker.
PLANNED = ("qmc",)


def _space(name: str, dims: int) -> dict[str, Any]:
    from optuna.distributions import FloatDistribution

    lo, hi = FUNCTIONS[name][0]
    return {f"x{k + 1}": FloatDistribution(lo, hi) for k in range(dims)}


def qmc_plan(name: str, dims: int, trials: int, seed: int) -> list[dict[str, Any]]:
    """sweeper's qmc sets for this space (what ``sweeper run`` enqueues)."""
    from sweeper.qmc import qmc_sets
    from sweeper.spec import parse_spec_dict

    lo, hi = FUNCTIONS[name][0]
    spec = parse_spec_dict({
        "name": "bench-parallel", "method": "qmc", "trials": trials, "seed": seed,
        "objective": {"metric": "loss", "direction": "minimize"},
        "trial": {"entrypoint": "benchmarks.objectives:sphere"},
        "parameters": {f"x{k + 1}": {"type": "float", "low": lo, "high": hi}
                       for k in range(dims)}})
    return qmc_sets(spec)


class _Samplers:
    """The sampler each ask uses, by mode: per index (sweeper), per worker (plain), one."""

    def __init__(self, method: str, mode: str, seed: int, workers: int,
                 factory: Callable[[str, int, int], Any] | None = None) -> None:
        self.method, self.mode, self.seed = method, mode, seed
        self.factory = factory or _sweeper_sampler
        self.per_worker: list[Any] = []
        if mode == "plain":
            self.per_worker = [_plain_sampler(method, seed if method == "qmc"
                                              else seed * 1000 + k) for k in range(workers)]
        elif mode == "sequential":
            self.per_worker = [_plain_sampler(method, seed)]

    def for_ask(self, worker: int, index: int) -> Any:
        from sweeper.spec.seeds import index_seed

        if self.mode == "sweeper":
            return self.factory(self.method, index_seed(self.seed, index), index)
        return self.per_worker[worker]


def _sweeper_sampler(method: str, seed: int, index: int) -> Any:
    from sweeper.spec import registry

    if method == "qmc":  # the plan is enqueued; the runner's sampler returns it
        return registry.build_sampler("qmc", {}, seed)
    return registry.build_sampler(method, {}, seed)


def _plain_sampler(method: str, seed: int) -> Any:
    from benchmarks.methods import plain_sampler

    return plain_sampler(method, seed)


def simulate(method: str, name: str, dims: int, trials: int, workers: int, seed: int,
             mode: str, factory: Callable[[str, int, int], Any] | None = None) -> float:
    """Best value after ``trials`` trials of ``workers`` simulated asynchronous workers."""
    import optuna

    space = _space(name, dims)
    study = optuna.create_study()
    if mode == "sweeper" and method == "qmc":
        for params in qmc_plan(name, dims, trials, seed):
            study.enqueue_trial(params)
    samplers = _Samplers(method, mode, seed, 1 if mode == "sequential" else workers,
                         factory)
    durations = random.Random(f"durations:{seed}")
    running: list[tuple[float, int, int, Any]] = []  # (end, worker, index, trial)
    best = float("inf")
    clock, started = 0.0, 0
    free = list(range(1 if mode == "sequential" else workers))
    while started < trials or running:
        for worker in free:
            if started >= trials:
                break
            study.sampler = samplers.for_ask(worker, started)
            trial = study.ask(space)
            end = clock + durations.uniform(0.5, 1.5)
            heapq.heappush(running, (end, worker, started, trial))
            started += 1
        clock, worker, _, trial = heapq.heappop(running)
        value = evaluate(name, trial.params)
        study.tell(trial, value)
        best = min(best, value)
        free = [worker]
    return best


# --------------------------------------------------------------------------- figures


def normalised(best: dict[str, dict[str, dict[str, list[float]]]], dims: int,
               functions: Sequence[str], method: str, mode: str,
               picks: dict[str, list[int]] | None = None) -> float:
    """Mean over functions of: the mean regret of (method, mode) over the seeds (``picks``:
    which seeds, with repeats, for the bootstrap), divided by sequential random search's."""
    out = []
    for f in functions:
        opt = optimum(f, dims)
        b = best[f]
        idx = picks[f] if picks is not None else range(len(b["random"]["sequential"]))
        rnd = statistics.fmean(b["random"]["sequential"][i] - opt for i in idx) or 1.0
        out.append(statistics.fmean(b[method][mode][i] - opt for i in idx) / rnd)
    return statistics.fmean(out)


def ratio_interval(best: dict[str, dict[str, dict[str, list[float]]]], dims: int,
                   functions: Sequence[str], method: str, mode: str,
                   rounds: int = 1000, baseline: str = "sequential") -> tuple[float, float]:
    """5th and 95th percentiles of (mode / baseline) when each function's seeds are
    resampled with replacement."""
    rng = random.Random(0)
    n = len(best[functions[0]]["random"]["sequential"])
    ratios = []
    for _ in range(rounds):
        picks = {f: [rng.randrange(n) for _ in range(n)] for f in functions}
        seq = normalised(best, dims, functions, method, baseline, picks)
        if seq > 0:
            ratios.append(normalised(best, dims, functions, method, mode, picks) / seq)
    return percentile(ratios, 5), percentile(ratios, 95)


def _job(args: tuple[Any, ...]) -> dict[str, Any]:
    """One function and seed: the best value of every (method, mode), and of random search."""
    import warnings

    import optuna

    warnings.simplefilter("ignore")  # QMCSampler's ExperimentalWarning, in every job
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        import torch

        torch.set_num_threads(1)  # the jobs run side by side, one core each
    except ImportError:  # pragma: no cover - torch is a dependency of sweeper
        pass
    methods, modes, name, dims, trials, workers, seed, variants = args
    out: dict[str, Any] = {"function": name, "seed": seed,
                           "random": simulate("random", name, dims, trials, 1, seed,
                                              "sequential")}
    for method in methods:
        out[method] = {mode: simulate(method, name, dims, trials, workers, seed, mode)
                       for mode in modes}
        if method in PLANNED and "sweeper" in modes:
            # sweeper's own sequential baseline: its plan at W=1, not Optuna's sampler
            out[method]["sweeper_sequential"] = simulate(method, name, dims, trials, 1, seed,
                                                         "sweeper")
    if variants:
        from benchmarks.gp_variants import VARIANTS

        for variant, build in VARIANTS.items():
            def factory(method: str, s: int, index: int,
                        build: Callable[[int], Any] = build) -> Any:
                return build(s)

            out["gp"][variant] = simulate("gp", name, dims, trials, workers, seed, "sweeper",
                                          factory)
    return out


def collect(methods: Sequence[str], functions: Sequence[str], dims: int, trials: int,
            workers: int, seeds: Sequence[int], log: Callable[[str], None],
            modes: Sequence[str] = MODES, jobs: int = 1,
            variants: bool = False) -> dict[str, dict[str, dict[str, list[float]]]]:
    """best[function][method][mode] = the best values over ``seeds`` (and
    best[function]["random"]["sequential"]); (function, seed) pairs run in ``jobs``
    processes side by side (the clock is simulated: they do not disturb each other's
    figures)."""
    import multiprocessing

    tasks = [(tuple(methods), tuple(modes), f, dims, trials, workers, seed, variants)
             for seed in seeds for f in functions]
    results: list[dict[str, Any]] = []
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for r in pool.imap_unordered(_job, tasks):
                log(f"parallel: {r['function']} seed {r['seed']} done")
                results.append(r)
    else:
        for task in tasks:
            results.append(_job(task))
            log(f"parallel: {task[2]} seed {task[6]} done")
    best: dict[str, dict[str, dict[str, list[float]]]] = {}
    for r in sorted(results, key=lambda r: (r["function"], r["seed"])):
        b = best.setdefault(r["function"], {"random": {"sequential": []}})
        b["random"]["sequential"].append(r["random"])
        for method in methods:
            for mode, value in r[method].items():
                b.setdefault(method, {}).setdefault(mode, []).append(value)
    return best


def rows_of(best: dict[str, dict[str, dict[str, list[float]]]], methods: Sequence[str],
            functions: Sequence[str], dims: int, trials: int, workers: int,
            n_seeds: int) -> list[Row]:
    rows = []
    size = f"{dims}-D, {trials} trials, {len(functions)} functions x {n_seeds} seeds"
    for method in methods:
        seq = normalised(best, dims, functions, method, "sequential")
        own = "sweeper_sequential" if "sweeper_sequential" in best[functions[0]][method] \
            else "sequential"
        own_seq = normalised(best, dims, functions, method, own)
        swp = normalised(best, dims, functions, method, "sweeper")
        pln = normalised(best, dims, functions, method, "plain")
        lo, hi = ratio_interval(best, dims, functions, method, "sweeper", baseline=own)
        r_swp = swp / own_seq if own_seq else float("nan")
        r_pln = pln / seq if seq else float("nan")
        targeted = method in TARGETED
        ok = r_swp <= r_pln and (r_swp <= TARGET_RATIO or not targeted)
        target = f"<= {TARGET_RATIO:.2f}x and <= plain's" if targeted else "<= plain's"
        baseline = "its own plan at W=1" if own != "sequential" else "sequential"
        rows.append(Row(
            f"parallel price: {method} W={workers} vs sequential ({size}, simulated clock)",
            f"normalised regret sweeper {swp:.3f} / {baseline} {own_seq:.3f} = {r_swp:.2f}x "
            f"(90% bootstrap {lo:.2f}-{hi:.2f}); plain parallel Optuna {pln:.3f} / sequential "
            f"{seq:.3f} = {r_pln:.2f}x", target, verdict(ok),
            {"method": method, "sweeper": swp, "plain": pln, "sequential": seq,
             "sweeper_sequential": own_seq, "ratio": r_swp, "ratio_interval_90": [lo, hi],
             "plain_ratio": r_pln}))
    return rows


def run(sizes: dict[str, Any], log: Callable[[str], None]) -> tuple[list[Row], dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    dims, trials, workers = sizes["p_dims"], sizes["p_trials"], sizes["p_w"]
    seeds = list(range(sizes["p_seeds"]))
    methods = sizes.get("p_methods") or METHODS
    functions = sizes.get("p_functions") or tuple(FUNCTIONS)
    jobs = int(os.environ.get("SWEEPER_BENCH_JOBS") or sizes.get("p_jobs")
               or os.cpu_count() or 1)
    log(f"parallel: {', '.join(methods)} at W={workers} and sequentially, {len(functions)} "
        f"functions x {len(seeds)} seeds, {trials} trials, {jobs} processes")
    best = collect(methods, functions, dims, trials, workers, seeds, log, jobs=jobs)
    rows = rows_of(best, methods, functions, dims, trials, workers, len(seeds))
    notes = [
        f"parallel: {len(seeds)} seed(s) per function here; `python -m benchmarks.run --full "
        "--only parallel` runs 30 (at 10 the ratio moved by 0.2 from one block of seeds to the "
        "next; the section takes about 35 minutes of one core at 30, most of it plain "
        "Optuna's GP asks with their Monte Carlo fantasies; the (function, seed) pairs run on "
        "every core, or SWEEPER_BENCH_JOBS processes). The clock is simulated, so two "
        "runners never ask at the same instant here: on real runners they do, and GP's asks "
        "would then miss each other's points without sweeper's ordered asks "
        "(docs/parallel.md)."]
    return rows, {"dims": dims, "trials": trials, "workers": workers, "seeds": seeds,
                  "best_values": best, "notes": notes}


def main(argv: Sequence[str]) -> int:
    """``python -m benchmarks.parallel [--variants] [SIZES_JSON]``: the section alone, printed;
    ``--variants`` adds the GP variants measured and not chosen (``benchmarks.gp_variants``)."""
    import json

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    args = [a for a in argv if a != "--variants"]
    sizes = {"p_dims": 5, "p_trials": 60, "p_w": 8, "p_seeds": 3,
             **(json.loads(args[0]) if args else {})}
    methods = sizes.get("p_methods") or METHODS
    functions = sizes.get("p_functions") or tuple(FUNCTIONS)
    seeds = list(range(sizes["p_seeds"]))
    best = collect(methods, functions, sizes["p_dims"], sizes["p_trials"], sizes["p_w"],
                   seeds, lambda m: print(m, file=sys.stderr, flush=True),
                   jobs=sizes.get("p_jobs") or os.cpu_count() or 1,
                   variants="--variants" in argv and "gp" in methods)
    for r in rows_of(best, methods, functions, sizes["p_dims"], sizes["p_trials"],
                     sizes["p_w"], len(seeds)):
        print(f"{r.item} | {r.measured} | {r.target} | {r.status}")
    if "--variants" in argv and "gp" in methods:
        seq = normalised(best, sizes["p_dims"], functions, "gp", "sequential")
        for mode in sorted(best[functions[0]]["gp"]):
            v = normalised(best, sizes["p_dims"], functions, "gp", mode)
            print(f"gp {mode}: normalised regret {v:.3f} = {v / seq:.2f}x sequential")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
