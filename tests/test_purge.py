"""``sweeper delete --purge-artifacts``: the sweep's files off this machine (its artifacts in S3,
its checkpoints in S3 and on a checkpoint volume) go with it, and nothing else does: not
another sweep's, not another identity's under the same name, not the layout from before
identities. Without the flag they stay, and delete says where and how to remove them. Against
moto's S3 server and a directory standing for the volume."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner, Result

from sweeper import protocol
from sweeper.cli import cli
from sweeper.purge import RemoteState
from sweeper.spec import ArtifactsSpec, parse_spec
from sweeper.study import create_or_resume, load_sweep, open_storage
from tests.support.helpers import spec_dict
from tests.support.s3 import S3Server, s3_in_env

OBJECTIVE = """\
def train(ctx):
    ctx.save_checkpoint({"step": 0}, step=0)
    ctx.save_artifact(b"weights", name="model.bin")
    return float(ctx.params["x"])
"""
BUCKET = "sweeps"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3Server]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    with s3_in_env(monkeypatch) as server:
        server.client().create_bucket(Bucket=BUCKET)
        yield server


def _keys(s3: S3Server) -> set[str]:
    listed = s3.client().list_objects_v2(Bucket=BUCKET)
    return {o["Key"] for o in listed.get("Contents", [])}


def _put(s3: S3Server, *keys: str) -> None:
    for key in keys:
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"not this sweep's")


def _s3_spec(tmp_path: Path, name: str, s3: S3Server) -> Path:
    (tmp_path / "purge_objective.py").write_text(OBJECTIVE)
    d = spec_dict(name=name, trial={"entrypoint": "purge_objective:train", "fixed": {},
                                    "retries": 0})
    d["parameters"] = {"x": {"type": "int", "values": [0, 1]}}
    d["artifacts"] = {"store": "s3", "bucket": BUCKET, "prefix": "team",
                      "endpoint_url": s3.endpoint, "region": "us-east-1"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def test_purge_removes_the_sweeps_s3_artifacts_and_checkpoints_and_nothing_else(
        tmp_path: Path, s3: S3Server) -> None:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    before: set[str] = set()
    for name in ("purged", "kept"):
        assert invoke("run", str(_s3_spec(tmp_path, name, s3)), "--storage", url).exit_code == 0
        sweep = load_sweep(open_storage(url), name)
        mine = _keys(s3) - before
        before |= mine
        assert len(mine) == 6  # 2 artifacts, 2 indexes x (checkpoint.pt, checkpoint.json)
        assert sum(k.startswith(f"team/checkpoints/{sweep.state_key}/") for k in mine) == 4
    purged = load_sweep(open_storage(url), "purged").state_key
    kept = load_sweep(open_storage(url), "kept").state_key
    others = {"team/checkpoints/purged/index-0/checkpoint.pt",  # before identities: by name
              "team/checkpoints/purged-0123abcd/index-0/checkpoint.pt",  # another identity
              f"team/checkpoints/{purged}-b-89abcdef/index-0/checkpoint.pt",  # NAME-UID8-b
              "elsewhere/checkpoints/" + purged + "/index-0/checkpoint.pt"}
    _put(s3, *others)

    # Without the flag: the remote files stay, and delete says where and how to remove them.
    result = invoke("delete", "kept", "--storage", url, "--yes")
    assert result.exit_code == 0, result.output
    endpoint = s3.endpoint
    assert [line for line in result.stdout.splitlines() if "s3://" in line] == [
        f"kept 2 artifact(s) in s3://sweeps/team/ and the checkpoints under "
        f"s3://sweeps/team/checkpoints/{kept}/ (no new sweep reads them; `sweeper delete "
        f"--purge-artifacts` removes them with the sweep; once the study is gone: aws s3 rm "
        f"--recursive s3://sweeps/team/checkpoints/{kept}/ --endpoint-url {endpoint})"]
    assert len(_keys(s3)) == 12 + len(others)

    # The question names what goes.
    refused = invoke("delete", "purged", "--storage", url, "--purge-artifacts")
    assert refused.exit_code == 2
    assert (f"2 artifact(s) in s3://sweeps/team/ and the checkpoints under "
            f"s3://sweeps/team/checkpoints/{purged}/") in refused.stderr

    result = invoke("delete", "purged", "--storage", url, "--yes", "--purge-artifacts")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"deleted sweep purged (2 trial(s)) from {url}"
    assert "removed 2 artifact(s) from s3://sweeps/team/" in lines
    assert f"removed 4 checkpoint object(s) under s3://sweeps/team/checkpoints/{purged}/" \
        in lines
    assert not any(line.startswith("kept") for line in lines)
    left = _keys(s3)
    assert others <= left  # another identity, the old layout, another prefix: untouched
    assert len(left - others) == 6  # the kept sweep's files
    assert not any(k.startswith(f"team/checkpoints/{purged}/") for k in left)


def test_a_sweep_from_before_identities_keeps_its_checkpoints_by_name(
        tmp_path: Path, s3: S3Server) -> None:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = parse_spec(_s3_spec(tmp_path, "old", s3).read_text())
    storage = open_storage(url)
    create_or_resume(storage, spec)
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # as a study created by an older sweeper
        conn.execute(sa.text("DELETE FROM study_user_attributes WHERE key = :k"),
                     {"k": protocol.UID_ATTR})
    engine.dispose()
    assert load_sweep(open_storage(url), "old").state_key == "old"
    _put(s3, "team/checkpoints/old/index-0/checkpoint.pt")
    result = invoke("delete", "old", "--storage", url, "--yes", "--purge-artifacts")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "kept the checkpoints under s3://sweeps/team/checkpoints/old/ (a sweep from before "
        "identities: keyed by its name alone, they may be another study's of that name)")
    assert _keys(s3) == {"team/checkpoints/old/index-0/checkpoint.pt"}


def test_an_s3_refusal_is_one_line_and_the_study_stays(tmp_path: Path, s3: S3Server) -> None:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = parse_spec(_s3_spec(tmp_path, "refused", s3).read_text())
    spec = spec.with_overrides(artifacts=ArtifactsSpec(
        store="s3", bucket="no-such-bucket", endpoint_url=s3.endpoint, region="us-east-1"))
    create_or_resume(open_storage(url), spec)
    result = invoke("delete", "refused", "--storage", url, "--yes", "--purge-artifacts")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0].startswith("error: cannot remove the sweep's files from "
                               "s3://no-such-bucket/: ")
    assert "NoSuchBucket" in lines[0] and "test-secret" not in lines[0]
    assert load_sweep(open_storage(url), "refused").uid is not None  # nothing deleted


# --------------------------------------------------------------------------- a volume


VOLUME_SPEC = {"volumes": [{"name": "ckpt", "mount_path": "/ckpt", "pvc": "sweep-ckpt"}],
               "checkpoint_volume": "ckpt"}


def test_purge_removes_the_sweeps_checkpoints_on_a_mounted_volume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint volume's pods write MOUNT/checkpoints/NAME-UID8/; where the volume is
    mounted on this machine (--volume-dir), --purge-artifacts removes that directory only."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    storage = open_storage(url)
    sweep, _ = create_or_resume(storage, parse_spec(yaml.safe_dump(
        spec_dict(name="on-vol", kubernetes=VOLUME_SPEC), sort_keys=False)))
    storage.set_study_user_attr(sweep.study_id, protocol.LAUNCHES_ATTR, 1)  # ran on Kubernetes
    key = sweep.state_key
    volume = tmp_path / "mnt"
    for d in (key, "on-vol", "on-vol-0123abcd"):
        (volume / "checkpoints" / d / "index-0").mkdir(parents=True)
        (volume / "checkpoints" / d / "index-0" / "checkpoint.pt").write_bytes(b"w")

    refused = invoke("delete", "on-vol", "--storage", url, "--no-kubernetes")
    assert refused.exit_code == 2
    assert (f"(kept: the checkpoints in /ckpt/checkpoints/{key}/ on the cluster's volume 'ckpt' "
            "(no new sweep reads them; `sweeper delete --purge-artifacts` removes them with the "
            f"sweep; once the study is gone: rm -r /ckpt/checkpoints/{key} where the volume is "
            "mounted))") in refused.stderr
    alone = invoke("delete", "on-vol", "--storage", url, "--volume-dir", str(volume))
    assert alone.exit_code == 2 and "--volume-dir goes with --purge-artifacts" in alone.stderr

    result = invoke("delete", "on-vol", "--storage", url, "--yes", "--no-kubernetes",
                    "--purge-artifacts", "--volume-dir", str(volume))
    assert result.exit_code == 0, result.output
    assert f"removed the checkpoints {volume / 'checkpoints' / key} (volume 'ckpt')" \
        in result.stdout.splitlines()
    assert sorted(p.name for p in (volume / "checkpoints").iterdir()) == \
        ["on-vol", "on-vol-0123abcd"]


def test_a_volume_not_mounted_here_is_kept_and_said_so() -> None:
    from sweeper.purge import purge

    state = RemoteState("v-01234567", True, volume=("ckpt", "/no/such/mount",
                                                    "/no/such/mount/checkpoints"))
    removed, left = purge(state, None)
    assert removed == []
    assert left == ["the checkpoints in /no/such/mount/checkpoints/v-01234567/ on the "
                    "cluster's volume 'ckpt': it is not mounted here (--volume-dir DIR says "
                    "where it is)"]


def test_a_filesystem_store_leaves_nothing_remote(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A filesystem store: delete removes its files as before, with or without the flag, and
    there is nothing remote to keep."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    (tmp_path / "purge_objective.py").write_text(OBJECTIVE)
    d = spec_dict(name="local", trial={"entrypoint": "purge_objective:train", "fixed": {},
                                       "retries": 0})
    d["parameters"] = {"x": {"type": "int", "values": [0, 1]}}
    (tmp_path / "local.yaml").write_text(json.dumps(d))
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    assert invoke("run", str(tmp_path / "local.yaml"), "--storage", url).exit_code == 0
    result = invoke("delete", "local", "--storage", url, "--yes", "--purge-artifacts")
    assert result.exit_code == 0, result.output
    assert "removed 2 artifact file(s) from " in result.stdout
    assert "kept" not in result.stdout and "s3://" not in result.stdout
