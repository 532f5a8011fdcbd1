"""`--set KEY=VALUE` on run, validate, plan and render: applied before validation, errors are
the usual one line naming --set, and what runs (and is stored) is the overridden spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.study import load_sweep, open_storage
from tests.support.helpers import write_spec


def sweeper(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_set_on_validate_plan_and_render(tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, name="over"))  # a grid of a (5 values) x b (2)
    ok = sweeper("validate", spec, "--set", "parameters.a={values: [0.5, 0.75]}",
                 "--set", "trial.fixed.epochs=1")
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.startswith("ok: over: grid, 4 indexes")

    plan = json.loads(sweeper("plan", spec, "--format", "json", "--set",
                              "parameters.b.choices=[z]").stdout)
    assert plan["indexes"] == 5 and {s["params"]["b"] for s in plan["sets"]} == {"z"}

    rendered = sweeper("render", spec, "--set", "parallelism=3",
                       "--set", "kubernetes.image=registry.example/t:1")
    assert rendered.exit_code == 0, rendered.output
    job = next(d for d in yaml.safe_load_all(rendered.stdout) if d["kind"] == "Job")
    assert job["spec"]["parallelism"] == 3
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/t:1"


@pytest.mark.parametrize(("args", "line"), [
    (["--set", "parallelism=0"], "{spec}: --set parallelism: must be >= 1, got 0"),
    (["--set", "trial.fixed.epochs"],
     "{spec}: --set 'trial.fixed.epochs': expected KEY=VALUE, e.g. --set "
     "trial.fixed.epochs=1"),
    (["--set", "trail.retries=1"],
     "{spec}: --set trail: unknown key 'trail'; did you mean 'trial'?"),
])
@pytest.mark.parametrize("command", ["validate", "plan", "render", "run"])
def test_a_bad_set_is_one_line_and_writes_nothing(tmp_path: Path, command: str,
                                                  args: list[str], line: str) -> None:
    spec = str(write_spec(tmp_path, name="bad-set"))
    url = f"sqlite:///{tmp_path / 'nothing.db'}"
    extra = ["--storage", url] if command == "run" else []
    result = sweeper(command, spec, *args, *extra)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["error: " + line.format(spec=spec)]
    assert not (tmp_path / "nothing.db").exists()


def test_run_stores_and_runs_the_overridden_spec(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 sqlite_url: str) -> None:
    monkeypatch.chdir(tmp_path)
    spec = str(write_spec(tmp_path, name="smoke", method="random"))  # 6 trials
    result = sweeper("run", spec, "--storage", sqlite_url, "--set", "trials=2",
                     "--set", "trial.fixed.epochs=1", "--set", "parallelism=1")
    assert result.exit_code == 0, result.output
    assert "smoke: random, 2 indexes, parallelism 1" in result.stderr
    sweep = load_sweep(open_storage(sqlite_url), "smoke")
    assert sweep.spec.trials == 2 and sweep.spec.trial.fixed["epochs"] == 1
    trials = sweep.study().get_trials()
    assert len(trials) == 2
    assert all(len(t.intermediate_values) == 1 for t in trials)  # one epoch each
    # The same overrides resume the same sweep; the file alone is a different spec.
    again = sweeper("run", spec, "--storage", sqlite_url, "--set", "trials=2",
                    "--set", "trial.fixed.epochs=1", "--set", "parallelism=1")
    assert again.exit_code == 0 and "resuming: 2 of 2" in again.stderr
    plain = sweeper("run", spec, "--storage", sqlite_url)
    assert plain.exit_code == 2
