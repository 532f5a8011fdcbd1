"""Item 2, scaling with study size.

* Enqueue: create a sweep whose plan is a grid of ``enqueue_n`` points (sweeper's bulk enqueue
  under the study lock) against a loop of ``study.enqueue_trial`` doing the same work (params
  plus the index tag). A loop shorter than ``enqueue_n`` is extrapolated linearly, which
  favours the loop: each ``enqueue_trial`` counts the study's trials, so it slows down as the
  study grows.
* Latency in a study of ``small`` and of ``large`` trials (all COMPLETE but the few being
  claimed, and kept at that size): a runner finding and claiming its index
  (``trial_runner.runner.acquire``) and its tell; plain Optuna's ``ask``/``tell`` with the cached
  storage as the baseline ratio. The two sizes are measured interleaved, one operation each in
  turn, so machine noise hits both alike.
"""

from __future__ import annotations

import math
import time
from functools import partial
from typing import Any

import sqlalchemy as sa

from benchmarks.common import (
    Row,
    fresh_database,
    optuna_storage,
    summary_ms,
    undisturbed,
    verdict,
)


def grid_spec(name: str, n: int) -> dict[str, Any]:
    """A two-parameter integer grid of exactly ``n`` points (a x b, a the largest divisor of n
    not above sqrt(n))."""
    from benchmarks.sweeps import spec_dict

    a = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return spec_dict(name, method="grid", trials=None, parallelism=1,
                     entrypoint="trial_runner.examples.synthetic:sleep",
                     fixed={"duration": 0.0},
                     parameters={"x1": {"type": "int", "low": 0, "high": a - 1},
                                 "x2": {"type": "int", "low": 0, "high": n // a - 1}})


# --------------------------------------------------------------------------- enqueue


def enqueue_sweeper(n: int) -> dict[str, Any]:
    from sweeper.spec import parse_spec_dict
    from sweeper.study import create_or_resume
    from sweeper.study.sql import open_sql_store

    spec = parse_spec_dict(grid_spec("bench-enqueue", n), source="<benchmark>")
    with fresh_database("enqueue") as (_, url):
        storage = open_sql_store(url)
        t0 = time.perf_counter()
        sweep, _ = create_or_resume(storage, spec)
        wall = time.perf_counter() - t0
        waiting = storage.state_counts(sweep.study_id).get("WAITING", 0)
        storage.close()
    if waiting != n:
        raise RuntimeError(f"bulk enqueue: expected {n} WAITING trials, got {waiting}")
    return {"n": n, "wall_s": wall}


def enqueue_loop(n_plan: int, n_loop: int) -> dict[str, Any]:
    import optuna

    from sweeper.protocol import INDEX_ATTR
    from sweeper.space import planned_sets
    from sweeper.spec import parse_spec_dict

    spec = parse_spec_dict(grid_spec("bench-enqueue", n_plan), source="<benchmark>")
    with fresh_database("enqueue_loop") as (_, url):
        storage = optuna_storage(url)
        study = optuna.create_study(study_name="bench-enqueue-loop", storage=storage)
        sets = planned_sets(spec)
        t0 = time.perf_counter()
        for _ in range(n_loop):
            i, params = next(sets)
            study.enqueue_trial(params, user_attrs={INDEX_ATTR: i})
        wall = time.perf_counter() - t0
        storage.engine.dispose()
    return {"n": n_loop, "wall_s": wall, "per_trial_ms": wall / n_loop * 1000.0,
            "extrapolated_to": n_plan, "extrapolated_wall_s": wall / n_loop * n_plan,
            "extrapolated": n_loop < n_plan}


# --------------------------------------------------------------------------- latency


def _complete_all_but(conn: sa.Connection, study_id: int, keep_numbers: list[int]) -> None:
    """Turn every trial of the study except ``keep_numbers`` into a COMPLETE trial with a value
    (what a study looks like late in a sweep; a grid trial's params are stored when it is
    enqueued), in a few set-based statements."""
    keep = list(keep_numbers) or [-1]
    conn.execute(sa.text(
        "UPDATE trials SET state = 'COMPLETE', datetime_start = now() at time zone 'utc', "
        "datetime_complete = now() at time zone 'utc' "
        "WHERE study_id = :s AND NOT (number = ANY(:keep))"), {"s": study_id, "keep": keep})
    conn.execute(sa.text(
        "INSERT INTO trial_values (trial_id, objective, value, value_type) "
        "SELECT trial_id, 0, random(), 'FINITE' FROM trials "
        "WHERE study_id = :s AND state = 'COMPLETE'"), {"s": study_id})


class _Study:
    """One database holding a sweeper sweep and a plain-Optuna study of ``n`` trials each, kept
    at exactly ``n`` trials while being measured: sweeper claims and tells one of a few WAITING
    indexes spread over the study, which is then put back to WAITING; plain Optuna asks (a new
    trial) and tells, and that trial is then deleted. The resets are not timed."""

    POOL = 10

    def __init__(self, url: str, n: int) -> None:
        import optuna

        from sweeper.spec import parse_spec_dict
        from sweeper.study import create_or_resume
        from sweeper.study.sql import open_sql_store

        self.n = n
        pool = min(self.POOL, n)
        self.indexes = sorted({int((k + 0.5) * n / pool) for k in range(pool)})
        self.storage = open_sql_store(url)
        spec = parse_spec_dict(grid_spec("bench-claim", n), source="<benchmark>")
        self.sweep, _ = create_or_resume(self.storage, spec)
        plain_spec = parse_spec_dict(grid_spec("bench-plain", n), source="<benchmark>")
        plain_sweep, _ = create_or_resume(self.storage, plain_spec)
        with self.storage.engine.begin() as conn:
            _complete_all_but(conn, self.sweep.study_id, self.indexes)
            _complete_all_but(conn, plain_sweep.study_id, [])
        self.plain_storage = optuna_storage(url)
        self.plain = optuna.load_study(study_name="bench-plain", storage=self.plain_storage,
                                       sampler=optuna.samplers.RandomSampler(seed=0))
        self.claim: list[float] = []
        self.tell: list[float] = []
        self.ask: list[float] = []
        self.plain_tell: list[float] = []
        self.cold_ask_s = 0.0
        self._k = 0

    def sweeper_op(self, timed: bool) -> None:
        from optuna.trial import TrialState

        from sweeper.spec.registry import make_pruner, make_sampler
        from sweeper.study.sql.trials import attach_trial
        from trial_runner.finish import tell_state
        from trial_runner.runner import Claimed, RunnerSettings, acquire

        index = self.indexes[self._k % len(self.indexes)]
        self._k += 1
        t0 = time.perf_counter()
        got = acquire(self.sweep, index, RunnerSettings())
        t1 = time.perf_counter()
        if not isinstance(got, Claimed):
            raise RuntimeError(f"index {index} could not be claimed: {got}")
        trial_id = got.trial_id
        spec = self.sweep.spec
        study = self.sweep.study(sampler=make_sampler(spec, index), pruner=make_pruner(spec))
        number = attach_trial(study, trial_id)
        t2 = time.perf_counter()
        tell_state(study, trial_id, TrialState.COMPLETE, [float(index)], number=number)
        t3 = time.perf_counter()
        if timed:
            self.claim.append(t1 - t0)
            self.tell.append(t3 - t2)
        with self.storage.engine.begin() as conn:
            for sql in ("DELETE FROM trial_values WHERE trial_id = :t",
                        "DELETE FROM trial_heartbeats WHERE trial_id = :t",
                        "UPDATE trials SET state = 'WAITING', datetime_start = NULL, "
                        "datetime_complete = NULL WHERE trial_id = :t"):
                conn.execute(sa.text(sql), {"t": trial_id})

    def plain_op(self, timed: bool) -> None:
        t0 = time.perf_counter()
        trial = self.plain.ask()
        t1 = time.perf_counter()
        self.plain.tell(trial, 1.0)
        t2 = time.perf_counter()
        if timed:
            self.ask.append(t1 - t0)
            self.plain_tell.append(t2 - t1)
        else:
            self.cold_ask_s = t1 - t0
        from sweeper._optuna_compat import trial_id_of

        with self.storage.engine.begin() as conn:
            for table in ("trial_values", "trial_params", "trial_user_attributes",
                          "trial_system_attributes", "trial_intermediate_values",
                          "trial_heartbeats", "trials"):
                conn.execute(sa.text(f"DELETE FROM {table} WHERE trial_id = :t"),
                             {"t": trial_id_of(trial)})

    def close(self) -> None:
        self.storage.close()
        self.plain_storage.engine.dispose()


def latency(small: int, large: int, samples: int, log: Any) -> dict[str, Any]:
    with fresh_database("claim_small") as (_, url_small), \
            fresh_database("claim_large") as (_, url_large):
        log(f"scaling: preparing studies of {small} and {large} trials")
        studies = [_Study(url_small, small), _Study(url_large, large)]
        try:
            for s in studies:  # first use of each connection and cache: not timed
                s.sweeper_op(timed=False)
                s.plain_op(timed=False)
            log(f"scaling: {samples} claims + tells and asks + tells per size, interleaved")
            for _ in range(samples):
                for s in studies:
                    s.sweeper_op(timed=True)
                    s.plain_op(timed=True)
        finally:
            for s in studies:
                s.close()
    out: dict[str, Any] = {}
    for s in studies:
        out[str(s.n)] = {"claim_ms": summary_ms(s.claim), "tell_ms": summary_ms(s.tell),
                         "plain_ask_ms": summary_ms(s.ask),
                         "plain_tell_ms": summary_ms(s.plain_tell),
                         "plain_first_ask_ms": s.cold_ask_s * 1000.0,
                         "raw_claim_s": s.claim, "raw_tell_s": s.tell,
                         "raw_plain_ask_s": s.ask, "raw_plain_tell_s": s.plain_tell}
    return out


# --------------------------------------------------------------------------- item


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    n_plan, n_loop = sizes["enqueue_n"], sizes["enqueue_loop_n"]
    log(f"scaling: bulk enqueue of {n_plan:,} grid points")
    bulk = undisturbed(partial(enqueue_sweeper, n_plan), "enqueue sweeper", log)
    log(f"  {bulk['wall_s']:.2f}s")
    log(f"scaling: enqueue_trial loop of {n_loop:,} points"
        + (f" (extrapolated to {n_plan:,})" if n_loop < n_plan else ""))
    loop = undisturbed(partial(enqueue_loop, n_plan, n_loop), "enqueue loop", log)
    log(f"  {loop['wall_s']:.2f}s ({loop['per_trial_ms']:.2f} ms per trial)")
    speedup = loop["extrapolated_wall_s"] / bulk["wall_s"]
    how = f"extrapolated from {n_loop:,}" if loop["extrapolated"] else "measured"
    rows = [Row(f"enqueue {n_plan:,} grid points",
                f"sweeper {bulk['wall_s']:.2f}s vs enqueue_trial loop "
                f"{loop['extrapolated_wall_s']:.1f}s ({how}) = {speedup:.0f}x faster",
                ">= 20x faster", verdict(speedup >= 20),
                {"sweeper_s": bulk["wall_s"], "loop_s": loop["extrapolated_wall_s"],
                 "loop_measured_n": n_loop, "loop_extrapolated": loop["extrapolated"],
                 "speedup": speedup})]

    small, large = sizes["latency_sizes"]
    lat = undisturbed(partial(latency, small, large, sizes["latency_samples"], log), "latency",
                      log)
    s, g = lat[str(small)], lat[str(large)]

    def ratio(key: str, q: str) -> float:
        return float(g[key][q] / s[key][q])

    label = f"{large:,}/{small:,} trials"
    for q in ("p50", "p95"):
        r = ratio("claim_ms", q)
        rows.append(Row(f"claim latency {q} {label}",
                        f"{g['claim_ms'][q]:.2f} / {s['claim_ms'][q]:.2f} ms = {r:.2f}",
                        "<= 1.5", verdict(r <= 1.5), {"ratio": r, "large_ms": g["claim_ms"][q],
                                                      "small_ms": s["claim_ms"][q]}))
    for key, name in (("tell_ms", "sweeper tell"), ("plain_ask_ms", "plain Optuna ask"),
                      ("plain_tell_ms", "plain Optuna tell")):
        r50, r95 = ratio(key, "p50"), ratio(key, "p95")
        rows.append(Row(f"{name} latency {label}",
                        f"p50 {g[key]['p50']:.2f} / {s[key]['p50']:.2f} ms = {r50:.2f}; "
                        f"p95 {g[key]['p95']:.2f} / {s[key]['p95']:.2f} ms = {r95:.2f}",
                        "(baseline)" if "plain" in key else "-", "INFO",
                        {"ratio_p50": r50, "ratio_p95": r95}))
    rows.append(Row(f"plain Optuna first ask (cold cache) {label}",
                    f"{g['plain_first_ask_ms']:.0f} / {s['plain_first_ask_ms']:.0f} ms", "-",
                    "INFO", {"large_ms": g["plain_first_ask_ms"],
                             "small_ms": s["plain_first_ask_ms"]}))
    return rows, {"enqueue": {"sweeper": bulk, "loop": loop}, "latency": lat}
