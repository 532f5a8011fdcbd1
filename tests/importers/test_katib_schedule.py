"""Katib's hyperband and pbt import as sweeper's schedulers (promotion ASHA, PBT), with their
settings, on Katib's own examples (tests/data/importers/katib/, Apache 2.0)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweeper.importers import import_config
from sweeper.spec import parse_spec

KATIB = Path(__file__).resolve().parents[2] / "tests" / "data" / "importers" / "katib"


def test_simple_pbt_is_population_based_training() -> None:
    result = import_config("katib", KATIB / "hp-tuning" / "simple-pbt.yaml")
    spec = result.spec
    assert spec["method"] == "random"
    assert (spec["trials"], spec["parallelism"]) == (40, 40)  # n_population, all at once
    assert spec["scheduler"] == {"type": "pbt", "max_resource": 1, "perturbation_interval": 1,
                                 "quantile_fraction": 0.2, "resample_probability": 0.0,
                                 "perturbation_factors": [0.8, 1.2]}
    # suggestion_trial_dir is the member's checkpoint directory
    assert "--checkpoint={checkpoint_dir}/" in spec["trial"]["command"]
    assert not any("substituted method random" in n or "dropped" in n for n in result.notes)
    parsed = parse_spec(result.text)
    assert parsed.scheduler.type == "pbt" and parsed.scheduler.pbt.quantile_fraction == 0.2


def test_hyperband_is_promotion_asha_with_the_resource_fixed() -> None:
    result = import_config("katib", KATIB / "hp-tuning" / "hyperband.yaml")
    spec = result.spec
    assert spec["method"] == "random" and "pruner" not in spec
    assert spec["scheduler"] == {"type": "asha", "mode": "promotion", "min_resource": 1,
                                 "max_resource": 2, "reduction_factor": 2}
    assert "num_epochs" not in spec["parameters"]
    assert spec["trial"]["fixed"] == {"num_epochs": 2}  # r_l: the most a trial trains
    assert "--epochs={num_epochs}" in spec["trial"]["command"]
    assert not any("substituted" in n for n in result.notes)
    assert parse_spec(result.text).scheduler.rung_steps == (1,)


def _experiment(tmp_path: Path, name: str, settings: dict[str, str], **extra: object) -> Path:
    data = yaml.safe_load((KATIB / "hp-tuning" / f"{name}.yaml").read_text())
    data["spec"]["algorithm"]["algorithmSettings"] = [
        {"name": k, "value": v} for k, v in settings.items()]
    data["spec"].update(extra)
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("r_l", "eta", "rungs"), [
    ("81", "3", {"min_resource": 1, "max_resource": 81, "reduction_factor": 3}),
    ("20", "3", {"min_resource": 2, "max_resource": 20, "reduction_factor": 3}),
    ("2", "3", {"min_resource": 1, "max_resource": 2, "reduction_factor": 3}),
])
def test_hyperband_rungs_are_katibs_most_aggressive_bracket(
        tmp_path: Path, r_l: str, eta: str, rungs: dict[str, int]) -> None:
    path = _experiment(tmp_path, "hyperband", {"resource_name": "num-epochs", "eta": eta,
                                               "r_l": r_l},
                       earlyStopping={"algorithmName": "medianstop"})
    result = import_config("katib", path)
    assert result.spec["scheduler"] == {"type": "asha", "mode": "promotion", **rungs}
    assert result.spec["trial"]["fixed"] == {"num_epochs": int(r_l)}
    assert "pruner" not in result.spec  # a scheduler takes no pruner: noted
    assert [n for n in result.notes if n.startswith("spec.earlyStopping: hyperband decides")]


def test_pbt_settings_and_generations(tmp_path: Path) -> None:
    path = _experiment(tmp_path, "simple-pbt", {
        "suggestion_trial_dir": "/ckpt", "n_population": "5", "truncation_threshold": "0.6",
        "resample_probability": "0.3"}, maxTrialCount=20)
    result = import_config("katib", path)
    sched = result.spec["scheduler"]
    assert (result.spec["trials"], sched["max_resource"]) == (5, 3)  # 20 / 5 generations
    assert (sched["quantile_fraction"], sched["resample_probability"]) == (0.5, 0.3)
    assert [n for n in result.notes if "truncation_threshold 0.6 > 0.5" in n]
    assert [n for n in result.notes if "Katib resamples or keeps" in n]
    assert parse_spec(result.text).scheduler.pbt.resample_probability == 0.3
