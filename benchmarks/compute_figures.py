"""The ``compute`` section's figures, from its runs' ledgers (``benchmarks.compute`` runs them):
per (task, seed) the target and each variant's epochs to it; the rows and their verdict; the
notes that say what the rows do not (every seed's figures, and why ASHA's verdict is what it
is)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks import curves, schedule_sim
from benchmarks.common import Row, verdict

#: ``budget_asha`` runs after ``hyperband``: its budget is what hyperband spent on the seed.
VARIANTS = ("none", "hyperband", "plain_hyperband", "asha", "budget_asha", "pbt")
LABELS = {"none": "no pruning", "hyperband": "sweeper hyperband",
          "plain_hyperband": "plain Optuna HyperbandPruner", "asha": "sweeper promotion ASHA",
          "budget_asha": "sweeper budgeted ASHA", "pbt": "sweeper PBT"}
#: Budgeted ASHA's pool: the configurations it may start, a multiple of N (the first N are
#: the other variants' own, in the same order); its budget in steps ends it long before.
POOL_FACTOR = 4
#: The ledger against the attempts' own durations: at most this relative difference.
LEDGER_TOLERANCE = 0.01
#: The target: as good as the best tenth of the seed's configurations, fully trained.
TOP_FRACTION = 0.1
#: The issue's target: promotion ASHA's epochs to the target <= this times hyperband's.
TARGET_RATIO = 0.5
MIN_RESOURCE, REDUCTION_FACTOR = 1, 3


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
    pbt_where = where.replace(f"N={size['trials']} trials", f"a population of {size['w']}")
    rows = []
    for variant in variants:
        to, hit = _mean_to_target(per_seed, variant)
        total = statistics.fmean(f["variants"][variant]["epochs"] for f in per_seed)
        rows.append(Row(f"compute: {LABELS[variant]} "
                        f"({pbt_where if variant == 'pbt' else where})",
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


def _median_to_target(per_seed: list[dict[str, Any]], variant: str) -> tuple[float, int]:
    """Median epochs to the target over the seeds that reached it, and how many did."""
    hits = [f["variants"][variant]["to_target"] for f in per_seed
            if f["variants"][variant]["to_target"] is not None]
    return (statistics.median(hits) if hits else float("nan")), len(hits)


def budget_rows(task: str, size: dict[str, Any], per_seed: list[dict[str, Any]]) -> list[Row]:
    """Budgeted ASHA (a steps budget equal to what sweeper hyperband spent on the seed,
    starting configurations from a pool of ``POOL_FACTOR`` x N until it is spent) against
    hyperband and plain Optuna: median epochs to the target, seeds that reached it, and the
    best loss when the budget is spent on the median seed."""
    n = len(per_seed)
    where = (f"{task}, N={size['trials']} x {size['steps']} steps, W={size['w']}, {n} "
             f"seed(s); budget = sweeper hyperband's epochs on the seed, pool {POOL_FACTOR}N")
    (b, b_hit), (hb, hb_hit), (pl, pl_hit) = (_median_to_target(per_seed, v) for v in
                                              ("budget_asha", "hyperband", "plain_hyperband"))
    ratio = b / hb if hb == hb and hb else float("nan")
    ok = b_hit >= hb_hit and ratio <= TARGET_RATIO and b <= pl
    best = {v: statistics.median(f["variants"][v]["best"] for f in per_seed)
            for v in ("budget_asha", "hyperband")}
    spent = statistics.median(f["variants"]["budget_asha"]["epochs"] for f in per_seed)
    return [
        Row(f"compute: budgeted ASHA, epochs to target ({where})",
            f"median {b:.0f} (reached in {b_hit}/{n} seeds); sweeper hyperband {hb:.0f} "
            f"({hb_hit}/{n}); plain Optuna HyperbandPruner {pl:.0f} ({pl_hit}/{n}); "
            f"{ratio:.2f}x hyperband's",
            f"<= {TARGET_RATIO}x sweeper hyperband's and <= plain Optuna's, in >= as many "
            "seeds as hyperband", verdict(ok),
            {"task": task, "ratio": ratio, "median": b, "reached": b_hit,
             "hyperband_reached": hb_hit}),
        Row(f"compute: budgeted ASHA, best loss when the budget is spent ({where})",
            f"median seed {best['budget_asha']:.4f} vs sweeper hyperband "
            f"{best['hyperband']:.4f} (budgeted ASHA trained {spent:.0f} epochs, median)",
            "as good as hyperband's or better (lower) on the median seed",
            verdict(best["budget_asha"] <= best["hyperband"]),
            {"task": task, **{f"best_{k}": v for k, v in best.items()}}),
    ]


def ledger_row(check: dict[str, Any]) -> Row:
    """The ledger of a real local sweep against its attempts' own durations (datetime_start
    to datetime_complete) times the GPUs (CPUs for CPU trials) each held."""
    unit = check["unit"]
    ledger, durations = check["ledger"], check["durations"]
    diff = abs(ledger - durations) / durations if durations else float("inf")
    return Row(f"compute: the {unit} ledger of a real local sweep ({check['trials']} trials, "
               f"W={check['w']}) against its attempts' durations x {check['per']}",
               f"ledger {ledger:.6f} vs durations {durations:.6f} {unit} ({diff:.2%} apart)",
               f"within {LEDGER_TOLERANCE:.0%}", verdict(diff <= LEDGER_TOLERANCE),
               {"ledger": ledger, "durations": durations, "difference": diff})


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
    if "budget_asha" in variants:
        out.append(budget_note(task, per_seed))
    return out


def budget_note(task: str, per_seed: list[dict[str, Any]]) -> str:
    """Budgeted ASHA's figures per seed, and what the comparison was tried with."""
    started = "/".join(str(sum(v for k, v in f["variants"]["budget_asha"]["counts"].items()
                               if k != "WAITING")) for f in per_seed)
    return (f"compute {task}, budgeted ASHA: per seed, epochs to the target "
            f"{_per_seed(per_seed, 'budget_asha', 'to_target')} (sweeper hyperband "
            f"{_per_seed(per_seed, 'hyperband', 'to_target')}) of epochs in all "
            f"{_per_seed(per_seed, 'budget_asha', 'epochs')} (its budget: hyperband's "
            f"{_per_seed(per_seed, 'hyperband', 'epochs')}, overshot by at most W trials' "
            f"steps as sweeper counts them: digits reports epoch e as step e - 1, so there a "
            f"configuration's first segment counts one step fewer than its epochs, and the "
            f"epochs exceed the budget by about the configurations started); configurations "
            f"started {started}. Its first N configurations are the "
            "other variants', in the same order, so until the N-th starts it is promotion ASHA; "
            "what it adds is the search after that, where ASHA without a budget ends. What was "
            "tried besides (simulated, see the simulated note): hyperband's brackets for the "
            "promotions, a larger first rung (min_resource 3), a pool of 8N instead of 4N (the "
            "same figures: the budget ends the search long before the pool).")


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
            "steps before their first cut. Where early ranking predicts the end poorly (see "
            "the Spearman figures above), a configuration that would reach the target is often "
            "cut at the first rung; a sweep of N configurations ends when nothing is "
            "promotable, so ASHA spends its few epochs and stops rather than search on. The "
            "simulated rows repeat the comparison over more seeds.")


