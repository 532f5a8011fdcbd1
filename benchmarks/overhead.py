"""Item 1, overhead: N fixed-duration trials, W workers. Wall time of a sweeper sweep (local
backend) against the ideal N*t/W and against plain Optuna (W processes calling
``study.optimize`` on one shared study in the same PostgreSQL)."""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Disturbed,
    Row,
    fresh_database,
    launch_plain,
    median,
    optuna_storage,
    undisturbed,
    verdict,
    wait_all,
)
from benchmarks.sweeps import run_sweep, sleep_spec


def sweeper_wall(n: int, duration: float, workers: int) -> dict[str, Any]:
    with fresh_database("overhead") as (_, url):
        run = run_sweep(url, sleep_spec("bench-overhead", n, duration, workers))
    if run.counts.get("COMPLETE") != n:
        raise Disturbed(f"sweeper overhead run: expected {n} COMPLETE, got {run.counts}")
    return {"wall_s": run.wall_s, "counts": run.counts, "workers_started": run.workers_started,
            "phases": run.phases}


def plain_wall(n: int, duration: float, workers: int) -> dict[str, Any]:
    """From creating the study to the last of W ``study.optimize`` processes exiting; trials
    split as evenly as N/W allows."""
    import optuna

    with fresh_database("overhead_plain") as (_, url), \
            tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        log = Path(tmp) / "plain.log"
        t0 = time.perf_counter()
        storage = optuna_storage(url)
        optuna.create_study(study_name="bench-plain", storage=storage)
        shares = [n // workers + (1 if k < n % workers else 0) for k in range(workers)]
        procs = [launch_plain({"kind": "optimize", "url": url, "study": "bench-plain",
                               "n_trials": share, "duration": duration, "dims": 2, "seed": k},
                              log) for k, share in enumerate(shares) if share]
        wait_all(procs, "plain optuna overhead", log)
        wall = time.perf_counter() - t0
        complete = len(optuna.load_study(study_name="bench-plain", storage=storage).get_trials(
            deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
        storage.engine.dispose()
    if complete != n:
        raise Disturbed(f"plain overhead run: expected {n} COMPLETE trials, got {complete}")
    return {"wall_s": wall}


def target(n: int) -> float:
    """The issue's bound on wall / ideal: 1.05x for short sweeps, 1.02x from 2,000 trials
    (the start-up of the workers is spread over more trials)."""
    return 1.02 if n >= 2000 else 1.05


def warm_up() -> None:
    """Open an Optuna storage once, untimed, so that neither side's first timed run pays this
    process's one-time imports (alembic, Optuna's ORM models: about 0.25 s). Both sides' first
    storage open needs them; without this the first sweeper run paid them (it runs first) and
    plain Optuna's parent found them loaded. Process start-up is the startup section's item."""
    with fresh_database("overhead_warm") as (_, url):
        optuna_storage(url).engine.dispose()


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    duration, workers, repeats = sizes["t"], sizes["w"], sizes["repeats"]
    warm_up()
    rows: list[Row] = []
    raw: dict[str, Any] = {"t_s": duration, "workers": workers, "repeats": repeats, "runs": []}
    for n in sizes["n"]:
        ideal = n * duration / workers
        sweeper_runs: list[float] = []
        plain_runs: list[float] = []
        for rep in range(repeats):
            # Alternate the order so slow phases of a noisy machine hit both sides alike.
            order = ("sweeper", "plain") if rep % 2 == 0 else ("plain", "sweeper")
            for who in order:
                log(f"overhead: N={n} t={duration}s W={workers}: {who} run {rep + 1}/{repeats}")
                if who == "sweeper":
                    r = undisturbed(partial(sweeper_wall, n, duration, workers),
                                    f"overhead sweeper N={n}", log)
                    sweeper_runs.append(r["wall_s"])
                else:
                    r = undisturbed(partial(plain_wall, n, duration, workers),
                                    f"overhead plain N={n}", log)
                    plain_runs.append(r["wall_s"])
                raw["runs"].append({"n": n, "who": who, "repeat": rep, **r})
                log(f"  wall {r['wall_s']:.2f}s (ideal {ideal:.2f}s)")
        s, p = median(sweeper_runs), median(plain_runs)
        per_trial_ms = (s - ideal) * workers / n * 1000.0
        figures = {"n": n, "t_s": duration, "workers": workers, "ideal_s": ideal,
                   "sweeper_wall_s": s, "plain_wall_s": p, "sweeper_over_ideal": s / ideal,
                   "plain_over_ideal": p / ideal, "sweeper_over_plain": s / p,
                   "sweeper_overhead_per_trial_ms": per_trial_ms,
                   "plain_overhead_per_trial_ms": (p - ideal) * workers / n * 1000.0,
                   "sweeper_runs_s": sweeper_runs, "plain_runs_s": plain_runs}
        label = f"overhead N={n} t={duration:g}s W={workers}"
        bound = target(n)
        rows.append(Row(f"{label}: vs ideal", f"sweeper {s:.2f}s / ideal {ideal:.2f}s = "
                        f"{s / ideal:.3f}x (plain {p / ideal:.3f}x)", f"<= {bound:.2f}x ideal",
                        verdict(s / ideal <= bound), figures))
        rows.append(Row(f"{label}: vs plain Optuna", f"sweeper {s:.2f}s / plain {p:.2f}s = "
                        f"{s / p:.3f}", "<= 1.00", verdict(s / p <= 1.00), figures))
    return rows, raw
