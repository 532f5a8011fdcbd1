"""The code identity of launches on this machine: a local sweep records its snapshot on the
sweep and every trial (the same hash a cluster sweep of the same spec records), a changed code
directory is noted and recorded per trial; ``render`` publishes the snapshot to an artifact
store and the Job names it; a bad code directory stops a launch with nothing written."""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml
from click.testing import CliRunner, Result

from sweeper import protocol
from sweeper.cli import cli
from sweeper.code.snapshot import pack
from sweeper.code.stores import artifact_key

SPEC = """
name: {name}
method: random
trials: {values}
objective: {{metric: loss, direction: minimize}}
parallelism: 1
trial:
  entrypoint: snapmod_{name}:objective
{extra}parameters:
  x: {{type: float, low: 0, high: 1}}
"""
MODULE = "def objective(ctx):\n    return float(ctx.params['x']) + {offset}\n"


def _write(tmp_path: Path, name: str, values: str = "2", extra: str = "",
           offset: int = 0) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / f"snapmod_{name}.py").write_text(MODULE.format(offset=offset))
    spec = code / "sweep.yaml"
    spec.write_text(SPEC.format(name=name, values=values, extra=extra))
    return spec


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_a_local_sweep_records_its_snapshot_per_trial(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sweeps.db"
    spec = _write(tmp_path, "loc")
    first = pack(spec.parent, (spec.name,)).digest
    result = _run("run", str(spec), "--storage", url)
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="loc", storage=url)
    assert study.user_attrs[protocol.CODE_ATTR] == first
    assert {t.user_attrs[protocol.CODE_ATTR] for t in study.trials} == {first}

    # Grown, the code as it was: the spec file is not part of the snapshot.
    spec = _write(tmp_path, "loc", values="3")
    grown = _run("run", str(spec), "--storage", url)
    assert grown.exit_code == 0 and "changed" not in grown.stderr, grown.output
    assert optuna.load_study(study_name="loc", storage=url).trials[2].user_attrs[
        protocol.CODE_ATTR] == first

    # Grown with edited code: a local launch runs the code on disk, says so, records it.
    spec = _write(tmp_path, "loc", values="4", offset=1)
    second = pack(spec.parent, (spec.name,)).digest
    assert second != first
    result = _run("run", str(spec), "--storage", url)
    assert result.exit_code == 0, result.output
    assert "code of sweep loc changed" in result.stderr
    study = optuna.load_study(study_name="loc", storage=url)
    by_index = {t.user_attrs[protocol.INDEX_ATTR]: t.user_attrs[protocol.CODE_ATTR]
                for t in study.trials}
    assert by_index == {0: first, 1: first, 2: first, 3: second}
    assert study.user_attrs[protocol.CODE_ATTR] == second

    shown = _run("status", "loc", "--storage", url, "--format", "json")
    record = yaml.safe_load(shown.stdout)
    assert record["code"] == second
    assert [i["code"] for i in record["per_index"]] == [first, first, first, second]
    exported = _run("export", "loc", "--storage", url, "--format", "json")
    assert {t["code"] for t in yaml.safe_load(exported.stdout)["trials"]} == {first, second}


def test_trial_code_null_records_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sweeps.db"
    spec = _write(tmp_path, "nul", extra="  code: null\n")
    assert _run("run", str(spec), "--storage", url).exit_code == 0
    study = optuna.load_study(study_name="nul", storage=url)
    assert protocol.CODE_ATTR not in study.user_attrs
    assert all(protocol.CODE_ATTR not in t.user_attrs for t in study.trials)


def test_a_missing_code_directory_stops_the_launch_with_nothing_written(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sweeps.db"
    spec = _write(tmp_path, "mis", extra="  code: ../nowhere\n")
    result = CliRunner().invoke(cli, ["run", str(spec), "--storage", url])
    assert result.exit_code == 2
    assert "nowhere" in result.stderr and "does not exist" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "sweeps.db").exists()


def test_render_publishes_the_snapshot_to_the_artifact_store(tmp_path: Path) -> None:
    store = tmp_path / "shared"
    spec = _write(tmp_path, "ren")
    spec.write_text(spec.read_text().replace(
        "parameters:", f"artifacts: {{store: filesystem, path: {store}}}\nparameters:"))
    digest = pack(spec.parent, (spec.name,)).digest
    result = CliRunner().invoke(cli, ["render", str(spec)])
    assert result.exit_code == 0, result.output
    assert digest in result.stderr and "uploaded to" in result.stderr
    assert (store / artifact_key(digest)).read_bytes() == \
        pack(spec.parent, (spec.name,)).data
    job = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env[protocol.ENV_CODE] == digest and env[protocol.ENV_CODE_STORE] == "artifacts"
    assert env[protocol.ENV_SPEC_DIR] == protocol.CODE_MOUNT_PATH
    assert {"name": protocol.CODE_VOLUME, "emptyDir": {}} in pod["volumes"]
    assert {"name": protocol.CODE_VOLUME, "mountPath": protocol.CODE_MOUNT_PATH} in \
        pod["containers"][0]["volumeMounts"]
    again = CliRunner().invoke(cli, ["render", str(spec)])
    assert "already in" in again.stderr


def test_render_with_storage_keeps_the_snapshot_in_the_study(tmp_path: Path) -> None:
    from sweeper.code.stores import StudyCodeStore
    from sweeper.study import load_sweep, open_storage

    url = f"sqlite:///{tmp_path}/sweeps.db"
    spec = _write(tmp_path, "rst")
    snap = pack(spec.parent, (spec.name,))
    result = CliRunner().invoke(cli, ["render", str(spec), "--storage", url])
    assert result.exit_code == 0, result.output
    assert "stored in sweep rst" in result.stderr
    job = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Job")
    env = {e["name"]: e.get("value")
           for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[protocol.ENV_CODE] == snap.digest and env[protocol.ENV_CODE_STORE] == "study"
    storage = open_storage(url)
    sweep = load_sweep(storage, "rst")
    assert StudyCodeStore(storage, sweep.study_id, "s").get(snap.digest) == snap.data
    storage.close()
    (spec.parent / "snapmod_rst.py").write_text(MODULE.format(offset=5))
    # No trial ran the recorded snapshot: the new one replaces it, with a note.
    again = CliRunner().invoke(cli, ["render", str(spec), "--storage", url])
    assert again.exit_code == 0, again.output
    assert "no trial ran it" in again.stderr
    assert pack(spec.parent, (spec.name,)).digest in again.stdout


def test_resume_by_name_packs_the_same_tree_without_the_spec_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sweeps.db"
    spec = _write(tmp_path, "rsm")
    assert _run("run", str(spec), "--storage", url).exit_code == 0
    study = optuna.load_study(study_name="rsm", storage=url)
    assert study.user_attrs[protocol.CODE_SPEC_FILE_ATTR] == "sweep.yaml"
    resumed = _run("resume", "rsm", "--storage", url)
    assert resumed.exit_code == 0 and "changed" not in resumed.stderr, resumed.output
    (spec.parent / "snapmod_rsm.py").write_text(MODULE.format(offset=2))
    edited = _run("resume", "rsm", "--storage", url)
    assert edited.exit_code == 0 and "code of sweep rsm changed" in edited.stderr
