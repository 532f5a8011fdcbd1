"""`sweeper import wandb` on sweep configurations written from W&B's documentation
(tests/data/importers/wandb/): every documented parameter form, distribution, early_terminate
and command macro maps or is a note; the q_* distributions keep their type and grid; imported
sweeps run end to end."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper.cli import cli
from sweeper.importers import import_config
from sweeper.importers._wandb_q import LOG_POINTS, log_spaced
from sweeper.spec import parse_spec
from sweeper.study import load_sweep, open_storage

REPO = Path(__file__).resolve().parents[2]
WANDB = REPO / "tests" / "data" / "importers" / "wandb"
CONFIGS = sorted(p for p in WANDB.glob("*.yaml") if p.stem != "not_a_sweep")


def imported(name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    result = import_config("wandb", WANDB / name)
    return result.spec, result.notes


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_config_imports_to_a_valid_spec(path: Path) -> None:
    result = import_config("wandb", path)
    spec = parse_spec(result.text)
    assert spec.trial.command is not None
    assert result.text.startswith("# sweeper spec imported from W&B sweep config")
    assert all(f"#   - {n}" in result.text.splitlines() for n in result.notes)
    assert spec.trial.metrics.wandb is not None  # wandb.config and wandb.log work unchanged
    assert not any("wandb.log" in n for n in result.notes)


def test_bayes_hyperband_target_nested_and_default_command() -> None:
    spec, notes = imported("bayes_hyperband.yaml")
    assert (spec["name"], spec["method"], spec["trials"]) == ("fashion-cnn-bayes", "gp", 40)
    assert spec["objective"] == {"metric": "val/loss", "direction": "minimize"}
    assert spec["stop"] == {"value": 0.05}
    # W&B's brackets 3, 9, 27, ... for every run: successive halving with those rungs
    assert spec["pruner"] == {"type": "successive_halving", "reduction_factor": 3,
                              "min_early_stopping_rate": 0, "min_resource": 3}
    assert spec["trial"]["metrics"] == {"wandb": {"optimizer_name": "optimizer.name",
                                                  "optimizer_momentum": "optimizer.momentum"}}
    p = spec["parameters"]
    assert p["learning_rate"] == {"type": "float", "low": 1e-5, "high": 0.1, "log": True}
    assert p["weight_decay"]["log"] and \
        p["weight_decay"]["low"] == pytest.approx(math.exp(-9.21))  # W&B's exponent form
    assert p["dropout"] == {"type": "float", "low": 0.1, "high": 0.5, "step": 0.1}
    assert p["batch_size"] == {"type": "int", "low": 16, "high": 256, "log": True}
    assert p["optimizer_name"] == {"type": "categorical", "choices": ["adam", "sgd"]}
    assert spec["trial"]["fixed"] == {"epochs": 27}
    assert spec["trial"]["command"] == [
        "python", "train.py", "--learning_rate={learning_rate}",
        "--weight_decay={weight_decay}", "--dropout={dropout}", "--batch_size={batch_size}",
        "--optimizer.name={optimizer_name}", "--optimizer.momentum={optimizer_momentum}",
        "--epochs={epochs}"]
    assert "parameters.learning_rate.min: '1e-5' is a string in YAML 1.1: read as a number" \
        in notes
    assert "project: W&B project has no sweeper counterpart: dropped" in notes
    assert [n for n in notes if n.startswith("parameters.optimizer: nested parameters")]


def test_grid_constants_booleans_and_args_no_hyphens() -> None:
    spec, notes = imported("grid_values.yaml")
    assert spec["method"] == "grid" and spec["trials"] == 8
    assert spec["parameters"]["use_bn"] == {"type": "categorical", "choices": [True, False]}
    assert spec["parameters"]["layers"] == {"type": "int", "values": [1, 2, 3]}
    assert spec["trial"]["command"] == ["python3", "train.py", "layers={layers}",
                                        "width={width}", "use_bn={use_bn}", "seed={seed}"]
    assert [n for n in notes if n.startswith("run_cap: 8 < the grid's 12 points")]



@pytest.mark.parametrize(("macro", "argv", "passed"), [
    ("${args}", ["--num-epochs={num_epochs}", "--optimizer.lr={optimizer_lr}"],
     ["--num-epochs=VALUE", "--optimizer.lr=VALUE"]),
    ("${args_no_hyphens}", ["num-epochs={num_epochs}", "optimizer.lr={optimizer_lr}"],
     ["num-epochs=VALUE", "optimizer.lr=VALUE"]),
])
def test_a_renamed_parameter_note_says_the_argv_the_program_gets(
        tmp_path: Path, macro: str, argv: list[str], passed: list[str]) -> None:
    config = tmp_path / "renamed.yaml"
    config.write_text("program: train.py\nmethod: random\nrun_cap: 4\n"
                      "metric: {name: acc, goal: maximize}\nparameters:\n"
                      "  num-epochs: {values: [1, 2]}\n"
                      "  optimizer: {parameters: {lr: {min: 0.001, max: 0.1}}}\n"
                      f'command: ["${{env}}", python, "${{program}}", "{macro}"]\n')
    result = import_config("wandb", config)
    assert result.spec["trial"]["command"] == ["python", "train.py", *argv]
    for name, form in zip(("num-epochs", "optimizer.lr"), passed, strict=True):
        assert [n for n in result.notes if n.startswith(f"parameters.{name}: renamed")
                and n.endswith(f"the program gets it as {form}")], (name, result.notes)


def test_every_distribution_maps_or_says_what_stands_in() -> None:
    spec, notes = imported("random_distributions.yaml")
    p = spec["parameters"]
    assert p["batch"] == {"type": "int", "low": 16, "high": 128}  # ints: int_uniform
    assert p["warmup"] == {"type": "float", "low": 0.0, "high": 0.2}  # floats: uniform
    assert p["decay"] == {"type": "float", "values": [1e-5, 1e-6, 1e-7]}
    assert p["temperature"] == {"type": "float", "low": pytest.approx(0.7),
                                "high": pytest.approx(1.3)}
    assert p["scale"]["log"] is True
    assert p["inv"] == {"type": "float", "low": 0.01, "high": 1.0, "log": True}
    assert p["clip"] == {"type": "float", "low": 0.5, "high": 5.0, "step": 0.5}
    assert spec["trial"]["fixed"] == {"label_smoothing": 0.1}
    assert spec["trials"] == 100
    assert "run_cap: not set (W&B runs until stopped): substituted trials: 100" in notes
    for text in ("probabilities: Optuna has no weighted categorical",
                 "temperature: normal(mu=1, sigma=0.1) has no Optuna counterpart",
                 "${args_json} dropped: the program can read $SWEEPER_PARAMS",
                 "'--log=${envvar:LOG_DIR}': W&B macros inside an argument are not expanded"):
        assert [n for n in notes if text in n], text
    assert "--log=${{envvar:LOG_DIR}}" in spec["trial"]["command"]  # literal, braces escaped


def test_not_a_sweep_config_is_one_clear_line() -> None:
    result = CliRunner().invoke(cli, ["import", "wandb", str(WANDB / "not_a_sweep.yaml")])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip().endswith("not a W&B sweep config (expected a mapping with "
                                          "method and parameters)")
    katib = REPO / "tests" / "data" / "importers" / "katib" / "hp-tuning" / "random.yaml"
    result = CliRunner().invoke(cli, ["import", "wandb", str(katib)])
    assert result.exit_code == 2
    assert "this is a Katib Experiment (use `sweeper import katib`)" in result.stderr


def test_unknown_distribution_names_its_field(tmp_path: Path) -> None:
    bad = tmp_path / "sweep.yaml"
    bad.write_text("program: t.py\nmethod: random\nparameters:\n  x:\n"
                   "    distribution: zipf\n    min: 1\n    max: 3\n")
    result = CliRunner().invoke(cli, ["import", "wandb", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {bad}:5: parameters.x.distribution: unknown "
                                     "W&B distribution 'zipf'")


def test_stdout_has_the_spec_and_stderr_the_notes() -> None:
    result = CliRunner().invoke(cli, ["import", "wandb", str(WANDB / "quick_random.yaml")])
    assert result.exit_code == 0
    assert parse_spec(result.stdout).name == "quick-random"
    assert result.stderr.splitlines() == []


def test_imported_sweep_runs_end_to_end(sqlite_url: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(WANDB / "train.py", tmp_path / "train.py")
    monkeypatch.chdir(tmp_path)  # W&B runs `python train.py` where the sweep was started
    out = tmp_path / "sweep.sweeper.yaml"
    result = CliRunner().invoke(cli, ["import", "wandb", str(WANDB / "quick_random.yaml"),
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["run", str(out), "--storage", sqlite_url])
    assert result.exit_code == 0, result.output
    trials = load_sweep(open_storage(sqlite_url), "quick-random").study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 6
    for t in done:
        expect = (t.params["lr"] - 0.01) ** 2 * 100 + 0.1 * t.params["layers"] + 1 / 3
        assert t.value == pytest.approx(expect, abs=1e-5)
        assert sorted(t.intermediate_values) == [0, 1, 2]


# --------------------------------------------------------------------------- q_* distributions


def test_quantised_distributions_keep_their_type_and_grid() -> None:
    """W&B passes round(X / q) * q: with q: 8 the program gets integers such as 240, never the
    float 238.692 a log-uniform float parameter would give it."""
    spec, notes = imported("quantised.yaml")
    p = spec["parameters"]
    batch = p["batch_size"]
    assert batch["type"] == "int" and "low" not in batch and "log" not in batch
    values = batch["values"]
    assert all(isinstance(v, int) and v % 8 == 0 and 32 <= v <= 256 for v in values)
    assert values == sorted(set(values)) and (values[0], values[-1]) == (32, 256)
    # Spaced on a log scale: as many values below 91 (the geometric middle) as above it,
    # where all 29 multiples of 8 would put 8 below it and 21 above.
    below = sum(v < math.sqrt(32 * 256) for v in values)
    assert abs(below - (len(values) - below)) <= 2
    assert p["hidden"] == {"type": "int", "low": 16, "high": 128, "step": 16}
    dropout = p["dropout"]
    assert dropout["type"] == "float" and (dropout["values"][0], dropout["values"][-1]) == \
        (0.01, 0.5)
    assert all(v == round(v, 2) for v in dropout["values"])  # multiples of 0.01, no 0.0300001
    assert f"parameters.batch_size: q_log_uniform_values(q=8): Optuna cannot combine a step " \
           f"with a log scale, so values: {len(values)} multiples of 8 from 32 to 256 spaced " \
           "evenly on a log scale, each equally likely (W&B weights each multiple of q by the " \
           "log scale)" in notes
    assert "parameters.hidden: q_uniform(q=16): int parameter from 16 to 128 step 16, the " \
           "multiples of q W&B draws" in notes
    assert [n for n in notes if n.startswith("parameters.dropout: q_log_uniform_values(q=0.01)")]
    assert not [n for n in notes if "quantisation is dropped" in n]


@pytest.mark.parametrize(("dist", "extra", "expect"), [
    ("q_log_uniform_values", {"min": 1, "max": 1000, "q": 1},
     {"type": "int", "low": 1, "high": 1000, "log": True}),
    ("q_uniform", {"min": 0.25, "max": 5.0, "q": 0.5},
     {"type": "float", "low": 0.5, "high": 5.0, "step": 0.5}),
    ("q_log_uniform", {"min": 0, "max": 2, "q": 2},  # exponents: e^0 .. e^2 (7.39)
     {"type": "int", "values": [2, 4, 6]}),
    ("q_normal", {"mu": 10, "sigma": 2, "q": 4},  # 10 +- 3 sigma: 4 .. 16
     {"type": "int", "low": 4, "high": 16, "step": 4}),
])
def test_each_quantised_form_maps_to_integers_or_a_grid(
        tmp_path: Path, dist: str, extra: dict[str, Any], expect: dict[str, Any]) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"program": "t.py", "method": "random", "parameters": {
        "x": {"distribution": dist, **extra}}}))
    result = import_config("wandb", config)
    assert result.spec["parameters"]["x"] == expect
    assert [n for n in result.notes if n.startswith(f"parameters.x: {dist}(q=")]


def test_no_multiple_of_q_in_range_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text("program: t.py\nmethod: random\nparameters:\n  x:\n"
                      "    distribution: q_uniform\n    min: 17\n    max: 23\n    q: 8\n")
    result = CliRunner().invoke(cli, ["import", "wandb", str(config)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {config}:4: parameters.x: no multiple of q=8 lies " \
                                    "between 17 and 23"


def test_log_spaced_points_are_distinct_and_evenly_spaced_in_log() -> None:
    assert log_spaced(4, 32, LOG_POINTS) == [4, 5, 6, 7, 8, 10, 11, 13, 16, 19, 23, 27, 32]
    assert log_spaced(1, 100, LOG_POINTS) == [1, 2, 3, 4, 6, 10, 16, 25, 40, 63, 100]
    assert log_spaced(1, 3, LOG_POINTS) == [1, 2, 3]
    assert log_spaced(5, 5, LOG_POINTS) == [5]
    wide = log_spaced(100, 10_000, LOG_POINTS)  # capped, and each decade gets half
    assert len(wide) == LOG_POINTS and (wide[0], wide[-1]) == (100, 10_000)
    assert sum(k < 1000 for k in wide) == LOG_POINTS // 2


def test_imported_quantised_sweep_passes_integers(sqlite_url: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: the program's argparse takes --batch_size and --hidden as int, so a float
    there fails the trial; every trial completes with the multiples of q the program saw."""
    shutil.copy(WANDB / "train_batch.py", tmp_path / "train_batch.py")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "sweep.sweeper.yaml"
    result = CliRunner().invoke(cli, ["import", "wandb", str(WANDB / "quantised.yaml"),
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["run", str(out), "--storage", sqlite_url])
    assert result.exit_code == 0, result.output
    trials = load_sweep(open_storage(sqlite_url), "quantised").study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 6
    for t in done:
        assert t.params["batch_size"] % 8 == 0 and t.params["hidden"] % 16 == 0
        assert t.user_attrs["batch_size_seen"] == t.params["batch_size"]
        assert t.user_attrs["hidden_seen"] == t.params["hidden"]
