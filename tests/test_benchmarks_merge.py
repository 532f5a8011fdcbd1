"""A benchmark run of some sections (--only) replaces only their block in results.md."""

from __future__ import annotations

from typing import Any

from benchmarks.run import merge_sections


def _result(section: str, measured: str) -> dict[str, Any]:
    return {"command": "python -m benchmarks.run --only " + section, "size": "default",
            "generated_at": "2026-11-23 09:24 UTC",
            "machine": {"nproc": 2, "cpu_model": "AMD EPYC", "load_average_at_start": None},
            "versions": {"optuna": "5.0.0"},
            "sections": {section: {"wall_s": 12.0, "rows": [
                {"item": "methods: gp", "measured": measured, "target": "-",
                 "status": "INFO"}]}}}


def test_blocks_are_appended_then_replaced_and_the_rest_is_kept() -> None:
    previous = "# Benchmarks\n\n| item | measured | target | result |\n| a | 1 | - | PASS |\n"
    once = merge_sections(previous, _result("methods", "0.5 | 0.3"))
    assert once.startswith(previous.rstrip("\n"))
    assert "| methods: gp | 0.5 \\| 0.3 | - | INFO |" in once
    twice = merge_sections(once, _result("methods", "0.4"))
    assert twice.count("## Section `methods`") == 1
    assert "0.5 \\| 0.3" not in twice and "| methods: gp | 0.4 | - | INFO |" in twice
    assert twice.startswith(previous.rstrip("\n"))
