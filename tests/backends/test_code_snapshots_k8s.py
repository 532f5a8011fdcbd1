"""Code snapshots end to end on the local cluster's real node: the trial's module lives only
in the test's directory next to the spec (the test image ``sweeper-test-runner:local`` holds
sweeper but not it); each pod fetches the snapshot once (from the study in PostgreSQL, or from
S3: moto's server at the address the pods reach this machine at), checks its hash, unpacks it
into its ``sweeper-code`` emptyDir and runs every index it is given from there. Edited code is
refused without ``--code new`` and recorded per trial with it; a replaced object fails the
index as a configuration error; ``render`` + ``kubectl apply`` alone runs from a snapshot."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml

from sweeper import protocol
from sweeper.code import stores
from sweeper.code.snapshot import pack
from sweeper.code.stores import artifact_key
from sweeper.study.urls import driver_url
from tests.backends.test_gitops import apply, wait_finished
from tests.support.k8s_cluster import NS, Cluster
from tests.support.s3 import REGION, S3Server, moto_s3

pytestmark = pytest.mark.postgres

MODULE = """\
import os

VERSION = {version}


def objective(ctx):
    # Runs in the unpacked snapshot: its directory is the working directory.
    assert os.path.exists("snapmod_{tag}.py"), os.getcwd()
    return float(ctx.params["x"]) + VERSION
"""


@pytest.fixture
def s3(cluster: Cluster) -> Iterator[S3Server]:
    with moto_s3(cluster.pod_host) as server:
        yield server


def _project(cluster: Cluster, name: str, trials: int, version: int, extra: str = "",
             per_pod: int = 2) -> Path:
    """A code directory with the trial's module and the spec; the spec's path."""
    tag = name.replace("-", "_")
    code = cluster.tmp / f"proj-{name}"
    code.mkdir(exist_ok=True)
    (code / f"snapmod_{tag}.py").write_text(MODULE.format(version=version, tag=tag))
    spec = code / "sweep.yaml"
    spec.write_text(cluster.spec_text(f"""
name: {name}
method: random
trials: {trials}
objective: {{metric: loss, direction: minimize}}
parallelism: 2
trial:
  entrypoint: snapmod_{tag}:objective
  retries: 0
parameters:
  x: {{type: float, low: 0, high: 1}}
