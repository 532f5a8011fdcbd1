"""The benchmark history lives in benchmarks/history.md, which no benchmark run writes; the
results page that ``make bench`` rewrites links it from the writer's own preamble, so a whole
run keeps the link (a run of some sections keeps the preamble as it is)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.run import markdown

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _result() -> dict[str, Any]:
    return {"command": "python -m benchmarks.run", "size": "default",
            "generated_at": "2026-11-23 09:24 UTC", "wall_s": 1.0, "rows": [],
            "machine": {"nproc": 2, "cpu_model": "AMD EPYC", "memory_gib": 23.5,
                        "platform": "Linux", "load_average_at_start": None},
            "versions": {"python": "3.11", "sweeper": "0.1.0", "optuna": "5.0.0",
                         "sqlalchemy": "2.1", "psycopg2": "2.9"}}


def test_a_whole_run_keeps_the_link_to_the_history() -> None:
    written = markdown(_result())
    assert "[benchmark history](history.md)" in written
    # The committed page starts the way the writer starts it: nothing hand-written to lose.
    preamble = written.split("\n- date:", 1)[0]
    assert (BENCH / "results.md").read_text().startswith(preamble)


def test_the_history_holds_the_runs() -> None:
    text = (BENCH / "history.md").read_text()
    assert text.startswith("# Benchmark history")
    assert "[run 15]" in text and "[run 8]" in text
