"""The pod's shape for a shared GPU cluster (spec ``kubernetes:``): every field rendered,
valid against the official Kubernetes 1.33 schemas (strict), and read back field by field.
Bad values are in tests/data/bad_specs/kubernetes_*.yaml. Pure: no storage, no cluster."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sweeper import protocol
from sweeper.backends import manifests as m
from sweeper.errors import SpecError
from sweeper.spec import Volume, parse_spec, parse_spec_dict
from tests.support.k8s_schema import validate_k8s_objects

AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In",
         "values": ["NVIDIA-H100-80GB-HBM3"]}]}]}},
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": {"matchLabels": {"team": "a"}}}}]}}

FULL = """
  labels: {kueue.x-k8s.io/queue-name: team-a, team: a}
  annotations: {example.com/owner: ml-team, cost-center: 42}
  priority_class: high-priority
  runtime_class: nvidia
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - {key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-H100-80GB-HBM3]}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 50
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector: {matchLabels: {team: a}}
  termination_grace_period: 2m
  shm_size: 8Gi
  scratch_size: 50Gi
  gpu_resource: nvidia.com/mig-1g.10gb
  cpu_limit: true
  volumes:
    - {name: datasets, mount_path: /datasets, pvc: imagenet, read_only: true}
    - {name: ckpt, mount_path: /ckpt, pvc: sweep-checkpoints}
    - {name: settings, mount_path: /etc/train, config_map: train-settings}
    - {name: tokens, mount_path: /var/run/tokens, secret: hf-token}
    - {name: shared, mount_path: /shared, nfs: {server: nfs.internal, path: /export/shared},
       read_only: true}
    - {name: cache, mount_path: /cache, empty_dir: {size_limit: 20Gi}}
    - {name: tmp2, mount_path: /tmp2, empty_dir: {}}
  checkpoint_volume: ckpt
"""


def _spec(kubernetes: str = "", gpu: int = 2) -> Any:
    return parse_spec(f"""
name: shaped
method: random
objective: {{metric: loss, direction: minimize}}
trials: 4
trial:
  entrypoint: trial_runner.examples.synthetic:quadratic
  resources: {{gpu: {gpu}, cpu: 4, memory: 16Gi}}
parameters:
  x: {{type: float, low: 0, high: 1}}
kubernetes:
  image: registry.example/trial:1{kubernetes}