# --------------------------------------------------------------------------- simulated

#: The simulated rules (``benchmarks.schedule_sim``): label -> (policy, brackets or None for
#: hyperband's own count).
SIMULATED = {"no pruning": ("none", 1), "sweeper successive_halving": ("stopping", 1),
             "sweeper hyperband": ("stopping", None), "sweeper promotion ASHA": ("promotion", 1)}
#: The targets of the simulated rows: as good as the top 10 % and the top 3 %.
SIM_FRACTIONS = (TOP_FRACTION, 0.03)


def sim_schedule(steps: int, brackets: int | None, min_resource: int = MIN_RESOURCE,
                 offset: int = 0) -> schedule_sim.Schedule:
    """The section's schedule; ``brackets`` None: as many as Optuna's HyperbandPruner makes;
    ``offset``: see :class:`benchmarks.schedule_sim.Schedule`."""
    one = schedule_sim.Schedule(min_resource, steps, REDUCTION_FACTOR)
    count = brackets or len(schedule_sim.rung_steps(0, one)) + 1  # a bracket per first rung
    return schedule_sim.Schedule(min_resource, steps, REDUCTION_FACTOR, count, offset)


@dataclass(frozen=True)
class SimTask:
    """A task as the simulation replays it: ``measures(seed)``, the (reported value, judged
    score) of the seed's pool of ``pool`` configurations, of which the fixed-N rules train the
    first ``n``; ``steps`` each, W ``workers``; ``offset``: see
    :class:`benchmarks.schedule_sim.Schedule`; ``where``: what the rows say of the task."""

    name: str
    measures: Callable[[int], tuple[schedule_sim.Measure, schedule_sim.Measure]]
    n: int
    pool: int
    steps: int
    workers: int
    offset: int = 0
    where: str = ""

    def schedule(self, brackets: int | None, min_resource: int = MIN_RESOURCE
                 ) -> schedule_sim.Schedule:
        return sim_schedule(self.steps, brackets, min_resource, self.offset)


