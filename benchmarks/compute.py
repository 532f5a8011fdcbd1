"""Compute to a target (issue 29): total training epochs, the GPU-time proxy, that a sweep
spends before some trial reaches a given validation score, at W parallel workers, over seeds.

Variants, each on the same N configurations (sweeper's planned ``random`` sets of the seed,
enqueued in the same order for plain Optuna), so they differ only in how they spend epochs:

* ``none``: sweeper, ``pruner: {type: none}``: every trial trains to the end;
* ``hyperband``: sweeper's stopping pruner, ``pruner: {type: hyperband, min_resource,
  max_resource, reduction_factor}``;
* ``plain hyperband``: plain Optuna, ``HyperbandPruner`` with the same settings, W processes on
  one study (``benchmarks.compute_plain``);
* ``asha``: sweeper's promotion ASHA, ``scheduler: {type: asha, mode: promotion, min_resource,
  max_resource, reduction_factor}``: a trial pauses at a rung with its checkpoint and is resumed
  when promoted. Where this sweeper has no ``scheduler:`` yet, its row says so (INFO);
* ``pbt`` (the synthetic task only): ``scheduler: {type: pbt, max_resource,
  perturbation_interval}``, a population of W members (the first W of the same
  configurations) trained at once; at each interval's end the bottom quarter copies a top
  member's checkpoint and perturbs its params. Its cost is at most W x max_resource epochs
  whatever it copies. Not on digits: that space has the hidden width, which a copied
  checkpoint fixes (PBT perturbs what a checkpoint can take: learning rates, dropout).

Tasks (``benchmarks.curves``): the synthetic learning-curve family, and the digits MLP. Epochs
are counted by the trials themselves (a ledger line per step trained, see
``benchmarks.curves``). The target of a (task, seed) is the top-10 % score of the ``none`` run
of that seed: the ceil(N/10)-th best, over its N trials, of the best score a trial reached at
any step (synthetic: the noise-free curve; digits: the reported validation loss). So ``none``
always reaches it, and "reaching the same score" means finding a configuration as good as the
best tenth of the sample.

The real runs cost minutes a seed, so the section runs few; the simulated rows (INFO) replay
the same rules (``benchmarks.schedule_sim``) on more seeds' configurations: the curve task's
with its noise, the digits task's on their learning curves, trained in this process with the
example's own code (``benchmarks.digits_curves``). Each comes with a check against the real
runs of the seeds both have.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import curves
from benchmarks.common import (
    Disturbed,
    Row,
    fresh_database,
    undisturbed,
)
from benchmarks.compute_figures import (
    MIN_RESOURCE,
    POOL_FACTOR,
    REDUCTION_FACTOR,
    TOP_FRACTION,
    VARIANTS,
    SimTask,
    budget_rows,
    curve_check,
    figures,
    ledger_row,
    not_in_effect,
    notes_for,
    rows_for,
    sim_schedule,
    simulated,
    simulation_check,
)
from benchmarks.compute_plain import plain_run
from benchmarks.digits_curves import DigitsCurves
from benchmarks.schedule_sim import Measure, curve_measures, rung_steps

#: The variants that run on a task (PBT's perturbations need a space a checkpoint can take).
TASK_VARIANTS = {"curve": VARIANTS, "digits": tuple(v for v in VARIANTS if v != "pbt")}
#: PBT's interval: its population decides after steps 3, 6, ... (ASHA's rungs: 1, 3, 9).
PBT_INTERVAL = 3
TASKS = {"curve": ("benchmarks.curves:curve", curves.CURVE_SPACE),
         "digits": ("benchmarks.curves:digits", curves.DIGITS_SPACE)}

#: Workers W, seconds per synthetic step, and per task: trials N, steps (= max_resource), seeds.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"w": 2, "step_s": 0.0, "tasks": {"curve": {"trials": 9, "steps": 9, "seeds": 1}}},
    "quick": {"w": 8, "step_s": 0.02,
              "tasks": {"curve": {"trials": 81, "steps": 27, "seeds": 1}}},
    "default": {"w": 8, "step_s": 0.05,
                "tasks": {"curve": {"trials": 81, "steps": 27, "seeds": 3},
                          "digits": {"trials": 27, "steps": 27, "seeds": 2}}},
    "full": {"w": 8, "step_s": 0.05,
             "tasks": {"curve": {"trials": 81, "steps": 27, "seeds": 10},
                       "digits": {"trials": 81, "steps": 27, "seeds": 10}}},
}


def task_size(size: dict[str, Any], task: str) -> dict[str, Any]:
    """One task's figures of a size: trials, steps, seeds, w, step_s."""
    return {"w": size["w"], "step_s": size["step_s"], **size["tasks"][task]}


