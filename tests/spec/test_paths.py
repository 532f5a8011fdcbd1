"""Relative paths in a spec resolve against the spec file's directory (command scripts, the
entrypoint's module, artifacts.path), so a sweep runs the same from any working directory;
where the file lives changes neither the record's command nor the hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.protocol import SPEC_DIR_ATTR
from sweeper.spec import load_spec
from sweeper.spec.paths import resolve_arg, resolve_command, resolve_fixed, script_of
from sweeper.study import create_or_resume, load_sweep, open_storage

TRAIN = """\
import sys
x = float(sys.argv[sys.argv.index("--x") + 1])
print(f"loss={(x - 0.3) ** 2}")
"""


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _spec(path: Path, name: str, trial: dict[str, object], **extra: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "name": name, "method": "grid", "objective": {"metric": "loss", "direction": "minimize"},
        "parallelism": 2, "trial": {"retries": 0, **trial},
        "parameters": {"x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.5}}, **extra},
        sort_keys=False))
    return path


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory: not the spec's (the spec lives in tmp_path/project/sub)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    return work


# --------------------------------------------------------------------------- pure resolution


def test_arguments_that_name_files_next_to_the_spec_resolve_there(tmp_path: Path) -> None:
    base = str(tmp_path)
    (tmp_path / "train.py").write_text("")
    (tmp_path / "data").mkdir()
    (tmp_path / "conf.yaml").write_text("")
    (tmp_path / "run.sh").write_text("")
    command = ["python", "-u", "train.py", "--data", "data/", "--config=conf.yaml",
               "--lr", "{lr}", "{out}/model.pt", "absent.py", "0.01", "train", "/abs/x.py"]
    assert resolve_command(command, base) == (
        "python", "-u", str(tmp_path / "train.py"), "--data", str(tmp_path / "data"),
        f"--config={tmp_path / 'conf.yaml'}", "--lr", "{lr}", "{out}/model.pt",
        "absent.py", "0.01", "train", "/abs/x.py")
    assert resolve_command(command, None) == tuple(command)
    # The program: a path is resolved, a bare name is for PATH (as exec does).
    assert resolve_arg("./run.sh", base, first=True) == str(tmp_path / "run.sh")
    assert resolve_arg("run.sh", base, first=True) == "run.sh"
    assert script_of(["python", "-u", "train.py", "--x", "{x}"]) == "train.py"
    assert script_of(["./run.sh", "a.py"]) == "./run.sh"
    assert script_of(["torchrun", "--nproc_per_node", "2", "train.py"]) == "train.py"
    assert script_of(["python", "-c", "print(1)"]) is None


def test_where_the_spec_lives_changes_neither_hash_nor_command(tmp_path: Path,
                                                               sqlite_url: str) -> None:
    trial = {"command": ["python", "train.py", "--x", "{x}"]}
    here = load_spec(_spec(tmp_path / "a" / "s.yaml", "moved", trial,
                           artifacts={"store": "filesystem", "path": "out"}))
    there = load_spec(_spec(tmp_path / "b" / "deeper" / "s.yaml", "moved", trial,
                            artifacts={"store": "filesystem", "path": "out"}))
    assert here.spec_hash == there.spec_hash
    assert here.to_dict()["trial"]["command"] == ["python", "train.py", "--x", "{x}"]
    assert here.base_dir == str(tmp_path / "a") and there.base_dir == str(tmp_path / "b/deeper")
    assert here.artifacts.path == str(tmp_path / "a" / "out")  # relative to the spec file
    absolute = load_spec(_spec(tmp_path / "c" / "s.yaml", "moved", trial,
                               artifacts={"store": "filesystem", "path": "/mnt/x"}))
    assert absolute.artifacts.path == "/mnt/x"
    storage = open_storage(sqlite_url)
    create_or_resume(storage, here)
    sweep, created = create_or_resume(storage, there)  # the moved spec resumes the sweep
    assert not created and sweep.grown_from is None
    assert load_sweep(storage, "moved").spec.base_dir == there.base_dir  # last launch's


# --------------------------------------------------------------------------- validate


def test_validate_checks_the_script_next_to_the_spec(elsewhere: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "project" / "sub" / "spec.yaml", "scripted",
                 {"command": ["python", "train.py", "--x", "{x}"]})
    result = invoke("validate", str(spec))
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {spec}: trial.command: script 'train.py' not "
                                     f"found: no {spec.parent / 'train.py'}")
    (spec.parent / "train.py").write_text(TRAIN)
    assert invoke("validate", str(spec)).exit_code == 0  # from elsewhere: found next to it
    assert invoke("validate", str(spec), "--no-import").exit_code == 0
    # The image's own paths are not checkable: --no-import skips the check.
    (spec.parent / "train.py").unlink()
    assert invoke("validate", str(spec), "--no-import").exit_code == 0


def test_validate_leaves_the_paths_of_a_named_image_to_the_image(elsewhere: Path,
                                                                  tmp_path: Path) -> None:
    """A spec that names its image runs its command there: /opt/app/train.py is the image's,
    so validate passes and says in one line that it did not look; a local run still looks,
    as it runs the command on this machine."""
    spec = _spec(tmp_path / "project" / "spec.yaml", "in-image",
                 {"command": ["python3", "/opt/app/train.py", "--x", "{x}"]},
                 kubernetes={"image": "registry.example.com/team/train:1"})
    result = invoke("validate", str(spec))
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "note: trial.command runs in kubernetes.image registry.example.com/team/train:1: its "
        "script '/opt/app/train.py' is the image's, not looked for on this machine (a local "
        "run, `sweeper run --backend local`, checks it)"]
    result = invoke("validate", str(spec), "--no-import")  # nothing looked for: nothing said
    assert result.exit_code == 0 and result.stderr == ""
    result = invoke("run", str(spec), "--storage", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {spec}: trial.command: script "
                                     "'/opt/app/train.py' not found: no /opt/app/train.py")
    # Sweeper's own default image holds no user script: such a spec is checked here.
    default = _spec(tmp_path / "project" / "default.yaml", "default-image",
                    {"command": ["python3", "/opt/app/train.py", "--x", "{x}"]},
                    kubernetes={"image": "sweeper-trial-runner:0.1.0"})
    assert invoke("validate", str(default)).exit_code == 2


# --------------------------------------------------------------------------- run


def test_run_a_command_spec_from_another_directory(elsewhere: Path, tmp_path: Path) -> None:
    spec = _spec(tmp_path / "project" / "sub" / "spec.yaml", "cmd-elsewhere",
                 {"command": ["python", "train.py", "--x", "{x}"]})
    (spec.parent / "train.py").write_text(TRAIN)
    result = invoke("run", str(spec))
    assert result.exit_code == 0, result.output
    status = json.loads(invoke("status", str(spec), "--format", "json").stdout)
    assert status["trials_by_state"] == {"COMPLETE": 3}
    best = json.loads(invoke("best", str(spec)).stdout)
    assert best["values"]["loss"] == pytest.approx(0.04)  # x = 0.5
    storage = open_storage("sqlite:///sweeps.db")
    attrs = storage.get_study_user_attrs(storage.get_study_id_from_name("cmd-elsewhere"))
    assert attrs[SPEC_DIR_ATTR] == str(spec.parent)


def test_run_an_entrypoint_next_to_the_spec_with_artifacts_there(elsewhere: Path,
                                                                  tmp_path: Path) -> None:
    spec = _spec(tmp_path / "project" / "sub" / "spec.yaml", "ep-elsewhere",
                 {"entrypoint": "paths_test_objective:train"},
                 artifacts={"store": "filesystem", "path": "models"})
    (spec.parent / "paths_test_objective.py").write_text(
        "def train(ctx):\n"
        "    ctx.save_artifact(b'weights', name='model.bin')\n"
        "    return (ctx.params['x'] - 0.3) ** 2\n")
    result = invoke("run", str(spec))
    assert result.exit_code == 0, result.output
    assert len(list((spec.parent / "models").iterdir())) == 3
    assert not (elsewhere / "models").exists()
    download = invoke("best", "ep-elsewhere", "--download", str(elsewhere / "best"))
    assert download.exit_code == 0, download.output
    assert (elsewhere / "best" / "model.bin").read_bytes() == b"weights"


def test_resume_by_name_finds_the_spec_directory_in_the_record(elsewhere: Path,
                                                               tmp_path: Path) -> None:
    spec = _spec(tmp_path / "project" / "sub" / "spec.yaml", "resume-elsewhere",
                 {"command": ["python", "train.py", "--x", "{x}"]})
    (spec.parent / "train.py").write_text(TRAIN)
    create_or_resume(open_storage("sqlite:///sweeps.db"), load_spec(spec))  # planned only
    result = invoke("resume", "resume-elsewhere")
    assert result.exit_code == 0, result.output
    status = json.loads(invoke("status", "resume-elsewhere", "--format", "json").stdout)
    assert status["trials_by_state"] == {"COMPLETE": 3}


def test_a_relative_sqlite_storage_is_the_file_next_to_the_spec(elsewhere: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """`storage: sqlite:///my.db` is the spec's my.db from any working directory: the same
    spec run from two directories uses one database (the second run resumes), and status
    given the spec's path from a third finds it."""
    spec = _spec(tmp_path / "project" / "sub" / "spec.yaml", "db-next-to-spec",
                 {"command": ["python", "train.py", "--x", "{x}"]}, storage="sqlite:///my.db")
    (spec.parent / "train.py").write_text(TRAIN)
    assert invoke("run", str(spec)).exit_code == 0
    assert (spec.parent / "my.db").is_file() and not (elsewhere / "my.db").exists()
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    again = invoke("run", str(spec))
    assert again.exit_code == 0, again.output
    assert "3 of 3 indexes already finished" in again.output
    status = json.loads(invoke("status", str(spec), "--format", "json").stdout)
    assert status["trials_by_state"] == {"COMPLETE": 3}
    assert not (other / "my.db").exists()


