"""Item 4, duplicates: a grid of side x side points run by W workers. Executed trials (finished
trials, i.e. objective calls) per grid point, and distinct points covered, for sweeper (one
enqueued trial per index, claimed atomically) and for Optuna's GridSampler in W processes
(which documents that parallel workers may evaluate a point more than once)."""

from __future__ import annotations

import json
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.common import (
    Row,
    fresh_database,
    launch_plain,
    optuna_storage,
    undisturbed,
    verdict,
    wait_all,
)
from benchmarks.sweeps import run_sweep, spec_dict


def _executed(url: str, study: str) -> dict[str, Any]:
    """Finished trials (they ran the objective) and the distinct parameter sets among them."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://", 1))
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT t.trial_id, t.state, p.param_name, p.param_value FROM trials t "
            "JOIN studies s ON s.study_id = t.study_id "
            "LEFT JOIN trial_params p ON p.trial_id = t.trial_id "
            "WHERE s.study_name = :n"), {"n": study}).all()
    engine.dispose()
    params: dict[int, dict[str, float]] = {}
    states: dict[int, str] = {}
    for tid, state, name, value in rows:
        states[tid] = str(state)
        if name is not None:
            params.setdefault(tid, {})[name] = value
    finished = [t for t, s in states.items() if s in ("COMPLETE", "PRUNED", "FAIL")]
    distinct = {json.dumps(params.get(t, {}), sort_keys=True) for t in finished}
    by_state: dict[str, int] = {}
    for s in states.values():
        by_state[s] = by_state.get(s, 0) + 1
    return {"executed": len(finished), "distinct": len(distinct), "by_state": by_state}


def _sweeper(grid: dict[str, list[int]], w: int, duration: float) -> dict[str, Any]:
    with fresh_database("dup") as (_, url):
        spec = spec_dict("bench-duplicates", method="grid", trials=None, parallelism=w,
                         entrypoint="trial_runner.examples.synthetic:sleep",
                         fixed={"duration": duration},
                         parameters={k: {"type": "int", "values": v} for k, v in grid.items()})
        run_sweep(url, spec)
        return _executed(url, "bench-duplicates")


def _plain(grid: dict[str, list[int]], w: int, duration: float) -> dict[str, Any]:
    import optuna

    points = len(grid["x1"]) * len(grid["x2"])
    with fresh_database("dup_plain") as (_, url), \
            tempfile.TemporaryDirectory(prefix="sweeper-bench-") as tmp:
        storage = optuna_storage(url)
        optuna.create_study(study_name="bench-grid", storage=storage)
        storage.engine.dispose()
        log = Path(tmp) / "plain.log"
        procs = [launch_plain({"kind": "grid", "url": url, "study": "bench-grid", "grid": grid,
                               "n_trials": points, "duration": duration}, log)
                 for _ in range(w)]
        wait_all(procs, "plain grid", log)
        return _executed(url, "bench-grid")


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    side, w, duration = sizes["dup_side"], sizes["dup_w"], sizes["dup_t"]
    points = side * side
    grid = {"x1": list(range(side)), "x2": list(range(side))}

    log(f"duplicates: sweeper grid of {points} points, W={w}")
    s = undisturbed(partial(_sweeper, grid, w, duration), "duplicates sweeper", log)
    log(f"  executed {s['executed']}, distinct {s['distinct']}")
    log(f"duplicates: plain GridSampler, {w} processes")
    p = undisturbed(partial(_plain, grid, w, duration), "duplicates plain", log)
    log(f"  executed {p['executed']}, distinct {p['distinct']}")

    rs, rp = s["executed"] / points, p["executed"] / points
    row = Row(f"duplicates: {points}-point grid, W={w}",
              f"sweeper {rs:.3f} ({s['executed']} runs, {s['distinct']} distinct); GridSampler "
              f"{rp:.3f} ({p['executed']} runs, {p['distinct']} distinct)", "exactly 1.000",
              verdict(s["executed"] == points and s["distinct"] == points),
              {"sweeper_ratio": rs, "plain_ratio": rp, "points": points})
    return [row], {"points": points, "w": w, "t_s": duration, "sweeper": s, "plain": p}
