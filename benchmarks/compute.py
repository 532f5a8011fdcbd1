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
"""

from __future__ import annotations

import os
import statistics
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
    verdict,
)
from benchmarks.compute_plain import plain_run

VARIANTS = ("none", "hyperband", "plain_hyperband", "asha", "pbt")
LABELS = {"none": "no pruning", "hyperband": "sweeper hyperband",
          "plain_hyperband": "plain Optuna HyperbandPruner", "asha": "sweeper promotion ASHA",
          "pbt": "sweeper PBT"}
#: The variants that run on a task (PBT's perturbations need a space a checkpoint can take).
TASK_VARIANTS = {"curve": VARIANTS, "digits": tuple(v for v in VARIANTS if v != "pbt")}
#: PBT's interval: its population decides after steps 3, 6, ... (ASHA's rungs: 1, 3, 9).
PBT_INTERVAL = 3
TASKS = {"curve": ("benchmarks.curves:curve", curves.CURVE_SPACE),
         "digits": ("benchmarks.curves:digits", curves.DIGITS_SPACE)}
#: The target: as good as the best tenth of the seed's configurations, fully trained.
TOP_FRACTION = 0.1
#: The issue's target: promotion ASHA's epochs to the target <= this times hyperband's.
TARGET_RATIO = 0.5

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


MIN_RESOURCE, REDUCTION_FACTOR = 1, 3
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
    elif variant == "asha":
        spec["scheduler"] = {"type": "asha", "mode": "promotion", **schedule(size["steps"])}
    elif variant == "pbt":
        spec["scheduler"] = {"type": "pbt", "max_resource": size["steps"],
                             "perturbation_interval": min(PBT_INTERVAL, size["steps"])}
    return spec


def trials_of(variant: str, size: dict[str, Any]) -> int:
    """The configurations a variant trains: N, or PBT's population of W."""
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
        if counts.get("COMPLETE", 0) + counts.get("PRUNED", 0) != trials_of(variant, size):
            raise Disturbed(f"compute {task} {variant} seed {seed}: trials by state {counts}")
        events = curves.read_ledger(ledger)
    return {"counts": counts, "wall_s": wall,
            "events": [[e.index, e.step, e.score] for e in events]}


# --------------------------------------------------------------------------- figures


def _events(run: dict[str, Any]) -> list[curves.Event]:
    return [curves.Event(float(k), i, s, q, q) for k, (i, s, q) in enumerate(run["events"])]