def test_a_local_data_path_is_relative_to_the_spec(elsewhere: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # tests.support
    spec = _spec(tmp_path / "project" / "sub" / "spec.yaml", "data-next-to-spec",
                 {"entrypoint": "tests.support.cluster_objectives:reads_data"},
                 data={"path": "dataset"})
    (spec.parent / "dataset").mkdir()
    (spec.parent / "dataset" / "a").write_text("2\n")
    (spec.parent / "dataset" / "b").write_text("3\n")
    result = invoke("run", str(spec))
    assert result.exit_code == 0, result.output
    status = json.loads(invoke("status", str(spec), "--format", "json").stdout)
    assert status["trials_by_state"] == {"COMPLETE": 3}
    best = json.loads(invoke("best", str(spec)).stdout)
    assert best["values"]["loss"] == pytest.approx(5.0)  # 2 + 3 + x = 0


# --------------------------------------------------------------------------- trial.fixed


def test_fixed_values_that_name_files_next_to_the_spec_resolve_there(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("")
    (tmp_path / "vocab").mkdir()
    (tmp_path / "resnet18").mkdir()  # a bare word is a value, not a path, even when it exists
    fixed = {"table": "data/train.csv", "vocab": "./vocab", "arch": "resnet18",
             "out": "runs/model.pt", "epochs": 3, "flag": "-data/train.csv",
             "abs": "/etc/hosts", "tmpl": "{x}/data", "lr": "1e-3"}
    assert resolve_fixed(fixed, str(tmp_path)) == {
        "table": str(tmp_path / "data" / "train.csv"), "vocab": str(tmp_path / "vocab")}
    assert resolve_fixed(fixed, None) == {}


def test_the_same_spec_from_two_directories_gives_the_trial_one_absolute_path(
        elsewhere: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trial.fixed: {table: data/train.csv} is the file next to the spec wherever `sweeper run`
    starts; a path that is not there, and a word, reach the trial as written."""
    spec = _spec(tmp_path / "project" / "sub" / "spec.yaml", "fixed-paths",
                 {"entrypoint": "fixed_paths_objective:train",
                  "fixed": {"table": "data/train.csv", "out": "out/model.pt", "arch": "sgd"}})
    (spec.parent / "fixed_paths_objective.py").write_text(
        "def train(ctx):\n"
        "    for key in ('table', 'out', 'arch'):\n"
        "        ctx.set(key, ctx.params[key])\n"
        "    return ctx.params['x']\n")
    (spec.parent / "data").mkdir()
    (spec.parent / "data" / "train.csv").write_text("1\n")
    (spec.parent / "sgd").mkdir()
    seen = []
    for work in ("a", "b"):
        (tmp_path / work).mkdir()
        monkeypatch.chdir(tmp_path / work)
        db = f"sqlite:///{tmp_path / work / 's.db'}"
        result = invoke("run", str(spec), "--storage", db)
        assert result.exit_code == 0, result.output
        sweep = load_sweep(open_storage(db), "fixed-paths")
        trials = sweep.study().trials
        assert len(trials) == 3
        seen += [(t.user_attrs["table"], t.user_attrs["out"], t.user_attrs["arch"])
                 for t in trials]
        assert sweep.spec.trial.fixed["table"] == "data/train.csv"  # the record: as written
    assert set(seen) == {(str(spec.parent / "data" / "train.csv"), "out/model.pt", "sgd")}
