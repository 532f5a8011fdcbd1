"""Artifacts: the spec's ``artifacts:`` key, the filesystem store end to end (a real digits sweep,
download, torch.load), and the S3 store against moto's server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml

from sweeper.artifacts import (
    PrefixedStore,
    dashboard_artifacts_spec,
    default_artifact_dir,
    describe,
    open_artifact_store,
    upload,
)
from sweeper.errors import ArtifactError, SpecError
from sweeper.spec import ArtifactsSpec, parse_spec, parse_spec_dict
from sweeper.study import create_or_resume, load_sweep, open_storage
from tests.support.compare import invoke, isolate, quadratic_spec, run_sweep
from tests.support.s3 import s3_in_env

BASE = """\
name: art
method: random
objective: {metric: loss, direction: minimize}
trials: 2
trial: {entrypoint: "trial_runner.examples.synthetic:quadratic"}
parameters:
  x: {type: float, low: 0, high: 1}
"""


def _spec(artifacts_yaml: str) -> ArtifactsSpec:
    return parse_spec(BASE + artifacts_yaml, source="s.yaml").artifacts


# --------------------------------------------------------------------------- spec


def test_default_is_the_filesystem_store_next_to_the_study() -> None:
    assert _spec("") == ArtifactsSpec()
    assert default_artifact_dir("sqlite:///sweeps.db") == Path("sweeps-artifacts")
    assert default_artifact_dir("sqlite:////data/x/runs.db") == Path("/data/x/runs-artifacts")
    assert default_artifact_dir("sqlite:///rel/dir/a.db?timeout=5") == Path("rel/dir/a-artifacts")
    assert default_artifact_dir("postgresql://u:pw@db/sweeps") == Path("sweeper-artifacts")
    assert describe(ArtifactsSpec(), "sqlite:////d/s.db") == "/d/s-artifacts"


def test_filesystem_and_s3_specs_parse_and_round_trip() -> None:
    fs = _spec("artifacts: {store: filesystem, path: /mnt/shared/art}\n")
    assert fs == ArtifactsSpec(store="filesystem", path="/mnt/shared/art")
    s3 = _spec("artifacts:\n  store: s3\n  bucket: my-models\n  prefix: /team/sweeps/\n"
               "  endpoint_url: http://minio.sweeper:9000\n  region: eu-west-1\n"
               "  credentials_secret: sweeper-s3\n")
    assert s3 == ArtifactsSpec(store="s3", bucket="my-models", prefix="team/sweeps",
                               endpoint_url="http://minio.sweeper:9000", region="eu-west-1",
                               credentials_secret="sweeper-s3")
    assert describe(s3, "sqlite:///x.db") == "s3://my-models/team/sweeps/ at " \
                                             "http://minio.sweeper:9000"
    for artifacts in (fs, s3, ArtifactsSpec()):
        full = parse_spec(BASE).with_overrides(artifacts=artifacts)
        again = parse_spec_dict(json.loads(json.dumps(full.to_dict())))
        assert again.artifacts == artifacts
        # Where files go does not change what the trials are: same sweep, same hash.
        assert full.spec_hash == parse_spec(BASE).spec_hash


@pytest.mark.parametrize(("text", "line", "message"), [
    ("artifacts: {store: s3, bucke: b}\n", 8, r"artifacts\.bucke: unknown key 'bucke'; "
                                              r"did you mean 'bucket'\?"),
    ("artifacts: {store: minio}\n", 8, r"artifacts\.store: must be one of filesystem, s3, "
                                       r"got 'minio'"),
    ("artifacts: {store: s3}\n", 8, r"artifacts: missing required key 'bucket'"),
    ("artifacts:\n  store: s3\n  bucket: b1b\n  aws_secret_access_key: x\n", 11,
     r"artifacts\.aws_secret_access_key: credentials never go in the spec"),
    ("artifacts: {bucket: models}\n", 8,
     r"artifacts\.bucket: 'bucket' applies to store: s3, not filesystem"),
    ("artifacts: {store: s3, bucket: b1b, path: /x}\n", 8,
     r"artifacts\.path: 'path' applies to store: filesystem, not s3"),
    ("artifacts: {store: s3, bucket: My_Bucket}\n", 8, r"not a valid bucket name"),
    ("artifacts: {store: s3, bucket: b1b, endpoint_url: 'http://ak:sk@minio:9000'}\n", 8,
     r"artifacts\.endpoint_url: credentials never go in the spec"),
    ("artifacts: {store: s3, bucket: b1b, endpoint_url: minio:9000}\n", 8,
     r"expected http\(s\)://host\[:port\]"),
    ("artifacts: /tmp/x\n", 8, r"artifacts: expected a mapping"),
])
def test_bad_artifacts_specs_are_one_clear_line(text: str, line: int, message: str) -> None:
    with pytest.raises(SpecError, match=message) as info:
        parse_spec(BASE + text, source="s.yaml")
    assert str(info.value).startswith(f"s.yaml:{line}: artifacts")


# --------------------------------------------------------------------------- stores


def test_prefixed_store_and_upload_of_bytes_and_files(tmp_path: Path) -> None:
    inner = open_artifact_store(ArtifactsSpec(path=str(tmp_path / "store")), "sqlite:///x.db")
    (tmp_path / "store" / "team" / "s1").mkdir(parents=True)
    store = PrefixedStore(inner, "/team/s1/")
    study = optuna.create_study()
    trial = study.ask()
    a = upload(store, trial, b"weights", name="sub/dir/model.pt")
    src = tmp_path / "notes.txt"
    src.write_text("hello")
    b = upload(store, trial, src, name="renamed.txt")
    c = upload(store, trial, str(src))
    assert (tmp_path / "store" / "team" / "s1" / a).read_bytes() == b"weights"
    frozen = study.trials[trial.number]
    from sweeper.artifacts import trial_artifacts

    assert [(x.filename, x.artifact_id) for x in trial_artifacts(frozen)] == sorted(
        [("model.pt", a), ("renamed.txt", b), ("notes.txt", c)])
    with pytest.raises(ValueError, match="needs name="):
        upload(store, trial, b"x")
    with pytest.raises(FileNotFoundError):
        upload(store, trial, tmp_path / "missing.bin")


def test_readers_never_create_the_directory(tmp_path: Path) -> None:
    spec = ArtifactsSpec(path=str(tmp_path / "nope"))
    open_artifact_store(spec, "sqlite:///x.db", create=False)
    assert not (tmp_path / "nope").exists()
    open_artifact_store(spec, "sqlite:///x.db")
    assert (tmp_path / "nope").is_dir()


# --------------------------------------------------------------------------- filesystem, end to end


def test_digits_saves_its_model_and_best_downloads_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The real thing: the built-in PyTorch example, two trials, the default store next to the
    SQLite file, `sweeper best --download`, and the model loads into the same architecture."""
    import torch
    from torch import nn

    isolate(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'db' / 'sweeps.db'}"
    (tmp_path / "db").mkdir()
    spec = {"name": "digits-art", "method": "grid",
            "objective": {"metric": "val_accuracy", "direction": "maximize"},
            "parallelism": 2,
            "trial": {"entrypoint": "trial_runner.examples.digits:train",
                      "fixed": {"epochs": 2, "batch_size": 128}, "retries": 0},
            "parameters": {"hidden": {"type": "int", "values": [16, 32]},
                           "lr": {"type": "float", "values": [0.01]}}}
    run_sweep(tmp_path, url, spec)
    assert len(list((tmp_path / "db" / "sweeps-artifacts").iterdir())) == 2

    out = tmp_path / "best-model"
    result = invoke("best", "digits-art", "--storage", url, "--download", str(out))
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)
    assert [a["filename"] for a in best["artifacts"]] == ["model.pt"]
    assert best["device"] == "cpu" and best["code_version"] == "test-build-1"
    assert f"trial #{best['number']}: {out / 'model.pt'}" in result.stderr

    state = torch.load(out / "model.pt", weights_only=True)
    hidden = best["params"]["hidden"]
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.0),
                          nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    model.load_state_dict(state)
    from sklearn.datasets import load_digits

    x, _ = load_digits(return_X_y=True)
    assert model(torch.as_tensor(x[:8] / 16.0, dtype=torch.float32)).shape == (8, 10)

    # Downloading again replaces the files; a trial without artifacts is an error.
    assert invoke("best", "digits-art", "--storage", url, "--download", str(out)).exit_code == 0