def figures(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per variant of one (task, seed): epochs in all, epochs to the target (None: not
    reached), the best score; the target from the ``none`` run."""
    full = curves.best_by_index(_events(runs["none"]))
    target = curves.top_fraction_score(full.values(), TOP_FRACTION)
    # The configurations that reach the target when trained to the end, best first.
    good = sorted((i for i, b in full.items() if b <= target), key=lambda i: full[i])
    out: dict[str, Any] = {"target": target, "good": good, "variants": {}}
    for variant, run in runs.items():
        events = _events(run)
        trained = curves.steps_per_index(events)
        out["variants"][variant] = {
            "epochs": len(events), "to_target": curves.epochs_to_target(events, target),
            "best": min((e.score for e in events), default=float("nan")),
            "counts": run["counts"], "good_epochs": [trained.get(i, 0) for i in good]}
    if "asha" in runs:  # compute at equal score: each variant's epochs to ASHA's best
        out["asha_best"] = asha_best = out["variants"]["asha"]["best"]
        for variant, run in runs.items():
            out["variants"][variant]["to_asha_best"] = curves.epochs_to_target(
                _events(run), asha_best)
    return out


def not_in_effect(per_seed: list[dict[str, Any]], variants: tuple[str, ...]) -> str | None:
    """Why the ASHA runs measured no promotion ASHA, when they did not: a sweeper whose spec
    takes ``scheduler:`` but whose runners pause nothing ends every trial COMPLETE (a working
    one ends the trials left paused at the sweep's end PRUNED)."""
    if "asha" not in variants:
        return None
    if any(f["variants"]["asha"]["counts"].get("PRUNED") for f in per_seed):
        return None
    return ("its spec takes scheduler: but no trial was paused: every trial "
            "trained to the end")


def _mean_to_target(per_seed: list[dict[str, Any]], variant: str) -> tuple[float, int]:
    """Mean epochs to the target over the seeds that reached it, and how many did."""
    hits = [f["variants"][variant]["to_target"] for f in per_seed
            if f["variants"][variant]["to_target"] is not None]
    return (statistics.fmean(hits) if hits else float("nan")), len(hits)


def rows_for(task: str, size: dict[str, Any], per_seed: list[dict[str, Any]],
             variants: tuple[str, ...], missing: str | None) -> list[Row]:
    n = len(per_seed)
    where = (f"{task}, N={size['trials']} trials x {size['steps']} steps, W={size['w']}, "
             f"{n} seed(s)")
    rows = []
    for variant in variants:
        to, hit = _mean_to_target(per_seed, variant)
        total = statistics.fmean(f["variants"][variant]["epochs"] for f in per_seed)
        rows.append(Row(f"compute: {LABELS[variant]} ({where})",
                        f"epochs to target {to:.0f} (reached in {hit}/{n} seeds); "
                        f"epochs in all {total:.0f}", "-", "INFO",
                        {"task": task, "variant": variant, "to_target": to, "reached": hit,
                         "epochs": total}))
    target = f"promotion ASHA <= {TARGET_RATIO}x hyperband's epochs to target"
    if missing is not None:
        rows.append(Row(f"compute: promotion ASHA vs hyperband ({where})",
                        f"not measured: this sweeper has no promotion ASHA yet ({missing})",
                        target, "INFO"))
        return rows
    asha_hit, hb_hit = _mean_to_target(per_seed, "asha")[1], \
        _mean_to_target(per_seed, "hyperband")[1]
    # Paired: the seeds on which both reached the target.
    both = [(f["variants"]["asha"]["to_target"], f["variants"]["hyperband"]["to_target"])
            for f in per_seed if f["variants"]["asha"]["to_target"] is not None
            and f["variants"]["hyperband"]["to_target"] is not None]
    asha, hb = sum(a for a, _ in both), sum(h for _, h in both)
    ratio = asha / hb if both else float("nan")
    ok = asha_hit >= hb_hit and ratio <= TARGET_RATIO
    rows.append(Row(f"compute: promotion ASHA vs hyperband ({where})",
                    f"{ratio:.2f}x on the {len(both)} seed(s) both reached it ({asha} vs {hb} "
                    f"epochs); reached in {asha_hit}/{n} vs {hb_hit}/{n} seeds", target,
                    verdict(ok), {"task": task, "ratio": ratio, "paired_seeds": len(both)}))
    return rows


def _per_seed(per_seed: list[dict[str, Any]], variant: str, key: str) -> str:
    def fmt(x: Any) -> str:
        return "-" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)

    return "/".join(fmt(f["variants"][variant].get(key)) for f in per_seed)


def notes_for(task: str, per_seed: list[dict[str, Any]], variants: tuple[str, ...],
              missing: str | None) -> list[str]:
    """What the rows do not show: every seed's figures, and compute at ASHA's own score."""
    targets = "/".join(f"{f['target']:.3f}" for f in per_seed)
    parts = [f"{LABELS[v]} {_per_seed(per_seed, v, 'to_target')} of "
             f"{_per_seed(per_seed, v, 'epochs')} (best {_per_seed(per_seed, v, 'best')})"
             for v in variants]
    out = [f"compute {task}: target per seed (validation loss as good as the top "
           f"{TOP_FRACTION:.0%} of the no-pruning run's configurations) {targets}; per seed, "
           "epochs to the target of epochs in all (best loss reached): " + "; ".join(parts)
           + "."]
    out.append(f"compute {task}: the configurations that reach the target when trained to "
               "the end (best first; seeds split by /) were trained for these epochs: "
               + "; ".join(f"{LABELS[v]} " + " / ".join(
                   ",".join(map(str, f["variants"][v]["good_epochs"])) for f in per_seed)
                   for v in variants if v not in ("none", "pbt")) + ".")
    if missing is not None:
        out.append(f"compute {task}: promotion ASHA not judged: {missing}.")
    elif "asha" in variants:
        best = "/".join(f"{f['asha_best']:.3f}" for f in per_seed)
        out.append(f"compute {task}: at promotion ASHA's own best loss (per seed {best}), "
                   "epochs to reach it: " + "; ".join(
                       f"{LABELS[v]} {_per_seed(per_seed, v, 'to_asha_best')}"
                       for v in variants) + ".")
        out.append(why(task, per_seed))
    if "pbt" in variants:
        out.append(pbt_note(task, per_seed))
    return out


def pbt_note(task: str, per_seed: list[dict[str, Any]]) -> str:
    """PBT against the stopping pruner, from the figures: what it spent and reached."""
    def total(v: str) -> int:
        return sum(f["variants"][v]["epochs"] for f in per_seed)

    both = [(f["variants"]["pbt"]["to_target"], f["variants"]["hyperband"]["to_target"])
            for f in per_seed if f["variants"]["pbt"]["to_target"] is not None
            and f["variants"]["hyperband"]["to_target"] is not None]
    hits = sum(f["variants"]["pbt"]["to_target"] is not None for f in per_seed)
    paired = (f"{sum(a for a, _ in both) / sum(h for _, h in both):.2f}x sweeper hyperband's "
              f"epochs to the target on the {len(both)} seed(s) both reached it"
              if both else "no seed where both reached it")
    return (f"compute {task}, PBT: a population of W trained {total('pbt')} epochs in all "
            f"({total('pbt') / total('hyperband'):.2f}x sweeper hyperband's "
            f"{total('hyperband')}) and reached the target in {hits}/{len(per_seed)} seeds; "
            f"{paired}. PBT searches from W starting points by copying and perturbing, so it "
            "reaches the target only when the population's neighbourhood holds it.")


def why(task: str, per_seed: list[dict[str, Any]]) -> str:
    """The verdict explained from the figures: what ASHA spent, and what became of the
    configurations that would have reached the target."""
    def total(v: str, key: str) -> int:
        return sum(f["variants"][v][key] for f in per_seed)

    def to_end(v: str) -> tuple[int, int]:
        full = max(max(f["variants"]["none"]["good_epochs"]) for f in per_seed)
        eps = [e for f in per_seed for e in f["variants"][v]["good_epochs"]]
        return sum(e == full for e in eps), len(eps)

    (a_end, good), (h_end, _) = to_end("asha"), to_end("hyperband")
    hits = sum(f["variants"]["asha"]["to_target"] is not None for f in per_seed)
    return (f"compute {task}, why: over the seeds promotion ASHA trained {total('asha', 'epochs')} "
            f"epochs in all, {total('asha', 'epochs') / total('hyperband', 'epochs'):.2f}x "
            f"sweeper hyperband's {total('hyperband', 'epochs')}, and reached the target in "
            f"{hits}/{len(per_seed)} seeds. Of the {good} configurations that reach the target "
            f"when trained to the end, ASHA trained {a_end} to the end and hyperband {h_end}: "
            "ASHA ranks every configuration at each rung's step and lets the top "
            f"1/{REDUCTION_FACTOR} go on, hyperband's brackets give some configurations more "
            "steps before their first cut. A sweep of N "
            "configurations ends when nothing is promotable, so ASHA spends its few epochs and "
            "stops rather than search on.")


def summarise(task: str, sized: dict[str, Any], per_seed: list[dict[str, Any]],
              variants: tuple[str, ...], missing: str | None
              ) -> tuple[list[Row], list[dict[str, Any]], list[str]]:
    """Rows, per-seed figures and notes of one task from its runs (``[{"runs": ...}]`` per
    seed): everything derived, so a saved JSON can be summarised again."""
    per_seed = [{**figures(s["runs"]), "runs": s["runs"]} for s in per_seed]
    idle = missing or not_in_effect(per_seed, variants)
    return (rows_for(task, sized, per_seed, variants, idle), per_seed,
            notes_for(task, per_seed, variants, idle))


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
            runs = {v: undisturbed(partial(one_run, task, v, sized, seed),
                                   f"compute {task} {v} seed {seed}", log) for v in variants}
            per_seed.append({"runs": runs})
        task_rows, per_seed, notes = summarise(task, sized, per_seed, variants, missing)
        rows += task_rows
        raw["notes"] += notes
        raw["tasks"][task] = per_seed
    raw["notes"].append("A larger run: `python -m benchmarks.run --full --only compute` (both "
                        "tasks N=81, 10 seeds).")
    return rows, raw
