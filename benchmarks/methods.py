"""Search quality of every method, run through sweeper at parallelism W against the same method
run sequentially in plain Optuna (issue 11):

* single objective (random, qmc, tpe, gp, cmaes) on the suite's test functions (see
  ``benchmarks.quality``): normalised regret of each, sweeper W-parallel and plain sequential,
  and their ratio (what running in parallel costs each method). The normaliser is plain
  sequential random search (1.0 by construction), as in the TPE item;
* multi-objective (nsga2, nsga3) on ZDT1: the hypervolume of the final Pareto front, as a
  fraction of the true front's, sweeper W-parallel against plain sequential (and random);
* a conditional space (``synthetic.family``: a categorical decides which of three test
  functions scores the trial, and so which parameters exist): sweeper's conditional ``tpe``
  (``when:``, W runners) against plain Optuna define-by-run TPE, one trial at a time.

Sweeper runs real runner processes on the local backend (``benchmarks.sweeps.run_sweep``)
with a fixed ``delay`` per trial so the W runners overlap; plain Optuna uses the sampler class
and defaults sweeper builds (``sweeper.spec.registry``; for gp, Optuna's own
GPSampler), seeded the same way per run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

from benchmarks.common import Disturbed, Row, fresh_database, undisturbed
from benchmarks.quality import FUNCTIONS, optimum

SINGLE = ("random", "qmc", "tpe", "gp", "cmaes")
MULTI = ("nsga2", "nsga3")
#: Reference point for ZDT1's hypervolume (both objectives minimised). (1.1, 1.1) is usual
#: for thousands of evaluations; with a sweep's hundred, few points fall inside it.
ZDT1_REFERENCE = (1.1, 6.0)
#: The true front (f2 = 1 - sqrt(f1)) dominates r2 - 1/3 up to f1 = 1, then (r1 - 1) * r2.
ZDT1_TRUE_HV = ZDT1_REFERENCE[1] - 1.0 / 3.0 + (ZDT1_REFERENCE[0] - 1.0) * ZDT1_REFERENCE[1]
FAMILY_BOUNDS = {"sphere": ("sp", 2, (-5.12, 5.12)), "rosenbrock": ("ro", 3, (-2.0, 2.0)),
                 "rastrigin": ("ra", 3, (-5.12, 5.12))}


# --------------------------------------------------------------------------- plain Optuna


def plain_sampler(method: str, seed: int, **options: Any) -> Any:
    """Plain Optuna's sampler for ``method``: the class whose options sweeper takes, with
    sweeper's defaults, seeded once (for ``gp``, Optuna's GPSampler, not sweeper's subclass
    that penalises running trials: the two sample alike when no trial runs)."""
    import optuna

    from sweeper.spec import registry

    if method == "gp":
        return optuna.samplers.GPSampler(seed=seed, **{**registry.sampler_defaults("gp"),
                                                       **options})
    if method == "qmc":  # sweeper plans scrambled Sobol sets itself; Optuna's own equivalent
        return optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed)
    if method == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return registry.build_sampler(method, options, seed)


def sequential_best(name: str, dims: int, trials: int, sampler: Any) -> float:
    import optuna

    from benchmarks.quality import evaluate

    lo, hi = FUNCTIONS[name][0]
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: evaluate(name, {f"x{k + 1}": t.suggest_float(f"x{k + 1}", lo, hi)
                                             for k in range(dims)}), n_trials=trials)
    return float(study.best_value)


# --------------------------------------------------------------------------- sweeper


def _sweep(spec: dict[str, Any], what: str) -> list[Any]:
    """Run a sweep on a fresh database; its COMPLETE trials."""
    from optuna.trial import TrialState

    from benchmarks.sweeps import run_sweep
    from sweeper.study import load_sweep
    from sweeper.study.sql import open_sql_store

    with fresh_database("methods") as (_, url):
        run = run_sweep(url, spec)
        if run.counts.get("COMPLETE") != spec["trials"]:
            raise Disturbed(f"{what}: {run.counts}")
        storage = open_sql_store(url)
        trials = [t for t in load_sweep(storage, spec["name"]).study().get_trials()
                  if t.state == TrialState.COMPLETE]
        storage.close()
    return trials


def _spec(name: str, method: str, trials: int, workers: int, seed: int, delay: float,
          entrypoint: str, parameters: dict[str, Any], **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name, "method": method, "trials": trials, "parallelism": workers, "seed": seed,
        "objective": {"metric": "loss", "direction": "minimize"},
        "trial": {"entrypoint": f"benchmarks.objectives:{entrypoint}",
                  "fixed": {"delay": delay}, "retries": 0},
        "parameters": parameters}
    d.update(extra)
    return d


def sweeper_best(method: str, name: str, dims: int, trials: int, workers: int, seed: int,
                 delay: float) -> float:
    lo, hi = FUNCTIONS[name][0]
    space = {f"x{k + 1}": {"type": "float", "low": lo, "high": hi} for k in range(dims)}
    spec = _spec(f"bench-{method}-{name.replace('_', '-')}", method, trials, workers, seed,
                 delay, name, space)
    return min(float(t.values[0]) for t in _sweep(spec, f"{method} {name} seed {seed}"))


# --------------------------------------------------------------------------- multi-objective


def hypervolume_2d(points: list[tuple[float, float]],
                   reference: tuple[float, float] = ZDT1_REFERENCE) -> float:
    """Area dominated by ``points`` (both minimised) inside the reference box."""
    inside = sorted((a, b) for a, b in points if a < reference[0] and b < reference[1])
    # From the left: each non-dominated point adds the strip up to the next one.
    front: list[tuple[float, float]] = []
    for a, b in inside:
        if not front or b < front[-1][1]:
            front.append((a, b))
    area = 0.0
    for k, (a, b) in enumerate(front):
        right = front[k + 1][0] if k + 1 < len(front) else reference[0]
        area += (right - a) * (reference[1] - b)
    return area


def _zdt1_space(dims: int) -> dict[str, Any]:
    return {f"x{k + 1}": {"type": "float", "low": 0.0, "high": 1.0} for k in range(dims)}


def sweeper_hv(method: str, dims: int, trials: int, population: int, workers: int, seed: int,
               delay: float) -> float:
    spec = _spec(f"bench-{method}-zdt1", method, trials, workers, seed, delay, "zdt1",
                 _zdt1_space(dims), sampler={"population_size": population},
                 objective=[{"metric": "f1", "direction": "minimize"},
                            {"metric": "f2", "direction": "minimize"}])
    done = _sweep(spec, f"{method} zdt1 seed {seed}")
    return hypervolume_2d([(t.values[0], t.values[1]) for t in done])


def sequential_hv(method: str, dims: int, trials: int, population: int, seed: int) -> float:
    import types

    import optuna

    from trial_runner.examples import synthetic

    sampler = optuna.samplers.RandomSampler(seed=seed) if method == "random" else \
        plain_sampler(method, seed, population_size=population)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)

    def objective(t: Any) -> tuple[float, float]:
        xs = {f"x{k + 1}": t.suggest_float(f"x{k + 1}", 0.0, 1.0) for k in range(dims)}
        r = synthetic.zdt1(types.SimpleNamespace(params=xs))  # type: ignore[arg-type]
        return r["f1"], r["f2"]

    study.optimize(objective, n_trials=trials)
    return hypervolume_2d([(t.values[0], t.values[1]) for t in study.trials
                           if t.values is not None])


# --------------------------------------------------------------------------- conditional


def family_space() -> dict[str, Any]:
    space: dict[str, Any] = {"family": {"type": "categorical", "choices": list(FAMILY_BOUNDS)}}
    for family, (prefix, n, (lo, hi)) in FAMILY_BOUNDS.items():
        for k in range(n):
            space[f"{prefix}{k + 1}"] = {"type": "float", "low": lo, "high": hi,
                                         "when": {"family": family}}
    return space


def sweeper_family(method: str, trials: int, workers: int, seed: int, delay: float) -> float:
    spec = _spec(f"bench-family-{method}", method, trials, workers, seed, delay, "family",
                 family_space())
    return min(float(t.values[0]) for t in _sweep(spec, f"family {method} seed {seed}"))


def define_by_run_family(trials: int, sampler: Any) -> float:
    """Plain Optuna, define-by-run: the objective suggests ``family``, then its parameters."""
    import types

    import optuna

    from trial_runner.examples import synthetic

    def objective(t: Any) -> float:
        family = t.suggest_categorical("family", list(FAMILY_BOUNDS))
        prefix, n, (lo, hi) = FAMILY_BOUNDS[family]
        params = {"family": family, **{f"{prefix}{k + 1}": t.suggest_float(f"{prefix}{k + 1}",
                                                                           lo, hi)
                                       for k in range(n)}}
        return synthetic.family(types.SimpleNamespace(params=params))  # type: ignore[arg-type]

    study = optuna.create_study(sampler=sampler)
    study.optimize(objective, n_trials=trials)
    return float(study.best_value)


# --------------------------------------------------------------------------- the section


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def _mean_regret(values: list[float], opt: float) -> float:
    return statistics.fmean(v - opt for v in values)


def _single(sizes: dict[str, Any], log: Callable[[str], None]) -> tuple[list[Row], Any]:
    dims, trials, seeds = sizes["m_dims"], sizes["m_trials"], sizes["m_seeds"]
    workers, delay = sizes["m_w"], sizes["m_delay"]
    functions = sizes.get("m_functions") or tuple(FUNCTIONS)
    best: dict[str, dict[str, dict[str, list[float]]]] = {
        f: {m: {"sweeper": [], "sequential": []} for m in SINGLE} for f in functions}
    for name in functions:
        for seed in range(seeds):
            log(f"methods: {name} {dims}-D seed {seed}: {', '.join(SINGLE)} through sweeper "
                f"W={workers} and sequentially")
            for method in SINGLE:
                best[name][method]["sweeper"].append(undisturbed(
                    partial(sweeper_best, method, name, dims, trials, workers, seed, delay),
                    f"methods {method} {name} seed {seed}", log))
                best[name][method]["sequential"].append(
                    sequential_best(name, dims, trials, plain_sampler(method, seed)))
    regret: dict[str, dict[str, dict[str, float]]] = {}
    for name in functions:
        opt = optimum(name, dims)
        norm = _mean_regret(best[name]["random"]["sequential"], opt) or 1.0
        regret[name] = {m: {who: _mean_regret(best[name][m][who], opt) / norm
                            for who in ("sweeper", "sequential")} for m in SINGLE}
    rows = []
    for method in SINGLE:
        par = statistics.fmean(regret[f][method]["sweeper"] for f in functions)
        seq = statistics.fmean(regret[f][method]["sequential"] for f in functions)
        detail = "; ".join(f"{f} {regret[f][method]['sweeper']:.2f}/"
                           f"{regret[f][method]['sequential']:.2f}" for f in functions)
        rows.append(Row(f"methods: {method}, sweeper W={workers} vs plain sequential ({dims}-D, "
                        f"{trials} trials, {seeds} seed(s))",
                        f"normalised regret {par:.3f} vs {seq:.3f} = {_ratio(par, seq)} "
                        f"({detail})", "-", "INFO",
                        {"method": method, "sweeper": par, "sequential": seq}))
    return rows, {"best_values": best, "normalised_regret": regret}


def _multi(sizes: dict[str, Any], log: Callable[[str], None]) -> tuple[list[Row], Any]:
    dims, trials, pop = sizes["mo_dims"], sizes["mo_trials"], sizes["mo_population"]
    seeds, workers, delay = sizes["mo_seeds"], sizes["m_w"], sizes["m_delay"]
    hv: dict[str, dict[str, list[float]]] = {m: {"sweeper": [], "sequential": []}
                                             for m in MULTI}
    hv["random"] = {"sequential": []}
    for seed in range(seeds):
        log(f"methods: zdt1 {dims}-D seed {seed}: nsga2, nsga3 through sweeper and "
            "sequentially")
        for method in MULTI:
            hv[method]["sweeper"].append(undisturbed(
                partial(sweeper_hv, method, dims, trials, pop, workers, seed, delay),
                f"methods {method} zdt1 seed {seed}", log))
            hv[method]["sequential"].append(sequential_hv(method, dims, trials, pop, seed))
        hv["random"]["sequential"].append(sequential_hv("random", dims, trials, pop, seed))
    rnd = statistics.fmean(hv["random"]["sequential"]) / ZDT1_TRUE_HV
    rows = []
    for method in MULTI:
        par = statistics.fmean(hv[method]["sweeper"]) / ZDT1_TRUE_HV
        seq = statistics.fmean(hv[method]["sequential"]) / ZDT1_TRUE_HV
        rows.append(Row(f"methods: {method} hypervolume, sweeper W={workers} vs plain "
                        f"sequential (ZDT1 {dims}-D, {trials} trials, population {pop}, "
                        f"{seeds} seed(s))",
                        f"{par:.3f} vs {seq:.3f} of the true front's = {_ratio(par, seq)} "
                        f"(random search {rnd:.3f})", "-", "INFO",
                        {"method": method, "sweeper": par, "sequential": seq,
                         "random": rnd}))
    return rows, {"hypervolume": hv, "true_hypervolume": ZDT1_TRUE_HV,
                  "reference": ZDT1_REFERENCE}


def _conditional(sizes: dict[str, Any], log: Callable[[str], None]) -> tuple[list[Row], Any]:
    import optuna

    trials, seeds, workers, delay = sizes["c_trials"], sizes["c_seeds"], sizes["m_w"], \
        sizes["m_delay"]
    best: dict[str, list[float]] = {"sweeper_tpe": [], "define_by_run_tpe": [],
                                    "random": []}
    for seed in range(seeds):
        log(f"methods: conditional family space seed {seed}: sweeper tpe W={workers}, plain "
            "define-by-run tpe, random")
        best["sweeper_tpe"].append(undisturbed(
            partial(sweeper_family, "tpe", trials, workers, seed, delay),
            f"methods family seed {seed}", log))
        tpe = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                         constant_liar=True)
        best["define_by_run_tpe"].append(define_by_run_family(trials, tpe))
        best["random"].append(define_by_run_family(trials,
                                                   optuna.samplers.RandomSampler(seed=seed)))
    norm = statistics.fmean(best["random"]) or 1.0  # the optimum is 0
    par = statistics.fmean(best["sweeper_tpe"]) / norm
    seq = statistics.fmean(best["define_by_run_tpe"]) / norm
    row = Row(f"methods: conditional space, sweeper when: tpe W={workers} vs plain "
              f"define-by-run TPE sequential ({trials} trials, {seeds} seed(s))",
              f"normalised regret {par:.3f} vs {seq:.3f} = {_ratio(par, seq)} (random 1.000)",
              "-", "INFO", {"sweeper": par, "define_by_run": seq})
    return [row], {"best_values": best}


def run(sizes: dict[str, Any], log: Callable[[str], None]) -> tuple[list[Row], dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rows: list[Row] = []
    raw: dict[str, Any] = {"dims": sizes["m_dims"], "trials": sizes["m_trials"],
                           "seeds": sizes["m_seeds"], "workers": sizes["m_w"],
                           "delay_s": sizes["m_delay"]}
    for part, fn in (("single", _single), ("multi", _multi), ("conditional", _conditional)):
        r, data = fn(sizes, log)
        rows += r
        raw[part] = data
    return rows, raw
