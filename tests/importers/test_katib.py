"""`sweeper import katib` on Katib's own example Experiments (tests/data/importers/katib/,
Apache 2.0): every one maps to a spec `validate` accepts, each mapping says what it did, what
does not map is a note, a file that is not an Experiment is one line; one imported example
runs end to end and renders a schema-valid Job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper.cli import cli
from sweeper.errors import SpecError
from sweeper.importers import import_config
from sweeper.importers.katib import named_groups
from sweeper.spec import parse_spec
from sweeper.study import load_sweep, open_storage

REPO = Path(__file__).resolve().parents[2]
KATIB = REPO / "tests" / "data" / "importers" / "katib"
EXAMPLES = sorted(p for p in KATIB.rglob("*.yaml") if "nas" not in p.parts)


def imported(rel: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    result = import_config("katib", KATIB / rel)
    return result.spec, result.notes


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_katib_example_imports_to_a_valid_spec(path: Path) -> None:
    result = import_config("katib", path)
    spec = parse_spec(result.text)
    katib = yaml.safe_load(path.read_text())["spec"]
    assert spec.name == yaml.safe_load(path.read_text())["metadata"]["name"]
    pbt = katib["algorithm"]["algorithmName"] == "pbt"  # the population trains at once
    assert spec.parallelism == (spec.trials if pbt else katib["parallelTrialCount"])
    assert [o.metric for o in spec.objectives] == [katib["objective"]["objectiveMetricName"]]
    assert spec.stop.max_failed_trials == katib["maxFailedTrialCount"]
    assert spec.stop.value == float(katib["objective"]["goal"])
    assert spec.kubernetes.namespace == "kubeflow"
    assert spec.trial.command is not None
    assert not any("${" in arg for arg in spec.trial.command)
    lines = result.text.splitlines()
    assert lines[0].startswith("# sweeper spec imported from Katib Experiment")
    for note in result.notes:  # each note is one comment line at the top
        assert f"#   - {note}" in lines


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_imported_example_passes_the_check_the_importer_names(
        path: Path, tmp_path: Path) -> None:
    """The trial runs in the Experiment's image, where /opt/pytorch-mnist/mnist.py is: the
    written spec validates as it is (no --no-import), saying in one line that the image's
    paths were not looked for here."""
    out = tmp_path / "spec.yaml"
    result = CliRunner().invoke(cli, ["import", "katib", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    closing = result.stderr.splitlines()[-1]
    image = yaml.safe_load(out.read_text())["kubernetes"]["image"]
    assert closing.endswith(f"check it with `sweeper validate {out}`, run it with `sweeper "
                            f"run {out} --backend kubernetes` (the command runs in {image} as "
                            "it is, sweeper's runner beside it)")
    result = CliRunner().invoke(cli, ["validate", str(out)])
    assert result.exit_code == 0, result.output
    image = yaml.safe_load(out.read_text())["kubernetes"]["image"]
    note, *warnings = result.stderr.splitlines()
    assert all(w.startswith("warning: ") for w in warnings)  # grid.yaml's cut-short grid
    assert note.startswith(f"note: trial.command runs in kubernetes.image {image}: its script ")
    assert note.endswith("is the image's, not looked for on this machine (a local run, "
                         "`sweeper run --backend local`, checks it)")


@pytest.mark.parametrize(("rel", "method", "sampler"), [
    ("hp-tuning/random.yaml", "random", {}),
    ("hp-tuning/grid.yaml", "grid", {}),
    ("hp-tuning/tpe.yaml", "tpe", {"multivariate": False}),
    ("hp-tuning/multivariate-tpe.yaml", "tpe", {"multivariate": True}),
    ("hp-tuning/cma-es.yaml", "cmaes", {"restart_strategy": "ipop"}),
    ("hp-tuning/sobol.yaml", "qmc", {"qmc_type": "sobol"}),
    ("hp-tuning/bayesian-optimization.yaml", "gp", {}),
])
def test_algorithms_map_to_methods(rel: str, method: str, sampler: dict[str, Any]) -> None:
    spec, _ = imported(rel)
    assert spec["method"] == method
    assert spec.get("sampler", {}) == sampler


def test_random_experiment_maps_fields_and_placeholders() -> None:
    spec, notes = imported("hp-tuning/random.yaml")
    assert spec["trials"] == 12 and spec["parallelism"] == 3
    assert spec["objective"] == {"metric": "loss", "direction": "minimize"}
    assert spec["stop"] == {"value": 0.001, "max_failed_trials": 3}
    assert spec["parameters"] == {"lr": {"type": "float", "low": 0.01, "high": 0.05},
                                  "momentum": {"type": "float", "low": 0.5, "high": 0.9}}
    assert spec["trial"]["command"] == [
        "python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1", "--batch-size=16",
        "--lr={lr}", "--momentum={momentum}"]
    assert spec["trial"]["resources"] == {"cpu": "0.5", "memory": "1Gi"}
    assert spec["kubernetes"]["image"] == "ghcr.io/kubeflow/katib/pytorch-mnist-cpu:latest"
    assert spec["kubernetes"]["runner_image"] == "sweeper-trial-runner:0.1.0"
    assert any("as it is (it needs sh and sleep, not sweeper)" in n for n in notes)
    assert any("takes the last value reported" in n for n in notes)


def test_distributions_steps_and_renamed_parameters() -> None:
    spec, notes = imported("hp-tuning/optuna-distribution.yaml")
    p = spec["parameters"]
    assert p["lr"] == {"type": "float", "low": 1, "high": 5, "step": 0.1}
    assert p["momentum"] == {"type": "float", "low": 0.001, "high": 3, "log": True}
    assert p["batch_size"] == {"type": "int", "low": 32, "high": 64, "log": True}
    spec, notes = imported("hp-tuning/hyperopt-distribution.yaml")
    assert spec["parameters"]["lr"]["step"] == 0.01
    assert [n for n in notes if "distribution normal has no Optuna counterpart" in n]
    assert [n for n in notes if "distribution logNormal" in n]
    spec, notes = imported("hp-tuning/hyperband.yaml")
    assert "--epochs={num_epochs}" in spec["trial"]["command"]
    assert [n for n in notes if n.startswith("parameter num-epochs: renamed num_epochs")]


def test_grid_capped_by_max_trial_count_says_what_it_leaves_out() -> None:
    spec, notes = imported("hp-tuning/grid.yaml")
    assert spec["parameters"]["lr"] == {"type": "float", "low": 0.01, "high": 0.05,
                                        "step": 0.005}
    assert spec["trials"] == 12
    assert [n for n in notes if n.startswith("spec.maxTrialCount: 12 < the grid's 45 points")]


def test_early_stopping_metrics_collectors_and_pytorchjob() -> None:
    spec, notes = imported("early-stopping/median-stop.yaml")
    assert spec["pruner"] == {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 2}
    assert [n for n in notes if n.startswith("trialTemplate.retain")]
    spec, notes = imported("metrics-collector/file-metrics-collector.yaml")
    assert spec["trial"]["metrics"] == {
        "format": r"{metricName: (?P<name>[\w|-]+), metricValue: (?P<value>(-?\d+)(\.\d+)?)}",
        "file": "/katib/mnist.log"}
    assert [n for n in notes if "read-only root filesystem" in n]
    spec, _ = imported("metrics-collector/file-metrics-collector-with-json-format.yaml")
    assert spec["trial"]["metrics"] == {"file": "/katib/mnist.json"}
    _, notes = imported("metrics-collector/custom-metrics-collector.yaml")
    assert [n for n in notes if "kind Custom has no sweeper counterpart" in n]
    spec, notes = imported("kubeflow-training-operator/pytorchjob-mnist.yaml")
    assert spec["trial"]["command"][:2] == ["python3", "/opt/pytorch-mnist/mnist.py"]
    assert [n for n in notes if "a PyTorchJob runs as one pod per trial" in n]
    spec, notes = imported("hp-tuning/simple-pbt.yaml")
    assert spec["objective"]["metric"] == "Validation-accuracy"


@pytest.mark.parametrize(("katib", "ours"), [
    (r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)",
     r"(?P<name>[\w|-]+)\s*=\s*(?P<value>[+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"),
    (r"(?:x)([a-z(]+)=(\d)", r"(?:x)(?P<name>[a-z(]+)=(?P<value>\d)"),
    (r"only (one)", None),
])
def test_katib_metrics_formats_get_named_groups(katib: str, ours: str | None) -> None:
    assert named_groups(katib) == ours


def test_nas_and_non_experiments_are_one_clear_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["import", "katib", str(KATIB / "nas" / "darts-cpu.yaml")])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("darts is neural architecture search (nasConfig), "
                                          "not hyperparameter tuning: there are no parameters "
                                          "to import")
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\n")
    result = CliRunner().invoke(cli, ["import", "katib", str(job)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip() == (f"error: {job}:1: not a Katib Experiment (expected "
                                     "apiVersion kubeflow.org/v1beta1 and kind Experiment; "
                                     "kind 'Job')")
    with pytest.raises(SpecError, match="no such file"):
        import_config("katib", tmp_path / "missing.yaml")


def test_imported_random_experiment_runs_end_to_end(sqlite_url: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Katib's random.yaml, its program swapped for a stand-in that prints what Katib's
    mnist.py prints; everything else as imported."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "random.sweeper.yaml"
    result = CliRunner().invoke(cli, ["import", "katib", str(KATIB / "hp-tuning" / "random.yaml"),
                                      "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == (
        f"wrote {out} (2 notes on what did not map): check it with `sweeper validate {out}`, "
        f"run it with `sweeper run {out} --backend kubernetes` (the command runs in "
        "ghcr.io/kubeflow/katib/pytorch-mnist-cpu:latest as it is, sweeper's runner beside it)")
    stub = REPO / "tests" / "support" / "katib_mnist_stub.py"
    out.write_text(out.read_text().replace("/opt/pytorch-mnist/mnist.py", str(stub))
                   .replace("python3", "python"))
    assert CliRunner().invoke(cli, ["validate", str(out)]).exit_code == 0
    result = CliRunner().invoke(cli, ["run", str(out), "--storage", sqlite_url, "-p", "2"])
    assert result.exit_code == 0, result.output
    trials = load_sweep(open_storage(sqlite_url), "random").study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert 1 <= len(done) <= 12  # stop.value 0.001 may stop it early; it ran either way
    for t in done:
        assert 0.01 <= t.params["lr"] <= 0.05 and 0.5 <= t.params["momentum"] <= 0.9
        assert t.value > 0  # loss=... from the "Train Epoch" lines, as Katib's StdOut reads it
        assert "accuracy" not in t.user_attrs  # Katib's default format does not read it either


def test_imported_specs_render_schema_valid_jobs() -> None:
    from sweeper.backends.manifests import render
    from tests.support.k8s_schema import validate_k8s_objects

    for rel in ("hp-tuning/random.yaml", "metrics-collector/file-metrics-collector.yaml",
                "kubeflow-training-operator/pytorchjob-mnist.yaml"):
        spec = parse_spec(import_config("katib", KATIB / rel).text)
        assert validate_k8s_objects(render(spec)) == [], rel
