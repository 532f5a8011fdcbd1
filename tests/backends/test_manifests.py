"""The Indexed Job sweeper renders: schema-valid for Kubernetes 1.33 (strict) and carrying the
fields the index protocol, the failure policy and the security model depend on. Pure: no
storage, no cluster."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sweeper import protocol
from sweeper.backends import manifests as m
from sweeper.cli import cli
from sweeper.errors import SpecError
from sweeper.spec import load_spec, parse_spec, parse_spec_dict
from tests.support.k8s_schema import validate_k8s_objects

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "search_spaces").glob("*.yaml"))
SECRET_URL = "postgresql://sweeper:s3cr3t-pw@db:5432/sweeper"


def _container(job: dict[str, Any]) -> dict[str, Any]:
    containers = job["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in _container(job)["env"]}


def _spec(extra: str = "", trials: int = 10, parallelism: int = 4) -> Any:
    return parse_spec(f"""
name: small
method: random
objective: {{metric: loss, direction: minimize}}
trials: {trials}
parallelism: {parallelism}
trial:
  entrypoint: trial_runner.examples.synthetic:quadratic
  retries: 2
parameters:
  x: {{type: float, low: 0, high: 1}}
{extra}""")


def test_there_are_example_specs() -> None:
    assert len(SPECS) >= 3


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_example_spec_renders_schema_valid_objects(path: Path) -> None:
    spec = load_spec(path)
    for indexes in (None, list(range(1, spec.trials, 3))):
        objects = m.render(spec, indexes)
        assert validate_k8s_objects(objects) == []
        configmap, job = objects
        assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["name"] == \
            f"{spec.name}-spec"
        assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
        assert job["metadata"]["name"] == spec.name
        assert job["metadata"]["namespace"] == spec.kubernetes.namespace


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_index_env_secret_and_no_literal_storage_url(path: Path) -> None:
    spec = load_spec(path)
    job = m.render_job(spec)
    env = _env(job)
    assert env["JOB_ID"] == {"name": "JOB_ID", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
    assert env["SWEEPER_STORAGE"] == {"name": "SWEEPER_STORAGE", "valueFrom": {"secretKeyRef": {
        "name": spec.kubernetes.storage_secret, "key": spec.kubernetes.storage_secret_key}}}
    assert env["SWEEPER_STUDY"]["value"] == spec.name
    assert env["SWEEPER_CHECKPOINT_DIR"]["value"].startswith(m.SCRATCH + "/")
    assert env["HOME"]["value"] == env["TMPDIR"]["value"] == m.SCRATCH
    dumped = yaml.safe_dump(job)
    for scheme in ("postgresql://", "postgres://", "sqlite://"):
        assert scheme not in dumped
    container = _container(job)
    assert container["command"] == ["python", "-m", "trial_runner"]
    assert container["image"] == spec.kubernetes.image
    assert container["imagePullPolicy"] == spec.kubernetes.image_pull_policy


def test_storage_url_in_the_spec_never_reaches_the_job() -> None:
    spec = _spec(f"storage: {SECRET_URL}")
    dumped = yaml.safe_dump_all(m.render(spec))
    assert "s3cr3t-pw" not in dumped and "postgresql://" not in dumped


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_restricted_security_context(path: Path) -> None:
    job = m.render_job(load_spec(path))
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "sweeper-trial"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["fsGroup"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = _container(job)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # The writable places: the sized emptyDir that HOME, TMPDIR and checkpoints point at, and
    # /dev/shm in memory (DataLoader workers need more than the runtime's 64 MiB); the spec's
    # ConfigMap is mounted read-only.
    assert pod["volumes"] == [
        {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}},
        {"name": "sweeper-spec", "configMap": {"name": f"{job['metadata']['name']}-spec"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    assert _container(job)["volumeMounts"] == [
        {"name": "scratch", "mountPath": m.SCRATCH},
        {"name": "sweeper-spec", "mountPath": m.SPEC_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"}]
    resources = _container(job)["resources"]
    assert set(resources["requests"]) == {"cpu", "memory", "ephemeral-storage"}
    assert resources["requests"]["ephemeral-storage"] == "10Gi"
    # A CPU request and no CPU limit (no throttled data loading); memory is limited.
    assert set(resources["limits"]) >= {"memory"} and "cpu" not in resources["limits"]


def test_labels_on_job_and_pods() -> None:
    job = m.render_job(_spec())
    expected = {
        "app.kubernetes.io/name": "sweeper-trial", "app.kubernetes.io/instance": "small",
        "app.kubernetes.io/component": "trial", "app.kubernetes.io/managed-by": "sweeper",
        "app.kubernetes.io/part-of": "sweeper", "sweeper.dev/sweep": "small"}
    assert job["metadata"]["labels"] == expected
    assert job["spec"]["template"]["metadata"]["labels"] == expected


def test_gpu_limits_and_toleration() -> None:
    # digits_grid.yaml with the GPU its comment offers (the example itself runs on CPUs).
    text = (REPO / "search_spaces" / "digits_grid.yaml").read_text()
    assert text.count("resources: {cpu: 2, memory: 4Gi}") == 1
    grid = parse_spec(text.replace("resources: {cpu: 2,", "resources: {gpu: 1, cpu: 2,"))
    assert grid.trial.resources.gpu == 1
    job = m.render_job(grid)
    resources = _container(job)["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert resources["requests"] == {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"}
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    cpu_only = m.render_job(_spec())
    assert "nvidia.com/gpu" not in _container(cpu_only)["resources"]["limits"]
    assert "tolerations" not in cpu_only["spec"]["template"]["spec"]
    assert _container(cpu_only)["resources"]["requests"] == {
        "cpu": m.DEFAULT_CPU, "memory": m.DEFAULT_MEMORY, "ephemeral-storage": "10Gi"}


def test_failure_policy_matches_the_runner_exit_codes() -> None:
    spec = _spec()
    js = m.render_job(spec)["spec"]
    assert js["completionMode"] == "Indexed"
    assert js["backoffLimitPerIndex"] == spec.trial.retries == 2
    assert js["maxFailedIndexes"] == js["completions"] == 10
    assert js["podReplacementPolicy"] == "Failed"
    assert "backoffLimit" not in js
    rules = js["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget", "status": "True"}]}
    by_action = {r["action"]: r for r in rules[1:]}
    assert by_action["FailJob"]["onExitCodes"] == {
        "containerName": "trial", "operator": "In", "values": [protocol.EXIT_CONFIG]}
    assert by_action["FailIndex"]["onExitCodes"] == {
        "containerName": "trial", "operator": "In", "values": [protocol.EXIT_NO_RETRY]}
    # RETRY (and signals, OOM) match no rule: they count against backoffLimitPerIndex.
    codes = [v for r in rules[1:] for v in r["onExitCodes"]["values"]]
    assert protocol.EXIT_RETRY not in codes and protocol.EXIT_OK not in codes


def test_ttl_deadline_parallelism_and_placement() -> None:
    spec = _spec("""kubernetes:
  namespace: sweeps
  image: registry.example/sweeper:1.2
  image_pull_policy: Always
  service_account: trials
  node_selector: {pool: gpu}
  tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]
  image_pull_secrets: [regcred]
  env: {WANDB_MODE: offline}
  active_deadline: 2h
  ttl_after_finished: 30m""", trials=3, parallelism=8)
    job = m.render_job(spec)
    js, pod = job["spec"], job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == "sweeps"
    assert js["parallelism"] == 3  # never more than completions
    assert js["activeDeadlineSeconds"] == 7200
    assert js["ttlSecondsAfterFinished"] == 1800
    assert pod["serviceAccountName"] == "trials"
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "ml",
                                   "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert _container(job)["image"] == "registry.example/sweeper:1.2"
    assert _container(job)["imagePullPolicy"] == "Always"
    assert _env(job)["WANDB_MODE"]["value"] == "offline"
    assert validate_k8s_objects([job]) == []


@pytest.mark.parametrize("per_pod", [1, 3, 4, 10, 25])
def test_indexes_per_pod_sets_completions_and_covers_every_index(per_pod: int) -> None:
    spec = _spec(f"kubernetes: {{indexes_per_pod: {per_pod}}}")
    job = m.render_job(spec)
    completions = job["spec"]["completions"]
    assert completions == math.ceil(10 / per_pod)
    env = {k: v.get("value") for k, v in _env(job).items()}
    assert env.get("SWEEPER_INDEXES_PER_POD") == (str(per_pod) if per_pod > 1 else None)
    # What each pod runs, computed the way the runner computes it.
    covered = [i for k in range(completions) for i in protocol.job_indexes_from_env(
        {**{n: v for n, v in env.items() if v is not None}, "JOB_ID": str(k)}, spec.trials)]
    assert covered == list(range(10))
    assert validate_k8s_objects([job]) == []


@pytest.mark.parametrize("per_pod", [1, 2])
def test_sparse_resume_job_maps_job_index_k_to_the_kth_missing_index(per_pod: int) -> None:
    spec = _spec(f"kubernetes: {{indexes_per_pod: {per_pod}}}")
    missing = [1, 4, 5, 9]
    job = m.render_job(spec, missing, launch=2)
    assert job["metadata"]["name"] == "small-r2"
    assert job["metadata"]["annotations"][m.INDEX_MAP_ANNOTATION] == "1,4,5,9"
    env = {k: str(v["value"]) for k, v in _env(job).items() if v.get("value") is not None}
    assert env["SWEEPER_INDEX_MAP"] == "1,4,5,9"
    completions = job["spec"]["completions"]
    assert completions == math.ceil(4 / per_pod)
    assert job["spec"]["maxFailedIndexes"] == completions
    covered = [i for k in range(completions)
               for i in protocol.job_indexes_from_env({**env, "JOB_ID": str(k)}, spec.trials)]
    assert covered == missing
    assert [i for k in range(completions)
            for i in protocol.chunk(k, per_pod, missing, spec.trials)] == missing
    assert validate_k8s_objects([job]) == []


def test_all_indexes_make_a_dense_job() -> None:
    job = m.render_job(_spec(), list(range(10)), launch=1)
    assert job["metadata"]["name"] == "small-r1"
    assert "SWEEPER_INDEX_MAP" not in _env(job)
    assert m.INDEX_MAP_ANNOTATION not in job["metadata"]["annotations"]


def test_huge_sparse_map_falls_back_to_a_dense_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(m, "MAX_INDEX_MAP_CHARS", 5)
    job = m.render_job(_spec(), [1, 2, 3, 4, 5])
    assert "SWEEPER_INDEX_MAP" not in _env(job) and job["spec"]["completions"] == 10


def test_job_names_round_trip() -> None:
    assert m.job_name("a-b", 0) == "a-b" and m.job_name("a-b", 3) == "a-b-r3"
    assert m.launch_of("a-b", "a-b") == 0 and m.launch_of("a-b", "a-b-r3") == 3
    assert m.launch_of("a-b", "a-b-x") is None and m.launch_of("a-b", "other") is None


def test_overrides_and_bad_names() -> None:
    spec = m.with_kubernetes(_spec(), image="img:2", namespace="ns", storage_secret="db")
    assert (spec.kubernetes.image, spec.kubernetes.namespace,
            spec.kubernetes.storage_secret) == ("img:2", "ns", "db")
    with pytest.raises(SpecError, match="--namespace"):
        m.with_kubernetes(_spec(), namespace="Not_Valid")


# --------------------------------------------------------------------------- sweeper render


def test_render_cli_prints_the_objects_as_yaml() -> None:
    path = REPO / "search_spaces" / "digits_tpe.yaml"
    result = CliRunner().invoke(cli, ["render", str(path), "--image", "reg.example/t:9",
                                      "--namespace", "sweeps", "--storage-secret", "pg"],
                                env={"SWEEPER_STORAGE": SECRET_URL})
    assert result.exit_code == 0, result.output
    objects = list(yaml.safe_load_all(result.stdout))
    assert validate_k8s_objects(objects) == []
    expected = m.render(m.with_kubernetes(load_spec(path), image="reg.example/t:9",
                                          namespace="sweeps", storage_secret="pg"))
    assert objects == expected
    configmap, job = objects
    assert job["metadata"]["namespace"] == configmap["metadata"]["namespace"] == "sweeps"
    # The ConfigMap holds the normalised spec the pods read (SWEEPER_SPEC_FILE), overrides in.
    stored = json.loads(configmap["data"][m.SPEC_KEY])
    assert stored["kubernetes"]["image"] == "reg.example/t:9"
    assert parse_spec_dict(stored) == m.with_kubernetes(
        load_spec(path), image="reg.example/t:9", namespace="sweeps", storage_secret="pg")
    assert _env(job)[protocol.ENV_SPEC_FILE]["value"] == f"{m.SPEC_DIR}/{m.SPEC_KEY}"
    assert stored["storage"] is None
    assert _container(job)["image"] == "reg.example/t:9"
    assert _env(job)["SWEEPER_STORAGE"]["valueFrom"]["secretKeyRef"]["name"] == "pg"
    assert "s3cr3t" not in result.output and "postgresql://" not in result.output
    # No durable place for checkpoints: one warning, on stderr.
    assert result.stderr.count("warning: checkpoints go to the pod's /scratch") == 1


def test_no_checkpoint_warning_with_s3_or_a_checkpoint_volume() -> None:
    assert m.checkpoint_warning(_spec()) is not None
    s3 = _spec("artifacts: {store: s3, bucket: ckpts}")
    assert m.checkpoint_warning(s3) is None
    volume = _spec("kubernetes:\n  volumes: [{name: c, mount_path: /c, pvc: c}]\n"
                   "  checkpoint_volume: c")
    assert m.checkpoint_warning(volume) is None


def test_render_cli_touches_no_storage(tmp_path: Path) -> None:
    path = REPO / "search_spaces" / "digits_grid.yaml"
    result = CliRunner().invoke(cli, ["render", str(path)],
                                env={"SWEEPER_STORAGE": f"sqlite:///{tmp_path / 's.db'}"})
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "s.db").exists()


def test_render_cli_bad_spec_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad_Name\n")
    result = CliRunner().invoke(cli, ["render", str(bad)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def test_s3_artifact_credentials_come_from_their_secret() -> None:
    spec = _spec("""artifacts:
  store: s3
  bucket: sweeps
  endpoint_url: http://minio:9000
  credentials_secret: minio-creds""")
    job = m.render_job(spec)
    env = _env(job)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {
            "name": "minio-creds", "key": key}}}
    assert validate_k8s_objects([job]) == []
    assert "AWS_ACCESS_KEY_ID" not in _env(m.render_job(_spec()))


@pytest.mark.parametrize("address", ["sweeper-storage-proxy:13000", "grpc://proxy.ml.svc",
                                     "10.0.0.7:7000"])
def test_storage_proxy_pods_get_grpc_and_no_database_secret(address: str) -> None:
    spec = _spec(f"kubernetes: {{storage_proxy: '{address}', storage_secret: pg}}")
    job = m.render_job(spec)
    expected = {"sweeper-storage-proxy:13000": "grpc://sweeper-storage-proxy:13000",
                "grpc://proxy.ml.svc": "grpc://proxy.ml.svc:13000",
                "10.0.0.7:7000": "grpc://10.0.0.7:7000"}[address]
    assert _env(job)["SWEEPER_STORAGE"] == {"name": "SWEEPER_STORAGE", "value": expected}
    refs = [e for e in _container(job)["env"] if "valueFrom" in e and
            "secretKeyRef" in e["valueFrom"]]
    assert refs == []  # no Secret at all: the database password lives in the proxy's pod
    assert "pg" not in yaml.safe_dump(job) and "sweeper-db" not in yaml.safe_dump(job)
    assert validate_k8s_objects([job]) == []


def test_storage_proxy_from_the_command_line_and_bad_addresses() -> None:
    result = CliRunner().invoke(cli, ["render", str(REPO / "search_spaces" / "digits_tpe.yaml"),
                                      "--storage-proxy", "sweeper-storage-proxy:13000"])
    assert result.exit_code == 0, result.output
    objects = list(yaml.safe_load_all(result.stdout))
    [job] = [o for o in objects if o["kind"] == "Job"]
    assert _env(job)["SWEEPER_STORAGE"]["value"] == "grpc://sweeper-storage-proxy:13000"
    assert validate_k8s_objects(objects) == []
    for bad in ("user:pw@proxy:13000", "proxy:99999", "proxy/db", "-proxy"):
        out = CliRunner().invoke(cli, ["render", str(REPO / "search_spaces" /
                                                     "digits_tpe.yaml"), "--storage-proxy", bad])
        assert out.exit_code == 2, out.output
        assert out.output.startswith("error: command line: --storage-proxy:"), out.output
        assert "pw" not in out.output
    with pytest.raises(SpecError, match="storage_proxy"):
        _spec("kubernetes: {storage_proxy: 'postgresql://u:secret@db/x'}")


def test_an_open_ended_sweep_is_one_job_of_parallelism_slots() -> None:
    """No ``trials`` beside a budget: completions = parallelism, whatever the indexes handed
    in (a launch again hands the unfinished and fresh ones), each pod told its stride."""
    from tests.support.helpers import make_spec

    spec = make_spec(name="open", method="tpe", trials=None, parallelism=3,
                     budget={"steps": 100})
    for indexes in (None, range(spec.trials), [4, 7, *range(9, spec.trials)]):
        job = m.render_job(spec, indexes)
        assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
        assert m.INDEX_MAP_ANNOTATION not in job["metadata"]["annotations"]
        assert job["metadata"]["annotations"][m.INDEX_STRIDE_ANNOTATION] == "3"
        env = {e["name"]: e.get("value")
               for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env[protocol.ENV_INDEX_STRIDE] == "3"
        assert protocol.ENV_INDEXES_PER_POD not in env and protocol.ENV_INDEX_MAP not in env
    assert validate_k8s_objects(m.render(spec)) == []
