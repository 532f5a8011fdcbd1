"""End to end through the CLI: `sweeper run` with the local backend on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper.cli import cli
from sweeper.study import load_sweep, open_storage
from tests.support.helpers import contains, write_spec

REPO = Path(__file__).resolve().parents[2]
SWEEPER = Path(sys.executable).parent / "sweeper"


def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def finished_once_per_index(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    sweep = load_sweep(open_storage(url), name)
    trials = sweep.study().get_trials()
    done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    per_index = Counter(t.user_attrs["sweeper:index"] for t in done)
    assert sorted(per_index) == list(range(sweep.spec.trials))
    assert set(per_index.values()) == {1}
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert all(contains(sweep.spec, t.params) for t in done)
    return done


@pytest.mark.parametrize("method", ["grid", "random", "tpe"])
def test_run_each_method(storage_url: str, tmp_path: Path, method: str,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, name=f"e2e-{method}", method=method)
    code, out, err = run_cli("run", str(spec), "--storage", storage_url)
    assert code == 0, err
    assert "best trials of" in out
    done = finished_once_per_index(storage_url, f"e2e-{method}")
    study = optuna.load_study(study_name=f"e2e-{method}", storage=open_storage(storage_url))
    code, out, _ = run_cli("best", f"e2e-{method}", "--storage", storage_url)
    best = json.loads(out)
    assert best["number"] == study.best_trial.number
    assert best["values"]["loss"] == pytest.approx(study.best_value)
    assert best["params"] == study.best_trial.params
    # per-index logs exist for every index
    key = load_sweep(open_storage(storage_url), f"e2e-{method}").state_key
    logs = list((tmp_path / ".sweeper" / "logs" / key).glob("index-*.log"))
    assert len(logs) == len(done)
    # running it again resumes: nothing to do, no new trial
    code, _, err = run_cli("run", str(spec), "--storage", storage_url, "-p", "3")
    assert code == 0 and "resuming" in err
    assert len(study.get_trials()) == len(done)


def test_status_plan_validate(sqlite_url: str, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, name="st")
    code, out, _ = run_cli("validate", str(spec))
    assert code == 0 and out.startswith("ok: st: grid, 10 indexes")
    code, out, _ = run_cli("plan", str(spec))
    lines = out.splitlines()
    assert lines[0].split() == ["JOB_ID", "a", "b"] and lines[2].split() == ["0", "0.0", "x"]
    assert lines[-1].split() == ["9", "1.0", "y"]
    plan = json.loads(run_cli("plan", str(spec), "--format", "json")[1])
    assert plan["sets"][3] == {"job_id": 3, "params": {"a": 0.25, "b": "y"}}
    code, _, _ = run_cli("run", str(spec), "--storage", sqlite_url)
    assert code == 0
    status = json.loads(run_cli("status", "st", "--storage", sqlite_url, "--format", "json")[1])
    assert status["finished_indexes"] == 10 and status["trials_by_state"] == {"COMPLETE": 10}
    assert [r["index"] for r in status["per_index"]] == list(range(10))
    code, out, _ = run_cli("status", "st", "--storage", sqlite_url)
    assert "10/10 indexes finished" in out
    code, _, err = run_cli("status", "nope", "--storage", sqlite_url)
    assert code == 2 and err.strip() == f"error: no sweep named 'nope' in {sqlite_url}; " \
        "sweeps there: st"


def test_failed_index_makes_run_exit_1(sqlite_url: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flaky.py").write_text(
        "def train(ctx):\n"
        "    if ctx.index == 1:\n        raise ValueError('bad index')\n"
        "    return float(ctx.params['a'])\n")
    spec = write_spec(tmp_path, name="flaky", trial={"entrypoint": "flaky:train", "retries": 1})
    code, _, err = run_cli("run", str(spec), "--storage", sqlite_url)
    assert code == 1
    assert "1 index(es) failed for good: 1" in err
    trials = load_sweep(open_storage(sqlite_url), "flaky").study().get_trials()
    index1 = [t for t in trials if t.user_attrs["sweeper:index"] == 1]
    assert [t.state for t in index1] == [TrialState.FAIL, TrialState.FAIL]  # 1 + 1 retry
    assert "ValueError: bad index" in index1[-1].user_attrs["sweeper:fail_reason"]


def test_installed_console_script_runs_the_digits_example(pg_url: str, tmp_path: Path) -> None:
    """The real `sweeper` executable, the built-in PyTorch example, real PostgreSQL."""
    spec = tmp_path / "digits.yaml"
    spec.write_text(
        "name: digits-mini\nmethod: random\nobjective: {metric: val_accuracy, direction: "
        "maximize}\ntrials: 3\nparallelism: 2\ntrial:\n  entrypoint: "
        "trial_runner.examples.digits:train\n  fixed: {epochs: 2}\nparameters:\n"
        "  lr: {type: float, low: 0.001, high: 0.1, log: true}\n"
        "  hidden: {type: int, low: 16, high: 64, step: 16}\n")
    env = dict(os.environ, SWEEPER_STORAGE=pg_url)
    proc = subprocess.run([str(SWEEPER), "run", str(spec)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "sweeper-test-pw" not in proc.stdout + proc.stderr
    assert "postgresql://sweeper:***@" in proc.stderr
    logs = list((tmp_path / ".sweeper" / "logs").glob("digits-mini-*/*.log"))  # its own dir
    assert len(logs) >= 3  # every index and worker log: no password in any of them
    assert not [p for p in logs if "sweeper-test-pw" in p.read_text()]
    done = finished_once_per_index(pg_url, "digits-mini")
    for t in done:
        assert 0.0 < t.value <= 1.0
        assert sorted(t.intermediate_values) == [0, 1]
        assert t.user_attrs["sweeper:device"] in ("cpu",) or \
            t.user_attrs["sweeper:device"].startswith("cuda")
    best = subprocess.run([str(SWEEPER), "best", "digits-mini", "--format", "yaml"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert best.returncode == 0 and "val_accuracy:" in best.stdout
