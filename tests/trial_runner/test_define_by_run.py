"""Define-by-run: ctx.suggest_* adds parameters in user code for adaptive methods (after the
YAML's, a retry gets the same values); for planned methods it is a configuration error that
says why, and `sweeper run` stops with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.cli import cli
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec, write_spec
from trial_runner.context import TrialContext
from trial_runner.runner import RunnerSettings, run_index

SPACE = {"optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
         "momentum": {"type": "float", "low": 0.0, "high": 0.99, "when": {"optimizer": "sgd"}}}


def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=2.0,
                          checkpoint_root=tmp_path / "ckpt")


def ported(ctx: TrialContext) -> float:
    assert "optimizer" in ctx.params  # the YAML's parameters come first
    lr = ctx.suggest_float("lr", 1e-4, 1e-1, log=True)
    units = ctx.suggest_int("units", 8, 64, step=8)
    act = ctx.suggest_categorical("act", ["relu", "gelu"])
    assert ctx.params["lr"] == lr and ctx.params["units"] == units and ctx.params["act"] == act
    if ctx.attempt == 0 and ctx.index == 1:
        raise RuntimeError("first attempt dies")
    return lr * units + (act == "gelu")


def test_adaptive_trials_get_the_codes_parameters_and_retries_keep_them(
        sqlite_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url),
                                make_spec(method="tpe", parameters=SPACE, trials=3))
    for index in range(3):
        run_index(sweep, index, ported, settings(tmp_path))
    retried = run_index(sweep, 1, ported, settings(tmp_path))
    assert retried.state == "COMPLETE"
    trials = sweep.study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 3
    for t in done:
        assert {"lr", "units", "act", "optimizer"} <= set(t.params)
        assert ("momentum" in t.params) == (t.params["optimizer"] == "sgd")
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1
    again = next(t for t in done if t.user_attrs["sweeper:index"] == 1)
    assert again.params == failed[0].params  # the retry asked for the same values


@pytest.mark.parametrize("method", ["grid", "random", "qmc"])
def test_planned_methods_refuse_suggest_with_the_reason(sqlite_url: str, tmp_path: Path,
                                                        method: str) -> None:
    space = {"optimizer": SPACE["optimizer"]}
    sweep, _ = create_or_resume(open_storage(sqlite_url),
                                make_spec(method=method, parameters=space, trials=2))
    out = run_index(sweep, 0, ported, settings(tmp_path))
    assert (out.state, out.exit_code) == ("FAIL", protocol.EXIT_CONFIG)
    reason = sweep.study().trials[out.trial_number].user_attrs["sweeper:fail_reason"]
    assert reason == (f"ctx.suggest_*('lr') needs an adaptive method (tpe, gp, cmaes, nsga2, "
                      f"nsga3): {method} sets are planned up front from the spec's parameters, "
                      "so declare 'lr' under parameters: instead")


def test_sweeper_run_stops_a_grid_that_suggests_with_one_line(sqlite_url: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dbr.py").write_text("def train(ctx):\n"
                                     "    return ctx.suggest_float('lr', 0.001, 0.1)\n")
    path = write_spec(tmp_path, name="dbr", trial={"entrypoint": "dbr:train", "retries": 2})
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", sqlite_url])
    assert result.exit_code == 2
    assert "ctx.suggest_*('lr') needs an adaptive method" in result.stderr.splitlines()[-1]


def test_plan_leaves_inactive_parameters_out(tmp_path: Path) -> None:
    path = write_spec(tmp_path, method="grid", parameters={
        "optimizer": SPACE["optimizer"],
        "momentum": {"type": "float", "values": [0.5, 0.9], "when": {"optimizer": "sgd"}}})
    result = CliRunner().invoke(cli, ["plan", str(path), "--format", "json"])
    sets = json.loads(result.stdout)["sets"]
    assert [s["params"] for s in sets] == [{"optimizer": "sgd", "momentum": 0.5},
                                           {"optimizer": "sgd", "momentum": 0.9},
                                           {"optimizer": "adam"}]
    table = CliRunner().invoke(cli, ["plan", str(path)]).stdout.splitlines()
    assert table[0].split() == ["JOB_ID", "optimizer", "momentum"]
    assert table[-1] == "2       adam"
