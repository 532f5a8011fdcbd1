"""The budget gate's read: what ``may_start`` costs in a sweep of many closed segments.

Every starter of new work (a runner before a new index, a promotion, a PBT interval; the
backends before they hand out an index) asks the gate. It reads ``IndexStore.ledger_sums``:
the database sums the closed segments and only the running trials' rows travel. Side by side
in one run, on the same sweep: that read (``sums``) against reading the whole ledger, every
segment's row, as ``sweeper status`` does and as the gate did before (``rows``), each turned
into the gate's balance. The sweep: ``gate_segments`` closed segments (5 per trial, every
ending) and 8 running trials, written in bulk, then analysed; PostgreSQL and SQLite. The
reads are timed interleaved, after one untimed read of each.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks.common import Row, fresh_database, undisturbed, verdict

ENDINGS = ("complete", "pruned", "paused", "failed", "preempted")
PER_TRIAL, RUNNING = 5, 8


def _spec(segments: int) -> Any:
    from benchmarks.sweeps import spec_dict
    from sweeper.spec import parse_spec_dict

    spec = spec_dict(
        "bench-gate", method="random", trials=segments // PER_TRIAL + RUNNING, parallelism=8,
        entrypoint="trial_runner.examples.synthetic:sleep", fixed={"duration": 0.0},
        parameters={"x": {"type": "float", "low": 0.0, "high": 1.0}})
    return parse_spec_dict({**spec, "budget": {"steps": 10**12}}, source="<benchmark>")


def build(url: str, segments: int) -> Any:
    """The sweep, its closed segments and running trials written in bulk; the Sweep."""
    from sweeper.study import create_or_resume, open_storage
    from sweeper.study.urls import driver_url

    sweep = create_or_resume(open_storage(url), _spec(segments))[0]
    rng = random.Random(segments)
    engine = sa.create_engine(driver_url(url))
    with engine.begin() as conn:
        ids = [r[0] for r in conn.execute(sa.text(
            "SELECT trial_id FROM trials WHERE study_id = :s ORDER BY number"),
            {"s": sweep.study_id})]
        done, running = ids[:-RUNNING], ids[-RUNNING:]
        for state, tids in (("COMPLETE", done), ("RUNNING", running)):
            conn.execute(sa.text(f"UPDATE trials SET state = '{state}' WHERE trial_id = :t"),
                         [{"t": t} for t in tids])
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        attrs = [{"t": t, "k": f"sweeper:usage:{uuid.uuid4().hex[:16]}", "v": json.dumps(
            {"wall_s": round(rng.uniform(1, 5000), 3), "gpus": 1.0, "cpus": 2.0,
             "steps": rng.randint(1, 500), "ending": ENDINGS[k], "by": "runner"})}
            for t in done for k in range(PER_TRIAL)]
        attrs += [{"t": t, "k": "sweeper:segment", "v": json.dumps(
            {"claim": uuid.uuid4().hex[:16], "gpus": 1.0, "cpus": 2.0, "from_step": 0,
             "started": (now - timedelta(seconds=60)).isoformat()})} for t in running]
        conn.execute(sa.text("INSERT INTO trial_user_attributes (trial_id, key, value_json) "
                             "VALUES (:t, :k, :v)"), attrs)
    with engine.connect() as conn:  # the statistics a live database's autovacuum keeps
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("ANALYZE"))
    engine.dispose()
    return sweep


def measure(url: str, segments: int, repeats: int) -> dict[str, Any]:
    """Milliseconds of each read, interleaved (``repeats`` each), and the gate's answer."""
    from sweeper.study.ledger import may_start, read_balance, read_ledger

    sweep = build(url, segments)
    store = sweep.storage
    reads: dict[str, Callable[[], Any]] = {
        "sums": lambda: read_balance(store.ledger_sums(sweep.study_id)),
        "rows": lambda: read_ledger(store.ledger(sweep.study_id)).balance}
    for read in reads.values():  # connections made, statements prepared: not timed
        read()
    times: dict[str, list[float]] = {k: [] for k in reads}
    for _ in range(repeats):
        for name, read in reads.items():
            t0 = time.perf_counter()
            read()
            times[name].append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    decision = may_start(sweep)
    gate_ms = (time.perf_counter() - t0) * 1000
    store.engine.dispose()
    return {"segments": segments, "gate_ms": gate_ms, "may_start": decision.may_start,
            **{f"{k}_ms": statistics.median(v) for k, v in times.items()},
            **{f"{k}_raw_ms": v for k, v in times.items()}}


def _on(kind: str, segments: int, repeats: int) -> dict[str, Any]:
    if kind == "postgresql":
        with fresh_database("gate") as (_, url):
            return measure(url, segments, repeats)
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-gate-") as tmp:
        return measure(f"sqlite:///{Path(tmp) / 'gate.db'}", segments, repeats)


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    repeats = sizes.get("gate_repeats", 5)
    raw: dict[str, list[dict[str, Any]]] = {}
    rows = []
    for kind in ("postgresql", "sqlite"):
        raw[kind] = []
        for n in sizes.get("gate_segments", (5_000, 20_000)):
            log(f"gate: {kind}, {n} closed segments")
            got = undisturbed(partial(_on, kind, n, repeats), f"gate {kind} {n}", log)
            raw[kind].append(got)
        big = raw[kind][-1]
        ratio = big["rows_ms"] / max(big["sums_ms"], 1e-9)
        rows.append(Row(
            f"budget gate read, {kind}: database sums vs every segment's row",
            ", ".join(f"{r['segments']:,} segments: sums {r['sums_ms']:.1f} ms, rows "
                      f"{r['rows_ms']:.1f} ms" for r in raw[kind]),
            f"sums >= 3x faster at {big['segments']:,}",
            verdict(ratio >= 3.0 and all(r["may_start"] for r in raw[kind])),
            {"ratio": ratio}))
    notes = ["gate: each ask of the budget gate (before a new index, a promotion, a PBT "
             "interval) reads `sums`; `rows` is the whole ledger, what `sweeper status` reads "
             "and what the gate read before. The sums still grow with the sweep (the database "
             "parses each closed segment's JSON at every ask), but nothing of the closed "
             "segments travels or is parsed in Python."]
    return rows, {"repeats": repeats, "notes": notes, **raw}