""")


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _trial(job: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in _pod(job)["containers"] if c["name"] == "trial"]
    return c


def _env(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _trial(job)["env"]}


def test_every_field_renders_schema_valid_and_reads_back() -> None:
    spec = _spec(FULL)
    objects = m.render(spec)
    assert validate_k8s_objects(objects) == []
    job = m.render_job(spec)
    pod, trial = _pod(job), _trial(job)

    # Kueue reads the queue label on the Job; the pods carry the same labels and annotations.
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert meta["labels"]["team"] == "a"
        assert meta["labels"][m.SWEEP_LABEL] == "shaped"
        assert meta["annotations"]["example.com/owner"] == "ml-team"
        assert meta["annotations"]["cost-center"] == "42"
    assert m.LAUNCH_ANNOTATION in job["metadata"]["annotations"]
    assert job["spec"]["suspend"] is True  # queued: Kueue unsuspends it on admission
    assert "suspend" not in m.render_job(_spec(FULL.replace(
        "kueue.x-k8s.io/queue-name: team-a, ", "")))["spec"]

    assert pod["priorityClassName"] == "high-priority"
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["affinity"] == AFFINITY
    assert pod["terminationGracePeriodSeconds"] == 120
    assert _env(job)[protocol.ENV_TERMINATION_GRACE_PERIOD] == "120"

    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {"sizeLimit": "50Gi"}}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory",
                                                            "sizeLimit": "8Gi"}}
    assert volumes["datasets"] == {"name": "datasets", "persistentVolumeClaim": {
        "claimName": "imagenet", "readOnly": True}}
    assert volumes["ckpt"] == {"name": "ckpt", "persistentVolumeClaim": {
        "claimName": "sweep-checkpoints"}}
    assert volumes["settings"] == {"name": "settings", "configMap": {"name": "train-settings"}}
    assert volumes["tokens"] == {"name": "tokens", "secret": {"secretName": "hf-token"}}
    assert volumes["shared"] == {"name": "shared", "nfs": {
        "server": "nfs.internal", "path": "/export/shared", "readOnly": True}}
    assert volumes["cache"] == {"name": "cache", "emptyDir": {"sizeLimit": "20Gi"}}
    assert volumes["tmp2"] == {"name": "tmp2", "emptyDir": {}}
    mounts = {v["name"]: v for v in trial["volumeMounts"]}
    assert mounts["scratch"]["mountPath"] == "/scratch"
    assert mounts["dshm"]["mountPath"] == "/dev/shm"
    assert mounts["datasets"] == {"name": "datasets", "mountPath": "/datasets", "readOnly": True}
    assert mounts["ckpt"] == {"name": "ckpt", "mountPath": "/ckpt"}
    assert mounts["settings"]["readOnly"] is True and mounts["tokens"]["readOnly"] is True
    assert mounts["shared"]["readOnly"] is True
    assert "readOnly" not in mounts["cache"]
    # Checkpoints go to the durable volume, per sweep (the runner adds NAME/index-I).
    assert _env(job)[protocol.ENV_CHECKPOINT_DIR] == "/ckpt/checkpoints"

    resources = trial["resources"]
    assert resources["requests"] == {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "50Gi"}
    assert resources["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/mig-1g.10gb": 2}
    assert pod["tolerations"] == [{"key": "nvidia.com/mig-1g.10gb", "operator": "Exists",
                                   "effect": "NoSchedule"}]

    # The normalised spec (the sweep record, the pods' spec file) reads back to the same spec.
    again = parse_spec_dict(spec.to_dict())
    assert again == spec
    assert again.kubernetes.volumes[4] == Volume("shared", "/shared", "nfs",
                                                 server="nfs.internal", path="/export/shared",
                                                 read_only=True)


def test_defaults_shm_on_no_cpu_limit_amd_gpu() -> None:
    job = m.render_job(_spec("\n  gpu_resource: amd.com/gpu", gpu=1))
    assert validate_k8s_objects([job]) == []
    resources = _trial(job)["resources"]
    assert "cpu" not in resources["limits"] and resources["limits"]["amd.com/gpu"] == 1
    assert _pod(job)["tolerations"] == [{"key": "amd.com/gpu", "operator": "Exists",
                                         "effect": "NoSchedule"}]
    for key in ("priorityClassName", "runtimeClassName", "affinity",
                "terminationGracePeriodSeconds"):
        assert key not in _pod(job)
    assert protocol.ENV_TERMINATION_GRACE_PERIOD not in _env(job)


def test_shm_size_zero_turns_dev_shm_off() -> None:
    job = m.render_job(_spec("\n  shm_size: 0"))
    assert validate_k8s_objects([job]) == []
    assert [v["name"] for v in _pod(job)["volumes"]] == ["scratch", "sweeper-spec"]
    assert [v["mountPath"] for v in _trial(job)["volumeMounts"]] == ["/scratch",
                                                                     "/etc/sweeper"]


def test_pod_template_merges_strategically_and_is_schema_checked() -> None:
    spec = _spec("""
  tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]
  pod_template:
    metadata:
      annotations: {sidecar.istio.io/inject: "false"}
    spec:
      hostIPC: false
      nodeSelector: {pool: gpu}
      tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoExecute}]
      containers:
        - name: trial
          env:
            - {name: NCCL_DEBUG, value: INFO}
            - {name: PYTHONUNBUFFERED, value: "0"}
          resources: {limits: {cpu: 8}}
          volumeMounts:
            - {name: extra, mountPath: /extra}
            - {mountPath: /dev/shm, $patch: delete}
        - name: logger
          image: busybox:1.36
          command: [sh, -c, "sleep 1"]
      volumes:
        - {name: extra, emptyDir: {}}
        - {name: dshm, $patch: delete}
      enableServiceLinks: null
