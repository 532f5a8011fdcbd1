"""Katib's trial metadata references (``${trialSpec.Name}``, Namespace, Kind, APIVersion,
Labels[key], Annotations[key]) become sweeper's own per-trial values, the trial template's
labels and annotations carry over, and whatever cannot be carried is a note: on
tests/data/importers/katib/trial-template/metadata-substitution.yaml (written after Katib's
trial-metadata-substitution example) and variations of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper.backends.manifests import render
from sweeper.cli import cli
from sweeper.importers import import_config
from sweeper.protocol import INDEX_ATTR
from sweeper.spec import parse_spec
from sweeper.study import load_sweep, open_storage
from tests.support.k8s_schema import validate_k8s_objects

REPO = Path(__file__).resolve().parents[2]
KATIB = REPO / "tests" / "data" / "importers" / "katib"
EXAMPLE = KATIB / "trial-template" / "metadata-substitution.yaml"


def _variant(tmp_path: Path, change: Any, source: Path = EXAMPLE) -> Path:
    """The example with ``change(experiment)`` applied, written to tmp_path."""
    experiment = yaml.safe_load(source.read_text())
    change(experiment)
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    return path


def test_metadata_references_become_sweepers_per_trial_values() -> None:
    result = import_config("katib", EXAMPLE)
    spec, notes = result.spec, result.notes
    # The trial's name differs per trial: set by `env` in front of the command, where sweeper
    # fills {index} in for each trial; in an argument it is filled in the same way.
    assert spec["trial"]["command"] == [
        "env", "TRIAL_NAME=trial-metadata-{index}",
        "python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1", "--lr={lr}",
        "--log-path=/katib/trial-metadata-{index}.log"]
    assert spec["kubernetes"]["env"] == {
        "TRIAL_NAMESPACE": "kubeflow", "TRIAL_KIND": "Job", "TRIAL_API_VERSION": "batch/v1",
        "TRIAL_TEAM": "vision", "TRIAL_OWNER": "ml-platform"}
    assert spec["kubernetes"]["labels"] == {"team": "vision"}
    assert spec["kubernetes"]["annotations"] == {"example.com/owner": "ml-platform",
                                                 "sidecar.istio.io/inject": "false"}
    assert "${" not in yaml.safe_dump(spec)
    assert "trialTemplate.trialParameters.trialName: ${trialSpec.Name} (Katib's trial name) -> " \
           "trial-metadata-{index}: the sweep's name and the trial's index, the same for each " \
           "attempt of an index (not the name of a Kubernetes object)" in notes
    assert "trialTemplate.trialParameters.trialNamespace: ${trialSpec.Namespace} -> kubeflow, " \
           "kubernetes.namespace as imported" in notes
    assert "trialTemplate env: the value of TRIAL_NAME differs per trial: the command starts " \
           "with `env NAME=VALUE ...`, which sets them for each trial (kubernetes.env is the " \
           "same for every trial of a pod)" in notes
    assert not [n for n in notes if "left as text" in n or "not carried" in n]


def test_the_rendered_job_carries_values_labels_and_annotations() -> None:
    spec = parse_spec(import_config("katib", EXAMPLE).text)
    objects = render(spec)
    assert validate_k8s_objects(objects) == []
    assert "${trialParameters" not in yaml.safe_dump_all(objects)
    job = next(o for o in objects if o["kind"] == "Job")
    pod = job["spec"]["template"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["TRIAL_NAMESPACE"] == "kubeflow" and env["TRIAL_OWNER"] == "ml-platform"
    assert "TRIAL_NAME" not in env  # per trial: in the command, not the pod's env
    for meta in (job["metadata"], pod["metadata"]):
        assert meta["labels"]["team"] == "vision"
        assert meta["annotations"]["example.com/owner"] == "ml-platform"
    assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def _unmappable(experiment: dict[str, Any]) -> None:
    tt = experiment["spec"]["trialTemplate"]
    tt["trialParameters"] += [
        {"name": "trialUid", "reference": "${trialSpec.UID}"},
        {"name": "missingLabel", "reference": "${trialSpec.Labels[missing]}"}]
    job = tt["trialSpec"]
    job["metadata"]["labels"].update({"trial": "${trialParameters.trialName}",
                                      "job-name": "mine", "note": "not a label value!"})
    job["metadata"]["annotations"]["sweeper.dev/sweep"] = "x"
    job["spec"]["backoffLimit"] = 0
    pod = job["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "data", "emptyDir": {}}]
    pod["nodeSelector"] = {"disk": "ssd"}
    container = pod["containers"][0]
    container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    container["env"] += [{"name": "TRIAL_UID", "value": "${trialParameters.trialUid}"},
                         {"name": "LABEL", "value": "${trialParameters.missingLabel}"},
                         {"name": "LR", "value": "${trialParameters.learningRate}"},
                         {"name": "JOB_ID", "value": "7"}]


def test_what_cannot_be_carried_is_a_note_not_a_silent_drop(tmp_path: Path) -> None:
    result = import_config("katib", _variant(tmp_path, _unmappable))
    spec, notes = result.spec, result.notes
    for text in (
            "trialTemplate.trialParameters.trialUid: ${trialSpec.UID} is not trial metadata "
            "Katib knows (Name, Namespace, Kind, APIVersion, Labels[key], Annotations[key]): "
            "left as text",
            "trialTemplate.trialParameters.missingLabel: ${trialSpec.Labels[missing]}: the "
            "trialSpec's metadata has no such label (Katib refuses it): left as text",
            "trialSpec.metadata.labels.trial: differs per trial: not carried (one Job and one "
            "pod template serve every trial)",
            "trialSpec.metadata.labels.job-name: job-name is set by sweeper (or the Job "
            "controller) itself: not carried",
            "trialSpec.metadata.annotations.sweeper.dev/sweep: sweeper.dev/sweep is set by "
            "sweeper (or the Job controller) itself: not carried",
            "trialTemplate env JOB_ID: set by sweeper itself: not carried",
            "trialTemplate.trialSpec: not carried: container volumeMounts, pod volumes, pod "
            "nodeSelector, Job backoffLimit (set what the trials need under kubernetes:, e.g. "
            "volumes, or kubernetes.pod_template)",
            "trialTemplate env: the values of TRIAL_NAME, LR differ per trial: the command "
            "starts with `env NAME=VALUE ...`, which sets them for each trial (kubernetes.env "
            "is the same for every trial of a pod)"):
        assert text in notes, text
    assert [n for n in notes if n.startswith("trialSpec.metadata.labels.note: label value ")
            and n.endswith(": not carried")]
    assert spec["kubernetes"]["labels"] == {"team": "vision"}
    assert "sweeper.dev/sweep" not in spec["kubernetes"]["annotations"]
    assert spec["trial"]["command"][:3] == ["env", "TRIAL_NAME=trial-metadata-{index}",
                                            "LR={lr}"]
    # Left as text, with literal braces escaped: the program sees what Katib would have had.
    assert spec["kubernetes"]["env"]["TRIAL_UID"] == "${trialParameters.trialUid}"
    assert "JOB_ID" not in spec["kubernetes"]["env"]
    for note in notes:  # each note is a comment on top of the spec
        assert f"#   - {note}" in result.text.splitlines()


def test_kind_and_api_version_are_those_sweeper_runs(tmp_path: Path) -> None:
    def references(experiment: dict[str, Any]) -> None:
        tt = experiment["spec"]["trialTemplate"]
        tt["trialParameters"] += [{"name": "kind", "reference": "${trialSpec.Kind}"},
                                  {"name": "api", "reference": "${trialSpec.APIVersion}"}]
        master = tt["trialSpec"]["spec"]["pytorchReplicaSpecs"]["Master"]
        master["template"]["spec"]["containers"][0]["env"] = [
            {"name": "KIND", "value": "${trialParameters.kind}"},
            {"name": "API", "value": "${trialParameters.api}"}]

    path = _variant(tmp_path, references,
                    KATIB / "kubeflow-training-operator" / "pytorchjob-mnist.yaml")
    result = import_config("katib", path)
    assert result.spec["kubernetes"]["env"] == {"KIND": "Job", "API": "batch/v1"}
    assert "trialTemplate.trialParameters.kind: ${trialSpec.Kind} -> Job, what sweeper runs " \
           "each trial in (Katib's trial was a PyTorchJob)" in result.notes
    assert "trialTemplate.trialParameters.api: ${trialSpec.APIVersion} -> batch/v1, what " \
           "sweeper runs each trial in (Katib's trial was a kubeflow.org/v1)" in result.notes


STUB = """\
import os, sys
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:])
name = os.environ["TRIAL_NAME"]
prefix, _, index = name.rpartition("-")
assert prefix == "trial-metadata", name
assert flags["log-path"] == f"/katib/{name}.log", flags
print(f"name_index={int(index)}")
print(f"loss={abs(float(flags['lr']) - 0.03):.6f}")
"""


def test_imported_metadata_example_runs_with_its_trial_names(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the local backend: each trial's program sees TRIAL_NAME =
    trial-metadata-<its index> and the same name in its --log-path argument."""
    monkeypatch.chdir(tmp_path)
    stub = tmp_path / "stub.py"
    stub.write_text(STUB)
    out = tmp_path / "spec.yaml"
    result = CliRunner().invoke(cli, ["import", "katib", str(EXAMPLE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    out.write_text(out.read_text().replace("/opt/pytorch-mnist/mnist.py", str(stub))
                   .replace("python3", "python").replace("stop: {value: 0.001, ", "stop: {"))
    result = CliRunner().invoke(cli, ["run", str(out), "--storage", sqlite_url])
    assert result.exit_code == 0, result.output
    trials = load_sweep(open_storage(sqlite_url), "trial-metadata").study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == 4
    assert sorted(t.user_attrs["name_index"] for t in done) == [0, 1, 2, 3]
    for t in done:
        assert t.user_attrs["name_index"] == t.user_attrs[INDEX_ATTR]