#: The simulated budgeted rules: label -> (brackets (None: hyperband's count), min_resource).
#: Their budget is the simulated sweeper hyperband's epochs on the seed; their pool
#: ``POOL_FACTOR`` x N. The last two are what was tried besides sweeper's rule.
SIM_BUDGETED = {"sweeper budgeted ASHA": (1, MIN_RESOURCE),
                "budgeted ASHA with hyperband brackets (simulated only)": (None, MIN_RESOURCE),
                "budgeted ASHA with min_resource 3 (simulated only)": (1, 3)}


def _simulate_seed(task: SimTask, seed: int) -> dict[str, list[curves.Event]]:
    """Every simulated rule's events on one seed: the budgeted ones after hyperband's."""
    value, score = task.measures(seed)
    out = {label: schedule_sim.simulate(task.n, value, score, policy, task.schedule(brackets),
                                        task.workers)
           for label, (policy, brackets) in SIMULATED.items()}
    budget = len(out["sweeper hyperband"])
    for label, (brackets, first) in SIM_BUDGETED.items():
        out[label] = schedule_sim.simulate(task.pool, value, score, "promotion",
                                           task.schedule(brackets, first), task.workers, budget)
    return out


def sim_targets(task: SimTask, seed: int) -> list[float]:
    """Each of the seed's N configurations' best score at any step, trained to the end: what
    the seed's targets are the top fractions of (as the real runs' no-pruning run)."""
    score = task.measures(seed)[1]
    return [min(score(i, k) for k in range(1, task.steps + 1)) for i in range(task.n)]


def simulated(task: SimTask, seeds: int) -> tuple[list[Row], list[str]]:
    """Every simulated rule on ``seeds`` seeds of ``task`` (the configurations the real runs
    train, the budgeted rules' pool after them), per target: mean epochs to it and the seeds
    that reached it; the budgeted rules' medians (:func:`budget_rows`' figures) in a note."""
    to: dict[tuple[str, float], list[int | None]] = {}
    total: dict[str, list[int]] = {}
    best: dict[str, list[float]] = {}
    for seed in range(seeds):
        finals = sim_targets(task, seed)
        for label, events in _simulate_seed(task, seed).items():
            total.setdefault(label, []).append(len(events))
            best.setdefault(label, []).append(min(e.score for e in events))
            for frac in SIM_FRACTIONS:
                target = curves.top_fraction_score(finals, frac)
                to.setdefault((label, frac), []).append(curves.epochs_to_target(events, target))
    rows = [_simulated_row(task, to, total, frac, seeds) for frac in SIM_FRACTIONS]
    note = (f"compute{_of(task)}, simulated: the same rules replayed without processes or a "
            f"database (benchmarks/schedule_sim.py) {task.where}; epochs in all, mean: "
            + "; ".join(f"{k} {statistics.fmean(v):.0f}" for k, v in total.items())
            + ". Each cell is the mean epochs to the target over the seeds that reached it.")
    return rows, [note, _budget_note(task, to, best, seeds)]


def _of(task: SimTask) -> str:
    """The task in a simulated row's or note's name (the curve task's are the unnamed ones)."""
    return "" if task.name == "curve" else f" {task.name}"