kubernetes:
  indexes_per_pod: {per_pod}
{extra}"""))
    return spec


def _pod_logs(cluster: Cluster, name: str) -> dict[str, str]:
    return {p["metadata"]["name"]: cluster.core().read_namespaced_pod_log(
        p["metadata"]["name"], NS) for p in cluster.pods(name)}


def _codes(cluster: Cluster, name: str) -> dict[int, tuple[str, float]]:
    """Per index: (the snapshot its finished trial ran with, value - x: the module's VERSION)."""
    return {i: next((t.user_attrs[protocol.CODE_ATTR], round(t.value - t.params["x"], 6))
                    for t in ts if t.value is not None)
            for i, ts in cluster.trials(name).items()}


def _s3_artifacts(s3: S3Server, secret: str) -> str:
    return (f"artifacts: {{store: s3, bucket: code, endpoint_url: '{s3.endpoint}', "
            f"region: {REGION}, credentials_secret: {secret}}}\n")


@pytest.mark.parametrize("where", ["study", "s3"])
def test_a_sweep_runs_from_its_snapshot_and_edited_code_needs_code_new(
        cluster: Cluster, where: str, request: pytest.FixtureRequest) -> None:
    name = f"k8s-code-{where}"
    extra, env = "", {}
    if where == "s3":
        s3: S3Server = request.getfixturevalue("s3")
        s3.client().create_bucket(Bucket="code")
        extra = _s3_artifacts(s3, request.getfixturevalue("s3_secret"))
        env = s3.env()  # the CLI uploads the snapshot
    spec = _project(cluster, name, 4, version=1, extra=extra)
    first = pack(spec.parent, (spec.name,))
    run = cluster.sweeper("run", str(spec), "--backend", "kubernetes", **env)
    assert run.exit_code == 0, run.output
    assert f"code {spec.parent}: 1 files" in run.stderr and first.digest in run.stderr
    assert cluster.finished_per_index(name) == {i: 1 for i in range(4)}
    assert _codes(cluster, name) == {i: (first.digest, 1.0) for i in range(4)}
    logs = _pod_logs(cluster, name)
    assert len(logs) == 2  # two indexes per pod, each pod fetched the snapshot once
    assert all(log.count(f"code snapshot {first.digest}") == 1 for log in logs.values()), logs
    if where == "s3":
        body = s3.client().get_object(Bucket="code", Key=artifact_key(first.digest))["Body"]
        assert body.read() == first.data

    # Grown, with one file edited: refused without --code new, nothing launched.
    spec = _project(cluster, name, 6, version=2, extra=extra)
    second = pack(spec.parent, (spec.name,))
    refused = cluster.sweeper("run", str(spec), "--backend", "kubernetes", **env)
    assert refused.exit_code == 2, refused.output
    assert f"the code of sweep {name} changed" in refused.stderr and "--code new" in \
        refused.stderr
    assert len(cluster.jobs(name)) == 1 and set(cluster.trials(name)) == set(range(4))

    ran = cluster.sweeper("run", str(spec), "--backend", "kubernetes", "--code", "new", **env)
    assert ran.exit_code == 0, ran.output
    assert cluster.finished_per_index(name) == {i: 1 for i in range(6)}
    assert _codes(cluster, name) == {**{i: (first.digest, 1.0) for i in range(4)},
                                     4: (second.digest, 2.0), 5: (second.digest, 2.0)}
    status = json.loads(cluster.sweeper("status", name, "--format", "json").stdout)
    assert status["code"] == second.digest
    assert [i["code"] for i in status["per_index"]] == [first.digest] * 4 + [second.digest] * 2


def test_a_replaced_snapshot_fails_the_index_as_a_configuration_error(
        cluster: Cluster, s3: S3Server, s3_secret: str) -> None:
    name = "k8s-code-replaced"
    s3.client().create_bucket(Bucket="code")
    spec = _project(cluster, name, 1, version=1, extra=_s3_artifacts(s3, s3_secret), per_pod=1)
    snap = pack(spec.parent, (spec.name,))
    # The object under the snapshot's name holds something else (corrupted, or replaced).
    other = pack(Path(__file__).parent.parent / "code")
    s3.client().put_object(Bucket="code", Key=artifact_key(snap.digest), Body=other.data)
    run = cluster.sweeper("run", str(spec), "--backend", "kubernetes", **s3.env())
    assert run.exit_code != 0
    log = "\n".join(_pod_logs(cluster, name).values())
    assert "hash does not match" in log and artifact_key(snap.digest) in log, log
    pods = cluster.pods(name)
    assert len(pods) == 1  # the configuration error is not retried
    state = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == protocol.EXIT_CONFIG
    assert not any(t.state.is_finished() for ts in cluster.trials(name).values() for t in ts)


def test_rendered_objects_alone_run_from_the_snapshot(cluster: Cluster, s3: S3Server,
                                                      s3_secret: str) -> None:
    name = "k8s-code-gitops"
    s3.client().create_bucket(Bucket="code")
    spec = _project(cluster, name, 4, version=3, extra=_s3_artifacts(s3, s3_secret))
    snap = pack(spec.parent, (spec.name,))
    rendered = cluster.sweeper("render", str(spec), **s3.env())
    assert rendered.exit_code == 0, rendered.output
    assert snap.digest in rendered.stderr and "uploaded to s3://code/" in rendered.stderr
    objects = list(yaml.safe_load_all(rendered.stdout))
    env = {e["name"]: e.get("value")
           for e in objects[1]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[protocol.ENV_CODE] == snap.digest
    apply(cluster, objects)  # no `sweeper run`, no study yet
    job = wait_finished(cluster, name, 2)
    assert job["status"].get("succeeded") == 2, job["status"]
    assert cluster.finished_per_index(name) == {i: 1 for i in range(4)}
    assert _codes(cluster, name) == {i: (snap.digest, 3.0) for i in range(4)}
    study = optuna.load_study(study_name=name, storage=driver_url(cluster.url))
    assert study.user_attrs[protocol.CODE_ATTR] == snap.digest


def test_a_snapshot_over_the_study_storage_limit_is_refused(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "k8s-code-too-big"
    spec = _project(cluster, name, 1, version=1)
    (spec.parent / "weights.bin").write_bytes(b"\x00" * 64 + bytes(range(256)) * 400)
    monkeypatch.setattr(stores, "STUDY_LIMIT_BYTES", 1024)
    run = cluster.sweeper("run", str(spec), "--backend", "kubernetes")
    assert run.exit_code == 2, run.output
    line = run.stderr.strip().splitlines()[-1]
    assert "over the 0 MiB the study storage" in line or "study storage" in line
    assert "artifacts.store: s3" in line and "trial.code: null" in line
    assert cluster.jobs(name) == []
    assert name not in optuna.get_all_study_names(driver_url(cluster.url))