#: The rungs' steps below 27 (for the note on how predictive they are).
RUNGS = (1, 3, 9)


def how(steps: int) -> str:
    rho = ", ".join(f"{r:.2f}" for r in curves.rank_agreement(RUNGS, steps))
    return ("compute: how it is measured. Every variant trains the same N configurations "
            "(sweeper's planned random sets of the seed; plain Optuna gets them enqueued in the "
            f"same order), W workers, min_resource {MIN_RESOURCE}, reduction_factor "
            f"{REDUCTION_FACTOR}, max_resource = the task's steps. Epochs are counted by the "
            "trials (a ledger line per step trained; a promoted trial resumes after its "
            "checkpoint, so its steps count once); epochs to the target are all trials' steps, "
            "in time order, until one reaches it. PBT (synthetic task) trains a population of "
            f"W of those configurations, perturbing every {PBT_INTERVAL} steps; a copied "
            "checkpoint carries the donor's loss, which then moves under the member's new "
            "params. The target of a seed: as good as the top "
            f"{TOP_FRACTION:.0%} of the no-pruning run's configurations (best loss at any step; "
            "synthetic: the noise-free curve, digits: the reported validation loss; digits "
            "reports epoch e as step e - 1, so its rungs fall after 2, 4 and 10 epochs). The "
            "synthetic family (benchmarks/curves.py) has a known optimum (loss "
            f"{curves.BEST_FLOOR} at lr 1e-2, width 1, no warm-up); its ranking at steps "
            f"{', '.join(map(str, RUNGS))} agrees with that at step {steps} with Spearman "
            f"{rho} (2000 random configurations): early ranking is only partly predictive.")


def schedule(steps: int) -> dict[str, int]:
    return {"min_resource": MIN_RESOURCE, "max_resource": steps,
            "reduction_factor": REDUCTION_FACTOR}


def spec_for(task: str, variant: str, size: dict[str, Any], seed: int,
             ledger: str) -> dict[str, Any]:
    """The sweep of one (task, variant, seed); plain Optuna's runs enqueue its sets."""
    entrypoint, space = TASKS[task]
    fixed: dict[str, Any] = {"steps": size["steps"], "step_s": size["step_s"], "seed": seed,
                             "ledger": ledger}
    if task == "digits":
        fixed = {"epochs": size["steps"], "seed": seed, "ledger": ledger, "threads": 1,
                 "save_model": False}
    spec: dict[str, Any] = {
        "name": f"compute-{task}-{variant.replace('_', '-')}", "method": "random",
        "trials": trials_of(variant, size), "parallelism": size["w"], "seed": seed,
        "objective": {"metric": "val_loss", "direction": "minimize"},
        "trial": {"entrypoint": entrypoint, "fixed": fixed, "retries": 0},
        "parameters": space, "pruner": {"type": "none"}}
    if variant in ("hyperband", "plain_hyperband"):
        spec["pruner"] = {"type": "hyperband", **schedule(size["steps"])}
    elif variant in ("asha", "budget_asha"):
        spec["scheduler"] = {"type": "asha", "mode": "promotion", **schedule(size["steps"])}
    if variant == "budget_asha":  # what hyperband spent on the seed (run() sets it)
        spec["budget"] = {"steps": int(size.get("budget", size["trials"] * size["steps"]))}
    elif variant == "pbt":
        spec["scheduler"] = {"type": "pbt", "max_resource": size["steps"],
                             "perturbation_interval": min(PBT_INTERVAL, size["steps"])}
    return spec