""")
    job = m.render_job(spec)
    assert validate_k8s_objects([job]) == []
    pod, trial = _pod(job), _trial(job)
    assert job["spec"]["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject":
                                                                   "false"}
    assert job["spec"]["template"]["metadata"]["labels"][m.SWEEP_LABEL] == "shaped"
    assert pod["hostIPC"] is False and pod["nodeSelector"] == {"pool": "gpu"}
    # tolerations appended: the spec's, the GPU one sweeper adds, then the template's
    assert [t["key"] for t in pod["tolerations"]] == ["spot", "nvidia.com/gpu", "dedicated"]
    # containers merged by name: the trial container keeps what sweeper rendered
    assert [c["name"] for c in pod["containers"]] == ["trial", "logger"]
    assert trial["command"] == ["python", "-m", "trial_runner"]
    env = [e["name"] for e in trial["env"]]
    assert env.count("PYTHONUNBUFFERED") == 1 and env[-1] == "NCCL_DEBUG"
    assert {e["name"]: e.get("value") for e in trial["env"]}["PYTHONUNBUFFERED"] == "0"
    assert trial["resources"]["limits"]["cpu"] == 8
    assert trial["resources"]["limits"]["memory"] == "16Gi"  # merged, not replaced
    assert trial["resources"]["requests"]["cpu"] == "4"
    assert [v["mountPath"] for v in trial["volumeMounts"]] == ["/scratch", "/etc/sweeper",
                                                               "/extra"]
    assert [v["name"] for v in pod["volumes"]] == ["scratch", "sweeper-spec", "extra"]
    assert "enableServiceLinks" not in pod  # null deletes
    assert pod["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize(("template", "field", "message"), [
    ("{spec: {containers: [{image: busybox}]}}", "kubernetes.pod_template.spec.containers[0]",
     "each element of containers needs its merge key 'name'"),
    ("{spec: {containers: [{name: trial, env: [{value: x}]}]}}",
     "kubernetes.pod_template.spec.containers[0].env[0]",
     "each element of env needs its merge key 'name'"),
    ("{spec: {volumes: [{name: extra, emptyDir: {}}], containers: [{name: side, image: b, "
     "volumeMounts: [{name: extra}]}]}}",
     "kubernetes.pod_template.spec.containers[0].volumeMounts[0]",
     "each element of volumeMounts needs its merge key 'mountPath'"),
    ("{spec: {volumes: [{name: shared, nfs: {server: nfs.internal}}]}}",
     "kubernetes.pod_template.spec.volumes[3].nfs",
     "the pod template merged with it is invalid: missing required field 'path' of "
     "NFSVolumeSource"),
    ("{spec: {affinity: {$patch: remove}}}", "kubernetes.pod_template.spec.affinity.$patch",
     "unsupported $patch: 'remove' (use replace or delete)"),
])
def test_pod_template_that_breaks_the_pod_is_a_spec_error(template: str, field: str,
                                                           message: str) -> None:
    spec = _spec(f"\n  pod_template: {template}")
    with pytest.raises(SpecError) as e:
        m.render(spec)
    assert e.value.field == field
    assert e.value.message == message
    assert e.value.source == spec.source


def test_a_stored_pod_template_is_checked_again_when_rendered() -> None:
    """The sweep record is read without the client's models (the runner never imports the
    kubernetes client); render still refuses a template that would fail on the API server."""
    record = _spec().to_dict()
    record["kubernetes"]["pod_template"] = {"spec": {"hostIPC": "yes"}}
    spec = parse_spec_dict(record, source="<study shaped>")
    with pytest.raises(SpecError, match=r"^<study shaped>: kubernetes\.pod_template\.spec\."
                                        r"hostIPC: the pod template merged with it is invalid: "
                                        r"expected true or false, got string 'yes'$"):
        m.render(spec)


def test_data_on_kubernetes() -> None:
    """data.path: inside a read-only volume, named to the runner as mounted; data.s3: synced
    into the pod's scratch, with the credentials Secret of data (or artifacts)."""
    vol = "\n  volumes: [{name: ds, mount_path: /datasets, pvc: imagenet, read_only: true}]"
    job = m.render_job(_spec(vol).with_overrides(
        data=parse_spec_dict({**_spec().to_dict(), "data": {"path": "/datasets/train"}}).data))
    assert _env(job)[protocol.ENV_DATA_DIR] == "/datasets/train"
    assert protocol.ENV_DATA_CACHE not in _env(job)

    s3 = parse_spec_dict({**_spec().to_dict(), "data": {
        "s3": "s3://datasets/imagenet", "credentials_secret": "s3-creds"}})
    job = m.render_job(s3)
    assert validate_k8s_objects([job]) == []
    env = _env(job)
    assert env[protocol.ENV_DATA_CACHE] == "/scratch/sweeper-data"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-creds",
                                                         "key": "AWS_ACCESS_KEY_ID"}}
    assert protocol.ENV_DATA_DIR not in env


