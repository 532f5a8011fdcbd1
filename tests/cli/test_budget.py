"""A budget through the CLI: `run` stops starting work once it is spent and says so as its
last line (exit code as for a stop rule), `status` shows what was spent, on what, in money,
what is left and that the sweep ended on its budget, and the same spec with a larger budget
goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from tests.support.helpers import write_spec

OBJECTIVE = """
def train(ctx):
    for step in range(1, 6):
        ctx.report(step, loss=1.0 / step)
    if ctx.params["n"] < 0:
        raise ValueError("bad")
    return float(ctx.index)
"""


def _spec(tmp_path: Path, steps: int, **kw: object) -> Path:
    return write_spec(tmp_path, name="spend", method="random", trials=8, parallelism=1,
                      trial={"entrypoint": "spendobj:train", "retries": 0},
                      parameters={"n": {"type": "int", "low": 1, "high": 8}},
                      budget={"steps": steps}, cost={"per_cpu_hour": 0.05}, **kw)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spendobj.py").write_text(OBJECTIVE)
    return tmp_path


def test_run_stops_on_the_budget_status_shows_it_and_a_larger_one_goes_on(
        here: Path, storage_url: str) -> None:
    path = _spec(here, 12)
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", storage_url])
    assert result.exit_code == 0, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("stopped: stop rule budget fired at "), last
    assert "budget spent: 15 steps spent of 12 steps" in last
    assert last.endswith("5 of 8 indexes not finished (a larger budget in the spec, run "
                         "again, runs them)")

    status = CliRunner().invoke(cli, ["status", "spend", "--storage", storage_url])
    assert status.exit_code == 0, status.output
    lines = status.stdout.splitlines()
    spent = next(line for line in lines if line.startswith("spent: "))
    assert "15 steps" in spent and "USD" in spent and "CPU-hours" in spent
    assert "preempted 0 GPU-hours, 0 steps" in spent
    budget = next(line for line in lines if line.startswith("budget: "))
    assert budget.startswith("budget: 12 steps (steps, on_exhausted: finish); 15 steps spent")
    assert budget.endswith("; 0 steps left")
    assert any(line.startswith("the sweep ended on its budget: budget spent: ")
               for line in lines)

    record = json.loads(CliRunner().invoke(cli, ["status", "spend", "--storage", storage_url,
                                                 "--format", "json"]).stdout)
    spending = record["spending"]
    assert spending["ended_on_budget"] is True and spending["currency"] == "USD"
    assert spending["budget"]["left"] == 0 and spending["budget"]["spent"] == 15
    assert spending["totals"]["finished"]["steps"] == 15
    totals = spending["totals"]["spent"]
    assert totals["cost"] == pytest.approx(totals["cpu_hours"] * 0.05) and totals["cost"] > 0
    usage = [i["usage"]["finished"]["steps"] for i in record["per_index"]]
    assert usage == [5, 5, 5, 0, 0, 0, 0, 0]

    exported = json.loads(CliRunner().invoke(
        cli, ["export", "spend", "--storage", storage_url, "--format", "json"]).stdout)
    assert sorted(t["usage"]["steps"] for t in exported["trials"] if t["usage"]["segments"]) \
        == [5, 5, 5]

    # resume without the spec keeps the budget: nothing starts
    again = CliRunner().invoke(cli, ["resume", "spend", "--storage", storage_url])
    assert again.exit_code == 0 and "is stopped: stop rule budget fired" in again.stderr
    # the spec with a larger budget raises it: the sweep goes on, to the new budget
    larger = CliRunner().invoke(cli, ["run", str(_spec(here, 27)), "--storage", storage_url])
    assert larger.exit_code == 0, larger.output
    assert "budget spent: 30 steps spent of 27 steps" in larger.stderr.strip().splitlines()[-1]
    # and large enough, to its end
    done = CliRunner().invoke(cli, ["run", str(_spec(here, 1000)), "--storage", storage_url])
    assert done.exit_code == 0, done.output
    final = json.loads(CliRunner().invoke(cli, ["status", "spend", "--storage", storage_url,
                                                "--format", "json"]).stdout)
    assert final["finished_indexes"] == 8 and final["spending"]["ended_on_budget"] is False
    assert final["spending"]["totals"]["spent"]["steps"] == 40


def test_a_budget_spent_before_anything_finished_says_so(here: Path, sqlite_url: str) -> None:
    path = write_spec(here, name="spend", method="random", trials=4, parallelism=1,
                      trial={"entrypoint": "spendobj:train", "retries": 0},
                      parameters={"n": {"type": "int", "low": -3, "high": -1}},
                      budget={"steps": 3}, stop={"max_failed_trials": 0})
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", sqlite_url])
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: stopped: stop rule budget fired at "), result.output
    assert "budget spent: 5 steps spent of 3 steps, before any trial finished" in last
    assert result.exit_code == 1  # as for a stop rule: an index failed for good
