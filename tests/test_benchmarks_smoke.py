"""The benchmark harness at a tiny size: it runs every item against PostgreSQL and writes the
JSON and markdown it promises. No timing assertions: the figures are not checked, only that
they are there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import PG_ADMIN_URL, REPO

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SECTIONS = {"startup", "scaling", "duplicates", "connections", "overhead", "quality",
            "methods", "parallel", "proxy", "compute", "snapshots", "gate"}


def test_tiny_run_writes_every_item(pg_admin: sa.Engine, tmp_path: Path) -> None:
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    env = dict(os.environ, SWEEPER_BENCH_PG=PG_ADMIN_URL)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--tiny", "--out", str(out),
                           "--markdown", str(md)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    result = json.loads(out.read_text())
    assert result["size"] == "tiny"
    assert not result["errors"]
    assert set(result["sections"]) == SECTIONS
    for key in ("nproc", "cpu_model"):
        assert result["machine"][key]
    for key in ("python", "optuna", "sqlalchemy", "postgresql"):
        assert result["versions"][key]
    assert result["parameters"]["n"]

    rows = result["rows"]
    assert rows and all(r["status"] in ("PASS", "MISS", "INFO") for r in rows)
    targeted = [r for r in rows if r["status"] != "INFO"]
    assert {r["item"].split(":")[0].split(" ")[0] for r in targeted} >= {
        "overhead", "enqueue", "claim", "peak", "duplicates", "quality"}

    raw = {name: s["raw"] for name, s in result["sections"].items()}
    assert {r["who"] for r in raw["overhead"]["runs"]} == {"sweeper", "plain"}
    assert all(r["wall_s"] > 0 for r in raw["overhead"]["runs"])
    assert raw["scaling"]["enqueue"]["sweeper"]["wall_s"] > 0
    assert raw["startup"]["command_startup"]["beside_s"]  # a command trial beside the shim
    for size in raw["scaling"]["latency"].values():
        assert size["raw_claim_s"] and size["raw_plain_ask_s"]
    assert raw["connections"]["sweeper"]["timeline"] and raw["connections"]["plain"]["timeline"]
    # sweeper runs each grid point exactly once whatever the size (no timing involved).
    assert raw["duplicates"]["sweeper"]["executed"] == raw["duplicates"]["points"]
    assert raw["duplicates"]["sweeper"]["distinct"] == raw["duplicates"]["points"]
    proxied = raw["proxy"]["connections"]["proxied"]
    assert proxied["per_index"] == 1.0 and proxied["distinct"] == proxied["n"]
    assert raw["proxy"]["capacity"]["cpu_per_trial_s"] > 0
    assert set(raw["proxy"]["latency"]) == {"25", "400"}
    assert set(raw["quality"]["normalised_regret"]) == {
        "sphere", "rosenbrock", "rastrigin", "styblinski_tang"}
    # every method ran through sweeper and plain Optuna; nsga2/3 and the conditional space too
    methods = raw["methods"]
    assert set(methods["single"]["normalised_regret"]["sphere"]) == {
        "random", "qmc", "tpe", "gp", "cmaes"}
    assert all(len(v["sweeper"]) == len(v["sequential"]) == 1
               for v in methods["single"]["best_values"]["sphere"].values())
    assert set(methods["multi"]["hypervolume"]) == {"nsga2", "nsga3", "random"}
    assert len(methods["conditional"]["best_values"]["sweeper_tpe"]) == 1
    assert len([r for r in rows if r["item"].startswith("methods")]) == 8

    # the parallel price: every method, sweeper's and plain Optuna's parallel beside sequential
    par = raw["parallel"]["best_values"]["sphere"]
    assert {m: set(par[m]) for m in ("tpe", "gp", "cmaes")} == {
        m: {"sequential", "sweeper", "plain"} for m in ("tpe", "gp", "cmaes")}
    # a planned method is also run against its own plan at W=1 (the same points at any W)
    assert set(par["qmc"]) == {"sequential", "sweeper", "plain", "sweeper_sequential"}
    assert len([r for r in rows if r["item"].startswith("parallel price")]) == 4

    # compute: every variant trained the synthetic curves; no pruning trains every step once
    compute = raw["compute"]["tasks"]["curve"][0]
    size = raw["compute"]["size"]["tasks"]["curve"]
    assert compute["variants"]["none"]["epochs"] == size["trials"] * size["steps"]
    w = raw["compute"]["size"]["w"]
    for variant, figures in compute["variants"].items():
        # PBT: a population of W; budgeted ASHA: its pool, of which its budget trains a few
        trained = {"pbt": w, "budget_asha": 4 * size["trials"]}.get(variant, size["trials"])
        assert sum(figures["counts"].values()) == trained, variant
        assert 0 < figures["epochs"] <= trained * size["steps"], variant
    assert set(compute["variants"]) == {"none", "hyperband", "plain_hyperband", "asha",
                                        "budget_asha", "pbt"}
    # budgeted ASHA spends what hyperband spent, overshot by at most W trials' steps
    budget = compute["variants"]["hyperband"]["epochs"]
    assert compute["variants"]["budget_asha"]["epochs"] <= budget + w * size["steps"]
    assert raw["compute"]["ledger"]["ledger"] > 0

    text = md.read_text()
    assert "| item | measured | target | result |" in text
    assert "python -m benchmarks.run --tiny" in text
    assert "sweeper benchmarks, size tiny" in proc.stdout