@pytest.mark.parametrize(("volumes", "message"), [
    ("", "/datasets/train is in no volume of kubernetes.volumes"),
    ("\n  volumes: [{name: ds, mount_path: /data, pvc: imagenet, read_only: true}]",
     "/datasets/train is in no volume of kubernetes.volumes"),
    ("\n  volumes: [{name: ds, mount_path: /datasets, pvc: imagenet}]",
     "the dataset's volume 'ds' must be read_only: true"),
])
def test_data_path_must_be_a_read_only_volume_on_kubernetes(volumes: str, message: str) -> None:
    spec = parse_spec_dict({**_spec(volumes).to_dict(), "data": {"path": "/datasets/train"}},
                           source="s.yaml")
    with pytest.raises(SpecError) as e:
        m.render(spec)
    assert e.value.field == "data.path" and e.value.message.startswith(message)


def test_a_fraction_of_a_gpu_is_local_only() -> None:
    spec = parse_spec_dict({**_spec().to_dict(), "trial": {
        **_spec().to_dict()["trial"], "resources": {"gpu": 0.5}}}, source="s.yaml")
    assert spec.trial.resources.gpu == 0.5
    with pytest.raises(SpecError, match=r"^s\.yaml: trial\.resources\.gpu: a fraction of a GPU "
                                        r"\(0\.5\) packs workers onto a GPU on the local "
                                        r"backend only; on Kubernetes ask for a whole slice"):
        m.render(spec)


