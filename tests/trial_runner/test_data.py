"""The spec's ``data:``: every trial reads the dataset as ``ctx.data_dir`` (a command trial as
$SWEEPER_DATA_DIR). An S3 prefix (moto's server) is synced once per machine into a cache
directory that the local workers share; a missing bucket or prefix is one clear line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.spec import DataSpec
from sweeper.study.urls import driver_url
from tests.support.s3 import S3Server, s3_in_env
from trial_runner.data import DataError, cache_key, data_dir, sync

DATASET = {"train/a.txt": "1", "train/b.txt": "2", "train/deep/c.txt": "3", "other.txt": "100"}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[S3Server]:
    with s3_in_env(monkeypatch) as server:
        client = server.client()
        client.create_bucket(Bucket="datasets")
        for key, body in DATASET.items():
            client.put_object(Bucket="datasets", Key=f"digits/{key}", Body=body.encode())
        yield server


def _run(tmp_path: Path, data: dict[str, Any], **trial: Any) -> Result:
    spec = {"name": "data-sweep", "method": "grid", "parallelism": 2,
            "objective": {"metric": "loss", "direction": "minimize"},
            "trial": {"entrypoint": "tests.support.cluster_objectives:reads_data",
                      "retries": 0, **trial},
            "parameters": {"x": {"type": "int", "low": 0, "high": 3}}, "data": data}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return CliRunner().invoke(cli, ["run", str(path), "--storage", _url(tmp_path),
                                    "--log-dir", str(tmp_path / "logs")],
                              env={"SWEEPER_DATA_CACHE": str(tmp_path / "cache")},
                              catch_exceptions=False)


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 's.db'}"


def _logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((tmp_path / "logs").rglob("*.log")))


def test_s3_dataset_is_synced_once_per_machine_and_read_by_every_trial(
        tmp_path: Path, s3: S3Server) -> None:
    result = _run(tmp_path, {"s3": "s3://datasets/digits/train", "endpoint_url": s3.endpoint,
                             "region": "us-east-1"})
    assert result.exit_code == 0, result.output
    trials = optuna.load_study(study_name="data-sweep",
                               storage=driver_url(_url(tmp_path))).trials
    assert len(trials) == 4
    for t in trials:  # 1 + 2 + 3 from the prefix's three files, nothing from other.txt
        assert t.value == 6 + t.params["x"]
        assert t.user_attrs["data_files"] == ["a.txt", "b.txt", "deep/c.txt"]
    assert len({t.user_attrs["data_dir"] for t in trials}) == 1
    logs = _logs(tmp_path)
    # Two workers, four trials: one download; the other worker found it (or waited for it),
    # and each worker's later trials use it without asking again.
    assert logs.count("data: downloading s3://datasets/digits/train: 3 files, 3 B") == 1
    assert logs.count("data: downloaded 3 files (3 B)") == 1
    assert logs.count("data: s3://datasets/digits/train is in ") <= 1
    assert "data: 3/3 files, 3 B/3 B" in logs


def test_missing_bucket_and_prefix_are_one_line(tmp_path: Path, s3: S3Server) -> None:
    (tmp_path / "a").mkdir()
    nobucket = _run(tmp_path / "a", {"s3": "s3://no-such-bucket/x",
                                     "endpoint_url": s3.endpoint, "region": "us-east-1"})
    assert nobucket.exit_code == 2, nobucket.output
    assert "data: s3://no-such-bucket/x: no such bucket 'no-such-bucket'" in nobucket.output
    assert "Traceback" not in nobucket.output and "test-secret" not in nobucket.output
    (tmp_path / "b").mkdir()
    noprefix = _run(tmp_path / "b", {"s3": "s3://datasets/nothing-here",
                                     "endpoint_url": s3.endpoint, "region": "us-east-1"})
    assert noprefix.exit_code == 2, noprefix.output
    assert "data: s3://datasets/nothing-here: no objects under this prefix" in noprefix.output


def test_a_directory_and_command_trials(tmp_path: Path) -> None:
    data = tmp_path / "dataset"
    (data / "sub").mkdir(parents=True)
    (data / "one.txt").write_text("1")
    (data / "sub" / "two.txt").write_text("2")
    result = _run(tmp_path, {"path": str(data)})
    assert result.exit_code == 0, result.output
    trials = optuna.load_study(study_name="data-sweep",
                               storage=driver_url(_url(tmp_path))).trials
    assert {t.user_attrs["data_dir"] for t in trials} == {str(data)}
    assert sorted(t.value for t in trials) == [3.0, 4.0, 5.0, 6.0]

    (tmp_path / "cmd").mkdir()
    script = "import os; print('loss=' + open(os.environ['SWEEPER_DATA_DIR'] + '/one.txt')" \
             ".read())"
    cmd = _run(tmp_path / "cmd", {"path": str(data)}, entrypoint=None,
               command=["python", "-c", script])
    assert cmd.exit_code == 0, cmd.output


def test_a_missing_directory_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^data: /no/such/dir is not a directory here"):
        data_dir(DataSpec(path="/no/such/dir"), {})
    assert data_dir(DataSpec(), {}) is None


def test_a_partial_download_is_never_the_dataset(tmp_path: Path, s3: S3Server) -> None:
    """A download that stops half way leaves no dataset behind; the next sync redoes it."""
    spec = DataSpec(bucket="datasets", prefix="digits", endpoint_url=s3.endpoint,
                    region="us-east-1")
    key = cache_key(spec)
    (tmp_path / f".{key}.part").mkdir()  # what a killed download leaves
    (tmp_path / f".{key}.part" / "a.txt").write_text("stale")
    target = sync(spec, tmp_path)
    assert target == tmp_path / key and (tmp_path / f"{key}.complete").exists()
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) \
        == sorted(DATASET)
    assert not (tmp_path / f".{key}.part").exists()