def test_best_download_without_artifacts_fails_clearly(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = quadratic_spec("no-art", trials=2)
    spec["trial"]["fixed"] = {"epochs": 1}
    run_sweep(tmp_path, url, spec)
    result = invoke("best", "no-art", "--storage", url, "--download", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert "saved no artifacts (store: " in result.stderr


def test_dashboard_store_is_the_one_the_sweeps_share(sqlite_url: str) -> None:
    storage = open_storage(sqlite_url)
    assert dashboard_artifacts_spec(storage) == ArtifactsSpec()
    shared = ArtifactsSpec(path="/srv/art")
    for name in ("a", "b"):
        spec = parse_spec(BASE.replace("name: art", f"name: {name}"))
        create_or_resume(storage, spec.with_overrides(artifacts=shared))
    assert dashboard_artifacts_spec(storage) == shared
    create_or_resume(storage, parse_spec(BASE.replace("name: art", "name: c")))
    assert dashboard_artifacts_spec(storage) == ArtifactsSpec()  # they differ: the default


# --------------------------------------------------------------------------- S3 (moto server)


@pytest.fixture
def s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """moto's S3 in server mode on a free local port, dummy credentials in the environment
    (inherited by the sweep's worker processes, as a Kubernetes Secret would provide them)."""
    with s3_in_env(monkeypatch) as server:
        yield server.endpoint


def test_s3_store_upload_list_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       s3_endpoint: str) -> None:
    import boto3

    isolate(tmp_path, monkeypatch)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket="sweep-models")
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = quadratic_spec("s3-art", trials=3, artifacts={
        "store": "s3", "bucket": "sweep-models", "prefix": "team/s3-art",
        "endpoint_url": s3_endpoint})
    run_sweep(tmp_path, url, spec)

    # Uploaded during the trials, under the prefix; nothing on the local filesystem.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="sweep-models")["Contents"]]
    assert len(keys) == 3 and all(k.startswith("team/s3-art/") for k in keys)
    assert not (tmp_path / "sweeps-artifacts").exists()

    # Listed on the trials (export), fetched by `best --download`.
    doc = json.loads(invoke("export", "s3-art", "--storage", url, "--format", "json").stdout)
    listed = {a["artifact_id"] for t in doc["trials"] for a in t["artifacts"]}
    assert {k.rsplit("/", 1)[1] for k in keys} == listed
    out = tmp_path / "dl"
    result = invoke("best", "s3-art", "--storage", url, "--download", str(out))
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)
    saved = json.loads((out / "result.json").read_text())
    assert saved["params"]["x"] == best["params"]["x"]
    assert saved["loss"] == pytest.approx(best["values"]["loss"])

    # The dashboard reads through the same store.
    sweep = load_sweep(open_storage(url), "s3-art")
    store = open_artifact_store(sweep.spec.artifacts, url, create=False)
    artifact_id = best["artifacts"][0]["artifact_id"]
    with store.open_reader(artifact_id) as reader:
        assert json.loads(reader.read()) == saved


def test_s3_errors_are_artifact_errors(tmp_path: Path, s3_endpoint: str) -> None:
    spec = parse_spec(BASE + f"artifacts: {{store: s3, bucket: no-such-bucket, "
                             f"endpoint_url: '{s3_endpoint}'}}\n")
    store = open_artifact_store(spec.artifacts, "sqlite:///x.db")
    trial = optuna.create_study().ask()
    with pytest.raises(ArtifactError, match=r"cannot save artifact 'm\.bin'.*NoSuchBucket"):
        upload(store, trial, b"x", name="m.bin")
    assert "test-secret" not in yaml.safe_dump(spec.to_dict())