def test_torchrun_trial_asks_for_all_its_gpus_in_one_pod() -> None:
    spec = parse_spec_dict({**_spec().to_dict(), "trial": {
        **_spec().to_dict()["trial"], "launcher": "torchrun", "resources": {"gpu": 8}}})
    assert spec.trial.ranks == 8
    job = m.render_job(spec)
    assert _trial(job)["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert _trial(job)["command"] == ["python", "-m", "trial_runner"]  # the runner launches


SPLIT = """
name: split
method: random
trials: 2
objective: {metric: loss, direction: minimize}
trial:
  command: [python3, /opt/train.py, "--lr={lr}"]
  resources: {cpu: "2", memory: 4Gi, gpu: 1}
parameters:
  lr: {type: float, low: 0.01, high: 0.1}
kubernetes:
  image: example.com/user/train:1
  runner_image: sweeper-trial-runner:0.1.0
  storage_proxy: proxy.sweeper.svc:50051
  storage_proxy_ca: proxy-ca
  env: {TEAM: a}
  volumes: [{name: data, mount_path: /data, pvc: data, read_only: true}]
"""


def test_a_command_with_a_runner_image_runs_beside_the_runner_in_a_split_pod() -> None:
    from sweeper import shim

    job = m.render_job(parse_spec(SPLIT))
    validate_k8s_objects([job])
    pod = job["spec"]["template"]
    (runner,) = pod["spec"]["initContainers"]
    (user,) = pod["spec"]["containers"]
    assert pod["spec"]["shareProcessNamespace"] is True
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] \
        == runner["name"] == shim.RUNNER_CONTAINER
    assert m.log_container(pod) == shim.RUNNER_CONTAINER
    # The user's image runs the shim and carries the podFailurePolicy's container name.
    assert (user["name"], user["image"]) == (m.CONTAINER_NAME, "example.com/user/train:1")
    assert user["command"] == shim.shim_command()
    assert user["resources"]["limits"]["nvidia.com/gpu"] == 1
    names = {e["name"] for e in user["env"]}
    assert "TEAM" in names and protocol.ENV_STORAGE not in names
    assert not names & {protocol.ENV_PROXY_TOKEN_FILE, protocol.ENV_PROXY_CA,
                        protocol.ENV_SPEC_FILE}
    assert {v["name"] for v in user["volumeMounts"]} == {
        "scratch", "dshm", "data", shim.VOLUME}
    # sweeper's runner: a native sidecar from its own image, with the study's credentials.
    assert (runner["image"], runner["restartPolicy"]) == ("sweeper-trial-runner:0.1.0", "Always")
    assert runner["command"] == list(m.RUNNER_COMMAND)
    assert {"name": protocol.ENV_EXCHANGE_DIR, "value": shim.DIR} in runner["env"]
    assert {v["name"] for v in runner["volumeMounts"]} >= {
        "sweeper-spec", "sweeper-proxy-token", shim.VOLUME}
    assert "nvidia.com/gpu" not in runner["resources"]["limits"]
    for c in (runner, user):  # restricted, both
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    assert {"name": shim.VOLUME, "emptyDir": {"sizeLimit": "1Gi"}} in pod["spec"]["volumes"]


def test_a_code_volume_is_the_user_containers_working_directory() -> None:
    from sweeper import shim
    from sweeper.backends.pod import split_pod

    spec = parse_spec(SPLIT)
    pod = m.render_job(spec)["spec"]["template"]["spec"]
    plain = {**pod, "containers": pod["initContainers"], "volumes": [
        *pod["volumes"][:-1], {"name": "sweeper-code", "emptyDir": {}}]}
    plain["containers"] = [{**plain["containers"][0], "volumeMounts": [
        v for v in plain["containers"][0]["volumeMounts"] if v["name"] != shim.VOLUME]}]
    del plain["initContainers"]
    split_pod(spec, plain)
    (user,) = plain["containers"]
    assert user["workingDir"] == "/sweeper-code"
    assert {"name": "sweeper-code", "mountPath": "/sweeper-code"} in user["volumeMounts"]
    assert {"name": "sweeper-code", "mountPath": "/sweeper-code"} in \
        plain["initContainers"][0]["volumeMounts"]


@pytest.mark.parametrize("trial, message", [
    ("{entrypoint: 'tests.support.objectives:quadratic'}",
     "an entrypoint trial runs in kubernetes.image"),
    ("{command: [python, t.py], launcher: torchrun, nproc: 2}", "a torchrun launcher runs in"),
])
def test_runner_image_is_for_command_trials_only(trial: str, message: str) -> None:
    text = SPLIT.replace('  command: [python3, /opt/train.py, "--lr={lr}"]\n', "") \
        .replace("trial:\n", f"trial: {trial}\nx_:\n")
    text = "\n".join(line for line in text.splitlines()
                     if not line.startswith(("x_:", "  resources"))) + "\n"
    with pytest.raises(SpecError, match=r"kubernetes\.runner_image: runs sweeper's runner "
                                        rf"beside a trial\.command program in any image; "
                                        rf"{message}"):
        parse_spec(text)


def test_the_shim_reaches_the_shell_as_written() -> None:
    """Kubernetes expands ``$(NAME)`` and ``$$`` in a container's command; the shim's text,
    expanded as the kubelet does, is the script."""
    from sweeper import shim

    script = shim.shim_command()[2]
    assert re.search(r"\$\([A-Za-z_]", script) is None  # $((n + 1)) names no variable
    assert re.sub(r"\$\$", "$", script) == shim.SCRIPT