def trials_of(variant: str, size: dict[str, Any]) -> int:
    """The configurations a variant trains: N, PBT's population of W, or budgeted ASHA's pool
    (of which its budget trains the first few)."""
    if variant == "budget_asha":
        return POOL_FACTOR * int(size["trials"])
    return min(size["w"], size["trials"]) if variant == "pbt" else int(size["trials"])


def asha_available() -> str | None:
    """None when this sweeper takes ``scheduler: {type: asha, mode: promotion}``; else why not."""
    from sweeper.errors import SweeperError
    from sweeper.spec import parse_spec_dict

    try:
        parse_spec_dict(spec_for("curve", "asha", task_size(SIZES["tiny"], "curve"), 0,
                                 "/tmp"), source="<probe>")
    except SweeperError as e:
        return str(e).splitlines()[0][:200]
    return None


@contextmanager
def _checkpoints_in(root: Path) -> Any:
    """The local backend's checkpoint root for one run (gone with the run's temp dir)."""
    from sweeper import protocol

    before = os.environ.get(protocol.ENV_CHECKPOINT_DIR)
    os.environ[protocol.ENV_CHECKPOINT_DIR] = str(root)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(protocol.ENV_CHECKPOINT_DIR, None)
        else:
            os.environ[protocol.ENV_CHECKPOINT_DIR] = before


def _sweeper_run(spec: dict[str, Any], tmp: Path) -> dict[str, int]:
    from benchmarks.sweeps import run_sweep

    with fresh_database("compute") as (_, url), _checkpoints_in(tmp / "checkpoints"):
        return run_sweep(url, spec, log_root=tmp).counts


def one_run(task: str, variant: str, size: dict[str, Any], seed: int) -> dict[str, Any]:
    """Run one sweep; its trials by state and its ledger, in time order."""
    with tempfile.TemporaryDirectory(prefix="sweeper-compute-") as tmp:
        ledger = Path(tmp) / "ledger"
        ledger.mkdir()
        spec = spec_for(task, variant, size, seed, str(ledger))
        started = time.perf_counter()
        counts = plain_run(spec, Path(tmp)) if variant == "plain_hyperband" \
            else _sweeper_run(spec, Path(tmp))
        wall = time.perf_counter() - started
        ended = counts.get("COMPLETE", 0) + counts.get("PRUNED", 0)
        # budgeted ASHA: the indexes its budget did not reach stay WAITING (never started)
        if ended != trials_of(variant, size) and not (
                variant == "budget_asha" and ended
                and sum(counts.values()) == trials_of(variant, size)):
            raise Disturbed(f"compute {task} {variant} seed {seed}: trials by state {counts}")
        events = curves.read_ledger(ledger)
    return {"counts": counts, "wall_s": wall,
            "events": [[e.index, e.step, e.score] for e in events]}