def _simulated_row(task: SimTask, to: dict[tuple[str, float], list[int | None]],
                   total: dict[str, list[int]], frac: float, seeds: int) -> Row:
    """The row of one target: each rule's mean epochs to it, and promotion ASHA's against
    hyperband's on the seeds both reached it."""
    parts = []
    for label in total:
        hits = [x for x in to[(label, frac)] if x is not None]
        mean = statistics.fmean(hits) if hits else float("nan")
        parts.append(f"{label} {mean:.0f} ({len(hits)}/{seeds})")
    both = [(a, h) for a, h in zip(to[("sweeper promotion ASHA", frac)],
                                   to[("sweeper hyperband", frac)], strict=True)
            if a is not None and h is not None]
    ratio = sum(a for a, _ in both) / sum(h for _, h in both) if both else float("nan")
    return Row(f"compute, simulated: epochs to the top {frac:.0%} ({task.name}, N={task.n} x "
               f"{task.steps} steps, W={task.workers}, {seeds} seeds)",
               "; ".join(parts) + f"; promotion ASHA / hyperband {ratio:.2f}x on the "
               f"{len(both)} seeds both reached it", "-", "INFO",
               {"task": task.name, "fraction": frac, "ratio": ratio, "paired_seeds": len(both),
                "seeds": seeds})


def _budget_note(task: SimTask, to: dict[tuple[str, float], list[int | None]],
                 best: dict[str, list[float]], seeds: int) -> str:
    """The simulated budgeted rules as the real rows judge them: median epochs to the top
    10 %, seeds that reached it, the median seed's best loss."""
    def median_hits(label: str) -> str:
        hits = [x for x in to[(label, TOP_FRACTION)] if x is not None]
        return f"{statistics.median(hits) if hits else float('nan'):.0f} ({len(hits)}/{seeds})"

    labels = ["sweeper hyperband", "sweeper promotion ASHA", *SIM_BUDGETED]
    return (f"compute{_of(task)}, simulated, at equal budget (the budgeted rules get sweeper "
            "hyperband's "
            f"epochs on the seed, a pool of {POOL_FACTOR}N): median epochs to the top "
            f"{TOP_FRACTION:.0%} (seeds that reached it): "
            + "; ".join(f"{label} {median_hits(label)}" for label in labels)
            + "; best loss on the median seed: "
            + "; ".join(f"{label} {statistics.median(best[label]):.4f}" for label in labels)
            + ".")


def simulation_check(task: SimTask, per_seed: list[dict[str, Any]]) -> str:
    """Whether the simulation trains to the end the configurations the real ASHA runs did
    (a real trial trained to the end reports step ``steps - offset``)."""
    same = []
    for seed, f in enumerate(per_seed):
        real = {i for i, s, _ in f["runs"]["asha"]["events"] if s == task.steps - task.offset}
        value, score = task.measures(seed)
        sim = schedule_sim.trained_to_end(schedule_sim.simulate(
            task.n, value, score, "promotion", task.schedule(1), task.workers), task.steps)
        same.append(real == sim)
    given = "configurations and noise" if task.name == "curve" else "configurations' curves"
    return (f"compute {task.name}, simulation against the real runs: given each seed's {given}, "
            f"the simulated promotion ASHA trains to the end the same configurations "
            f"as the real one in {sum(same)}/{len(same)} seeds (real runs interleave steps by "
            "wall clock, the simulation by ticks, so a tie in time can order two reports "
            "differently).")


def curve_check(task: SimTask, per_seed: list[dict[str, Any]]) -> str:
    """How far the simulated curves are from what the real runs' trials reported: the
    no-pruning run's (trials never paused: the same training) and promotion ASHA's (a
    resumed trial reseeds, so its epochs after a resume differ)."""
    def apart(variant: str) -> list[float]:
        out = []
        for seed, f in enumerate(per_seed):
            score = task.measures(seed)[1]
            out += [abs(q - score(i, s + task.offset)) for i, s, q in f["runs"][variant]["events"]]
        return out

    none, asha = apart("none"), apart("asha")
    moved = sorted(d for d in asha if d > 1e-6)
    median = f"{statistics.median(moved):.4f}" if moved else "-"
    return (f"compute {task.name}, curves against the real runs: the no-pruning run's "
            f"{len(none)} reported losses differ from the simulated curves by at most "
            f"{max(none, default=float('nan')):.1e}; of promotion ASHA's {len(asha)}, "
            f"{len(asha) - len(moved)} are the curves' and {len(moved)} (after a resume: the "
            f"real trial reseeds its dropout and batch order there, the curve trains on) "
            f"differ by a median {median} (at most {max(moved, default=0.0):.4f}).")
