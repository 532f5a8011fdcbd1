"""Item 3, connections: peak ``pg_stat_activity`` rows for the benchmark database, sampled every
50 ms, during a W-worker local sweep (orchestrator included) and during W plain-Optuna
processes calling ``study.optimize`` on one study. The local backend is told to start all W
workers at once (by default it starts one per core at a time), the worst case for connections:
every worker connects while the others are still starting; the row says how many started."""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ConnectionSampler,
    Row,
    fresh_database,
    launch_plain,
    optuna_storage,
    undisturbed,
    verdict,
    wait_all,
)
from benchmarks.sweeps import run_sweep, sleep_spec


def sweeper_peak(w: int, n: int, duration: float) -> dict[str, Any]:
    with fresh_database("conn") as (db, url), ConnectionSampler(db) as sampler:
        run = run_sweep(url, sleep_spec("bench-connections", n, duration, w), max_starting=w)
    return {"peak": sampler.peak, "samples": len(sampler.samples), "wall_s": run.wall_s,
            "workers_started": run.workers_started, "timeline": sampler.samples}


def plain_peak(w: int, n: int, duration: float) -> dict[str, Any]:
    import optuna

    with fresh_database("conn_plain") as (db, url), \
            tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        storage = optuna_storage(url)
        optuna.create_study(study_name="bench-plain", storage=storage)
        storage.engine.dispose()  # the harness holds no connection while sampling
        log = Path(tmp) / "plain.log"
        with ConnectionSampler(db) as sampler:
            t0 = time.perf_counter()
            shares = [n // w + (1 if k < n % w else 0) for k in range(w)]
            procs = [launch_plain({"kind": "optimize", "url": url, "study": "bench-plain",
                                   "n_trials": max(1, share), "duration": duration, "dims": 2,
                                   "seed": k}, log) for k, share in enumerate(shares)]
            wait_all(procs, "plain optuna connections", log)
            wall = time.perf_counter() - t0
    return {"peak": sampler.peak, "samples": len(sampler.samples), "wall_s": wall,
            "timeline": sampler.samples}


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    w, n, duration = sizes["conn_w"], sizes["conn_n"], sizes["conn_t"]
    log(f"connections: sweeper, W={w}, {n} trials of {duration}s")
    s = undisturbed(partial(sweeper_peak, w, n, duration), "connections sweeper", log)
    log(f"  peak {s['peak']} connections, {s['workers_started']} workers started")
    log(f"connections: plain Optuna, {w} processes")
    p = undisturbed(partial(plain_peak, w, n, duration), "connections plain", log)
    log(f"  peak {p['peak']} connections")
    all_started = s["workers_started"] == w
    row = Row(f"peak connections W={w}", f"sweeper {s['peak']} ({s['workers_started']} workers "
              f"+ orchestrator), plain Optuna {p['peak']}", f"<= W + 4 = {w + 4}",
              verdict(s["peak"] <= w + 4 and all_started),
              {"sweeper_peak": s["peak"], "plain_peak": p["peak"], "w": w,
               "sweeper_workers_started": s["workers_started"]})
    return [row], {"w": w, "n": n, "t_s": duration, "sweeper": s, "plain": p}