def ledger_check(size: dict[str, Any]) -> dict[str, Any]:
    """A real local sweep of the curve task (no pruning, 2W trials): the CPU-hours its ledger
    holds against the sum of its attempts' durations (datetime_start to datetime_complete)
    times the CPUs each held. CPU-hours: this machine has no GPU; the ledger computes GPU-hours
    with the same wall time times the GPUs held."""
    from sweeper.spec import parse_spec_dict
    from sweeper.study import load_sweep, open_storage
    from sweeper.study.ledger import sweep_ledger

    # steps of 0.05 s at least: the trials last long enough for a 1 % comparison
    sized = {**size, "trials": 2 * size["w"], "step_s": max(size["step_s"], 0.05)}
    with tempfile.TemporaryDirectory(prefix="sweeper-compute-") as tmp:
        spec = spec_for("curve", "none", sized, 0, tmp)
        spec["name"] = "compute-ledger"
        cpus = parse_spec_dict(spec, source="<compute>").trial.resources.cpu or 1
        with fresh_database("ledger") as (_, url), _checkpoints_in(Path(tmp) / "checkpoints"):
            from benchmarks.sweeps import run_sweep

            run_sweep(url, spec, log_root=Path(tmp))
            storage = open_storage(url)
            try:
                sweep = load_sweep(storage, spec["name"])
                ledger = sweep_ledger(sweep).totals.spent.cpu_hours
                trials = [t for t in sweep.study().trials if t.datetime_complete is not None]
            finally:
                storage.close()
    seconds = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in trials
                  if t.datetime_start is not None)
    return {"unit": "CPU-hours", "per": "CPUs", "w": size["w"], "trials": len(trials),
            "ledger": ledger, "durations": seconds * cpus / 3600}


def summarise(task: str, sized: dict[str, Any], per_seed: list[dict[str, Any]],
              variants: tuple[str, ...], missing: str | None
              ) -> tuple[list[Row], list[dict[str, Any]], list[str]]:
    """Rows, per-seed figures and notes of one task from its runs (``[{"runs": ...}]`` per
    seed): everything derived, so a saved JSON can be summarised again."""
    per_seed = [{**figures(s["runs"]), "runs": s["runs"]} for s in per_seed]
    idle = missing or not_in_effect(per_seed, variants)
    return (rows_for(task, sized, per_seed, variants, idle), per_seed,
            notes_for(task, per_seed, variants, idle))


#: Seeds of the simulated rows (at least the real runs' own): the curve task's, and the
#: digits task's (whose curves are trained: about 20 s a seed here).
SIM_SEEDS = {"curve": 20, "digits": 10}


