"""trial.metrics.wandb: the spec's keys, the config a W&B program gets, its environment, and
the start-up hook's step rule and numbers (trial_runner/wandb_site/sitecustomize.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sweeper.errors import SpecError
from tests.support.helpers import make_spec
from trial_runner.wandb_bridge import ENV_CONFIG, ENV_LOG, SITE_DIR, wandb_config, wandb_env


def _site() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_sweeper_site_test",
                                                  SITE_DIR / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    assert ENV_LOG not in os.environ  # so it installs no finder in this process
    spec.loader.exec_module(module)
    return module


def test_the_spec_takes_true_or_keys_of_its_own_parameters() -> None:
    spec = make_spec(trial={"command": ["python", "t.py"], "metrics": {"wandb": True}})
    assert spec.trial.metrics.wandb == ()
    spec = make_spec(trial={"command": ["python", "t.py"], "fixed": {"e": 3},
                            "metrics": {"wandb": {"a": "opt.a", "e": "epochs"}}})
    assert spec.trial.metrics.wandb == (("a", "opt.a"), ("e", "epochs"))
    for bad, message in [({"wandb": {"zz": "x"}}, "not a parameter or fixed value"),
                         ({"wandb": {"a": "x..y"}}, "not a W&B config key"),
                         ({"wandb": True, "file": "m.jsonl"}, "leave out format and file"),
                         ({"wandb": "yes"}, "expected true or a mapping")]:
        with pytest.raises(SpecError, match=message):
            make_spec(trial={"command": ["python", "t.py"], "metrics": bad})


def test_config_nests_dotted_keys_as_wandbs_agent_does() -> None:
    keys = (("optimizer_lr", "optimizer.lr"), ("optimizer_m", "optimizer.momentum"),
            ("num_epochs", "num-epochs"))
    assert wandb_config({"optimizer_lr": 0.1, "optimizer_m": 0.9, "num_epochs": 3, "x": "a"},
                        keys) == {"optimizer": {"lr": 0.1, "momentum": 0.9}, "num-epochs": 3,
                                  "x": "a"}


def test_environment_is_offline_unless_the_user_says(tmp_path: Path) -> None:
    env = wandb_env({"PYTHONPATH": "/mine"}, {"a": 1}, (), tmp_path / "log.jsonl")
    assert env["WANDB_MODE"] == "offline"
    assert env["PYTHONPATH"] == f"{SITE_DIR}{os.pathsep}/mine"
    assert json.loads(env[ENV_CONFIG]) == {"a": 1} and env[ENV_LOG].endswith("log.jsonl")
    assert "WANDB_MODE" not in wandb_env({"WANDB_MODE": "online"}, {}, (), tmp_path / "l")


@pytest.mark.parametrize(("calls", "steps"), [
    ([(None, None)] * 3, [0, 1, 2]),                       # each call a step
    ([(None, False), (None, None), (None, None)], [0, 0, 1]),  # commit=False joins the next
    ([(5, None), (5, None), (None, None), (None, None)], [5, 5, 5, 6]),  # explicit step
    ([(3, None), (1, None), (4, True), (None, None)], [3, None, 4, 5]),  # backwards: dropped
])
def test_steps_follow_wandbs_documented_rule(calls: list[tuple[int | None, bool | None]],
                                             steps: list[int | None]) -> None:
    site = _site()
    assert [site.step_of(1, step, commit) for step, commit in calls] == steps


def test_numbers_are_the_metrics_of_a_log_call() -> None:
    site = _site()
    assert site.numbers({"loss": 1, "val": {"acc": 0.5, "f1": {"m": 2}}, "ok": True,
                         "name": "x", "img": object()}) == {"loss": 1.0, "val.acc": 0.5,
                                                             "val.f1.m": 2.0}


def test_a_sitecustomize_it_hides_still_runs(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['HIDDEN_RAN'] = '1'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE_DIR), str(other)]),
           ENV_LOG: str(tmp_path / "log.jsonl")}
    out = subprocess.run([sys.executable, "-c", "import os, sys; print(os.environ.get("
                          "'HIDDEN_RAN'), any(type(f).__name__ == '_Finder' for f in "
                          "sys.meta_path))"], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["1", "True"]
