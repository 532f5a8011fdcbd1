"""``scheduler:`` through the CLI: a promotion-ASHA sweep on the local backend runs to its end,
``status`` shows rungs and paused trials, and Kubernetes without durable checkpoints is a spec
error before anything is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.cli import cli
from sweeper.spec import load_spec
from sweeper.study import create_or_resume, open_storage
from tests.support.asha_objectives import curve
from tests.support.helpers import spec_dict
from trial_runner.runner import RunnerSettings, run_index

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = {"type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9,
             "reduction_factor": 3}


def _write(tmp_path: Path, **over: Any) -> Path:
    d = spec_dict(name="asha-cli", scheduler=SCHEDULER,
                  trial={"entrypoint": "tests.support.asha_objectives:curve",
                         "fixed": {"steps": 9}},
                  parameters={"a": {"type": "int", "low": 0, "high": 8}}, **over)
    path = tmp_path / "asha.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def test_a_local_sweep_runs_to_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # tests.support imports in the workers
    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = _write(tmp_path, parallelism=3)
    run = CliRunner().invoke(cli, ["run", str(spec), "--storage", url,
                                   "--log-dir", str(tmp_path / "logs")])
    assert run.exit_code == 0, run.output
    trials = create_or_resume(open_storage(url), load_spec(spec))[0].study().trials
    states = sorted(t.state.name for t in trials)
    # 9 at rung 0, the top 3 at rung 1, its top 1 completes; the rest end PRUNED (whatever
    # order three workers took them in, nothing stays paused once the sweep is over)
    assert states.count("COMPLETE") >= 1 and "WAITING" not in states and "FAIL" not in states
    assert len(trials) == 9
    best = min((t for t in trials if t.state == TrialState.COMPLETE),
               key=lambda t: float(t.value or 0.0))
    assert best.params["a"] == 0 and sorted(best.intermediate_values) == list(range(10))


def test_status_shows_rungs_and_paused_trials(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    sweep, _ = create_or_resume(open_storage(url), load_spec(_write(tmp_path)))
    settings = RunnerSettings(heartbeat_interval_s=0.2, checkpoint_root=tmp_path / "ckpt")
    for i in range(2):
        assert run_index(sweep, i, curve, settings).state == protocol.PAUSED
    text = CliRunner().invoke(cli, ["status", "asha-cli", "--storage", url])
    assert text.exit_code == 0, text.output
    assert "rungs: 0 (step 1): 2 trials (2 paused), 1 (step 3): 0 trials (0 paused)" \
        in text.output
    rows = {line.split()[0]: line for line in text.output.splitlines() if line[:1].isdigit()}
    assert rows["0"].split()[1] == "WAITING" and rows["0"].endswith("0 paused")
    assert not rows["2"].endswith("paused")
    data = json.loads(CliRunner().invoke(cli, ["status", "asha-cli", "--storage", url,
                                               "--format", "json"]).output)
    assert data["per_index"][0]["rung"] == 0 and data["per_index"][0]["paused"] is True
    assert data["per_index"][2]["rung"] is None and data["per_index"][2]["paused"] is False
    assert data["rungs"][0] == {"rung": 0, "step": 1, "trials": 2, "paused": 2}


@pytest.mark.parametrize("command", ["render", "run"])
def test_kubernetes_without_durable_checkpoints_is_a_spec_error(
        tmp_path: Path, command: str) -> None:
    spec = _write(tmp_path)
    db = tmp_path / "k.db"
    args = ["render", str(spec)] if command == "render" else \
        ["run", str(spec), "--backend", "kubernetes", "--storage", f"sqlite:///{db}"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 2, out.output
    lines = [x for x in out.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {spec}: scheduler: "), out.output
    assert "artifacts.store: s3 or kubernetes.checkpoint_volume" in lines[0]
    assert not db.exists()


def test_render_with_s3_checkpoints_is_fine(tmp_path: Path) -> None:
    spec = _write(tmp_path, artifacts={"store": "s3", "bucket": "ckpt"})
    # trial.code: null: the image holds the code, render uploads no snapshot to the bucket.
    out = CliRunner().invoke(cli, ["render", str(spec), "--set", "trial.code=null"])
    assert out.exit_code == 0, out.output
    assert "kind: Job" in out.output