def task_configs(task: str, size: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """The configurations the runs of ``task`` and ``seed`` train (sweeper's planned random
    sets), ``size["trials"]`` of them."""
    from sweeper.space import random_point
    from sweeper.spec import parse_spec_dict

    spec = parse_spec_dict(spec_for(task, "none", size, seed, "/tmp"), source="<compute>")
    return [random_point(spec, i) for i in range(spec.trials)]


def curve_configs(size: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """The configurations the curve runs of ``seed`` train."""
    return task_configs("curve", size, seed)


def _pool(size: dict[str, Any]) -> dict[str, Any]:
    """``size`` with budgeted ASHA's pool as its trials (whose first N are the others')."""
    return {**size, "trials": trials_of("budget_asha", size)}


def curve_sim(size: dict[str, Any]) -> SimTask:
    """The curve task as the simulation replays it: the seeds' configurations and noise."""
    pool = _pool(size)

    def measures(seed: int) -> tuple[Measure, Measure]:
        return curve_measures(task_configs("curve", pool, seed), seed)

    return SimTask("curve", functools.cache(measures), size["trials"], pool["trials"],
                   size["steps"], size["w"], where="on the seeds' own configurations and noise")


def digits_sim(size: dict[str, Any]) -> tuple[SimTask, DigitsCurves]:
    """The digits task as the simulation replays it: learning curves of the seeds'
    configurations, trained here (:mod:`benchmarks.digits_curves`) as far as a rule asks."""
    pool = _pool(size)

    def fixed(seed: int) -> dict[str, Any]:
        params = spec_for("digits", "none", size, seed, "/tmp")["trial"]["fixed"]
        return {k: v for k, v in params.items() if k != "ledger"}

    trained = DigitsCurves(functools.cache(partial(task_configs, "digits", pool)), fixed)
    rungs = ", ".join(map(str, rung_steps(0, sim_schedule(size["steps"], 1, offset=1))))
    where = (f"on learning curves of the seeds' own configurations: each trained in this "
             f"process with the digits example's own code (build and fit), continuously, "
             f"for as many of its {size['steps']} epochs as a rule asks (a real trial that is "
             "paused and resumed reseeds its dropout and batch order at the resume, so the "
             "replay of continuous curves approximates the promoted trials: see the check "
             f"against the real runs); the first bracket's rungs fall after epochs {rungs}, as "
             "digits reports epoch e as step e - 1; the budgeted rules' budget, the "
             "simulated sweeper hyperband's epochs, is counted in epochs (the real runs' gate "
             "counts sweeper's steps, one fewer than the epochs per configuration started)")
    return SimTask("digits", trained.measures, size["trials"], pool["trials"], size["steps"],
                   size["w"], offset=1, where=where), trained


def simulate(task: str, size: dict[str, Any], per_seed: list[dict[str, Any]],
             log: Callable[[str], None]) -> tuple[list[Row], list[str]]:
    """The simulated rows of ``task`` on ``SIM_SEEDS`` seeds' configurations (at least the
    real runs'), and the checks that the simulation reproduces the real runs."""
    seeds = max(SIM_SEEDS[task], size["seeds"])
    if task == "curve":
        sim = curve_sim(size)
        rows, notes = simulated(sim, seeds)
        return rows, [*notes, simulation_check(sim, per_seed)]
    sim, trained = digits_sim(size)
    log(f"compute: digits simulated on {seeds} seeds' learning curves")
    rows, notes = simulated(sim, seeds)
    spent = (f"compute digits, simulated: its curves took {trained.epochs} epochs of training "
             f"in {trained.seconds:.0f} s here ({seeds} seeds).")
    return rows, [*notes, spent, simulation_check(sim, per_seed), curve_check(sim, per_seed)]


def run(sizes: dict[str, Any], log: Callable[[str], None]) -> tuple[list[Row], dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    size = dict(SIZES[sizes.get("size", "default")])
    missing = asha_available()
    rows: list[Row] = []
    raw: dict[str, Any] = {"size": size, "variants": {}, "asha_missing": missing,
                           "tasks": {},
                           "notes": [how(task_size(size, "curve")["steps"])]}
    for task in size["tasks"]:
        per_seed, sized = [], task_size(size, task)
        variants = tuple(v for v in TASK_VARIANTS[task] if v != "asha" or missing is None)
        raw["variants"][task] = variants
        for seed in range(sized["seeds"]):
            log(f"compute: {task} seed {seed}: {', '.join(variants)}")
            runs: dict[str, Any] = {}
            for v in variants:  # in order: budgeted ASHA's budget is hyperband's spend
                at = {**sized, "budget": len(runs["hyperband"]["events"])} \
                    if v == "budget_asha" else sized
                runs[v] = undisturbed(partial(one_run, task, v, at, seed),
                                      f"compute {task} {v} seed {seed}", log)
            per_seed.append({"runs": runs})
            del runs  # (the budgeted run's budget came from this seed's hyperband run)
        task_rows, per_seed, notes = summarise(task, sized, per_seed, variants, missing)
        rows += task_rows
        if "budget_asha" in variants:
            rows += budget_rows(task, sized, per_seed)
        raw["notes"] += notes
        raw["tasks"][task] = per_seed
        if missing is None:
            sim_rows, sim_notes = simulate(task, sized, per_seed, log)
            rows += sim_rows
            raw["notes"] += sim_notes
    check = undisturbed(partial(ledger_check, task_size(size, "curve")), "compute ledger", log)
    raw["ledger"] = check
    rows.append(ledger_row(check))
    raw["notes"].append("A larger run: `python -m benchmarks.run --full --only compute` (both "
                        "tasks N=81, 10 seeds).")
    return rows, raw
