"""Spec -> the pod template of a sweep's Job. Pure: no I/O, no client, no cluster.

The pod is shaped for shared GPU clusters: a restricted security context, requests sized from
``trial.resources`` (a CPU request and, unless ``kubernetes.cpu_limit``, no CPU limit: a
throttled data loader starves the GPU), a sized ``/scratch`` with a matching ephemeral-storage
request (a full node disk evicts pods without one), ``/dev/shm`` in memory (the runtime's
64 MiB default crashes DataLoader workers), the user's volumes, scheduling fields (priority,
runtime class, affinity, grace period), and last the ``pod_template`` patch, merged
strategically and checked against the Kubernetes models before anything is submitted.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from sweeper import protocol, shim
from sweeper.backends.strategic_merge import MergeError, merge
from sweeper.errors import SpecError
from sweeper.spec import KubernetesSpec, SweepSpec, Volume

CONTAINER_NAME = "trial"
RUNNER_COMMAND = ("python", "-m", "trial_runner")
SCRATCH = "/scratch"
SHM = "/dev/shm"
#: Where the ConfigMap NAME-spec (the normalised spec) is mounted, and its key.
SPEC_DIR = "/etc/sweeper"
SPEC_KEY = "spec.json"
#: The image's unprivileged user (Dockerfile: useradd --uid 10001).
RUN_AS = 10001
DEFAULT_CPU = "1"
DEFAULT_MEMORY = "2Gi"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: Keys read from ``artifacts.credentials_secret`` (env names the S3 client expects).
S3_CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
#: Through a storage proxy: the pod's ServiceAccount token for the proxy's audience, projected
#: by the kubelet (renewed at 80 % of its lifetime) and sent on every call (sweeper.proxy).
PROXY_TOKEN_DIR = "/var/run/secrets/sweeper-proxy"
PROXY_TOKEN_SECONDS = 600  # the shortest lifetime the API server grants
#: Where ``kubernetes.storage_proxy_ca`` (a ConfigMap's ca.crt) is mounted.
PROXY_CA_DIR = "/etc/sweeper-proxy-ca"
_SOURCES = {"pvc": ("persistentVolumeClaim", "claimName"), "config_map": ("configMap", "name"),
            "secret": ("secret", "secretName")}


def gpu_toleration(resource: str) -> dict[str, Any]:
    """GPU nodes are usually tainted with their resource name (the NVIDIA and AMD operators
    do); a pod that asks for that resource tolerates it."""
    return {"key": resource, "operator": "Exists", "effect": "NoSchedule"}


def slots_of(spec: SweepSpec) -> int:
    """An open-ended sweep's Job: its pods, each a slot running index after index (one a
    completion index, so completions = parallelism and the Job never changes size)."""
    return max(1, spec.parallelism)


def spec_configmap_name(sweep_name: str) -> str:
    return f"{sweep_name}-spec"


def pod_template(spec: SweepSpec, mapping: list[int] | None, labels: Mapping[str, str],
                 code: str | None = None) -> dict[str, Any]:
    """The Job's ``spec.template``: the rendered pod with ``kubernetes.pod_template`` merged
    in; with ``code`` (a snapshot, ``sha256:<hex>``) the runner fetches it into the
    ``sweeper-code`` emptyDir and runs the trial there. Raises SpecError when the merged
    template is not a valid PodTemplateSpec."""
    k = spec.kubernetes
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": k.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [_container(spec, mapping)],
        "volumes": _volumes(spec),
    }
    _add_code(spec, pod, code)
    if k.termination_grace_period is not None:
        pod["terminationGracePeriodSeconds"] = math.ceil(k.termination_grace_period)
    if k.priority_class:
        pod["priorityClassName"] = k.priority_class
    if k.runtime_class:
        pod["runtimeClassName"] = k.runtime_class
    if k.affinity:
        pod["affinity"] = copy.deepcopy(dict(k.affinity))
    if k.node_selector:
        pod["nodeSelector"] = dict(k.node_selector)
    tolerations = [dict(t) for t in k.tolerations]
    if spec.trial.resources.gpu and not any(t.get("key") == k.gpu_resource for t in tolerations):
        tolerations.append(gpu_toleration(k.gpu_resource))
    if tolerations:
        pod["tolerations"] = tolerations
    if k.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in k.image_pull_secrets]
    if split(spec):
        split_pod(spec, pod)
    template = {"metadata": _metadata(spec, labels), "spec": pod}
    if k.pod_template:
        template = _merge_template(spec, template, dict(k.pod_template))
    return template


def _metadata(spec: SweepSpec, labels: Mapping[str, str]) -> dict[str, Any]:
    k = spec.kubernetes
    metadata: dict[str, Any] = {"labels": {**k.labels, **labels}}
    annotations = dict(k.annotations)
    if split(spec):
        # `kubectl logs POD` shows the trial's log (the runner's: headers, output, outcome).
        annotations[DEFAULT_CONTAINER_ANNOTATION] = shim.RUNNER_CONTAINER
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def split(spec: SweepSpec) -> bool:
    """Whether the sweep's pods are split: the command in the user's image, the runner beside
    it (``kubernetes.runner_image``)."""
    return spec.kubernetes.runner_image is not None and spec.trial.command is not None


#: What of the runner's environment the user's container does not get: secrets, and what only
#: the runner reads (the spec file, which indexes to run).
_RUNNER_ONLY_ENV = (*protocol.SECRET_ENV, protocol.ENV_PROXY_CA, protocol.ENV_SPEC_FILE,
                    protocol.ENV_INDEX_MAP, protocol.ENV_INDEXES_PER_POD,
                    protocol.ENV_INDEX_STRIDE)
#: The runner's own requests and memory limit beside a command trial (it reads the program's
#: output and writes to the study; the trial's resources go to the user's container).
_RUNNER_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"},
                     "limits": {"memory": "512Mi"}}
#: Volumes only the runner mounts (the spec, the storage proxy's token and CA).
_RUNNER_ONLY_VOLUMES = ("sweeper-spec", "sweeper-proxy-token", "sweeper-proxy-ca")
#: The volume of a code snapshot: the user's container mounts it too and starts in it.
CODE_VOLUME = "sweeper-code"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


def split_pod(spec: SweepSpec, pod: dict[str, Any]) -> None:
    """Turn the rendered one-container pod into the split one (:mod:`sweeper.shim`): the
    runner becomes a native sidecar (an init container with ``restartPolicy: Always``: it starts
    first, is restarted if it dies and is stopped once the trial's container has ended) from
    ``runner_image``; the container named ``trial`` (what the podFailurePolicy reads) runs the
    shim in the user's image with the trial's resources. Both mount an emptyDir they exchange
    files through and share one process namespace, so the runner can signal the program."""
    k = spec.kubernetes
    assert k.runner_image is not None
    exchange = {"name": shim.VOLUME, "mountPath": shim.DIR}
    (runner,) = pod["containers"]
    user: dict[str, Any] = {
        "name": CONTAINER_NAME, "image": k.image, "imagePullPolicy": k.image_pull_policy,
        "command": shim.shim_command(),
        "env": [copy.deepcopy(e) for e in runner["env"] if e["name"] not in _RUNNER_ONLY_ENV],
        "resources": runner["resources"],
        "securityContext": copy.deepcopy(runner["securityContext"]),
        "volumeMounts": [copy.deepcopy(m) for m in runner["volumeMounts"]
                         if m["name"] not in _RUNNER_ONLY_VOLUMES] + [dict(exchange)],
    }
    code = next((m for m in runner["volumeMounts"] if m["name"] == CODE_VOLUME), None)
    if code is None and any(v["name"] == CODE_VOLUME for v in pod["volumes"]):
        code = {"name": CODE_VOLUME, "mountPath": "/" + CODE_VOLUME}
        runner["volumeMounts"].append(code)
    if code is not None:
        if code not in user["volumeMounts"]:
            user["volumeMounts"].append(dict(code))
        user["workingDir"] = code["mountPath"]
    runner.update(name=shim.RUNNER_CONTAINER, image=k.runner_image, restartPolicy="Always",
                  resources=copy.deepcopy(_RUNNER_RESOURCES))
    runner["env"] = [*runner["env"], {"name": protocol.ENV_EXCHANGE_DIR, "value": shim.DIR}]
    runner["volumeMounts"] = [*runner["volumeMounts"], exchange]
    pod["initContainers"] = [runner]
    pod["containers"] = [user]
    pod["shareProcessNamespace"] = True
    pod["volumes"].append({"name": shim.VOLUME, "emptyDir": {"sizeLimit": "1Gi"}})


def log_container(pod: Mapping[str, Any]) -> str:
    """The container whose log is the trial's: the runner's in a split pod, else ``trial``."""
    inits = (pod.get("spec") or {}).get("initContainers") or []
    if any(c.get("name") == shim.RUNNER_CONTAINER for c in inits):
        return shim.RUNNER_CONTAINER
    return CONTAINER_NAME


def _merge_template(spec: SweepSpec, template: dict[str, Any], patch: dict[str, Any]
                    ) -> dict[str, Any]:
    from sweeper.spec.k8s_types import check

    field = "kubernetes.pod_template"
    try:
        merged = merge(template, patch)
    except MergeError as e:
        raise SpecError(e.message, source=spec.source, field=_dotted(field, e.path)) from None
    problem = check(merged, "V1PodTemplateSpec")
    if problem is not None:
        where, message = problem
        raise SpecError(f"the pod template merged with it is invalid: {message}",
                        source=spec.source, field=_dotted(field, where))
    return merged


def _dotted(prefix: str, path: tuple[str | int, ...]) -> str:
    return prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


# --------------------------------------------------------------------------- volumes


def _volumes(spec: SweepSpec) -> list[dict[str, Any]]:
    k = spec.kubernetes
    out: list[dict[str, Any]] = [
        {"name": "scratch", "emptyDir": {"sizeLimit": k.scratch_size}},
        {"name": "sweeper-spec", "configMap": {"name": spec_configmap_name(spec.name)}}]
    if k.shm_size != "0":
        out.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": k.shm_size}})
    if k.storage_proxy:
        out.append(proxy_token_volume())
    if k.storage_proxy and k.storage_proxy_ca:
        out.append({"name": "sweeper-proxy-ca", "configMap": {
            "name": k.storage_proxy_ca, "items": [{"key": "ca.crt", "path": "ca.crt"}]}})
    out += [volume_source(v) for v in k.volumes]
    return out


def proxy_token_volume() -> dict[str, Any]:
    """The pod's bound ServiceAccount token for the storage proxy's audience only (the API
    server refuses it for anything else; it dies with the pod)."""
    from sweeper.study.remote.credentials import DEFAULT_AUDIENCE

    return {"name": "sweeper-proxy-token", "projected": {"sources": [{"serviceAccountToken": {
        "audience": DEFAULT_AUDIENCE, "expirationSeconds": PROXY_TOKEN_SECONDS,
        "path": "token"}}]}}


def volume_source(v: Volume) -> dict[str, Any]:
    """One ``kubernetes.volumes`` entry as a pod volume."""
    if v.kind == "nfs":
        nfs: dict[str, Any] = {"server": v.server, "path": v.path}
        if v.read_only:
            nfs["readOnly"] = True
        return {"name": v.name, "nfs": nfs}
    if v.kind == "empty_dir":
        return {"name": v.name, "emptyDir": {"sizeLimit": v.size_limit} if v.size_limit else {}}
    key, ref = _SOURCES[v.kind]
    source: dict[str, Any] = {ref: v.source}
    if v.kind == "pvc" and v.read_only:
        source["readOnly"] = True
    return {"name": v.name, key: source}


def _mounts(k: KubernetesSpec) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"name": "scratch", "mountPath": SCRATCH},
                                 {"name": "sweeper-spec", "mountPath": SPEC_DIR,
                                  "readOnly": True}]
    if k.shm_size != "0":
        out.append({"name": "dshm", "mountPath": SHM})
    if k.storage_proxy:
        out.append({"name": "sweeper-proxy-token", "mountPath": PROXY_TOKEN_DIR,
                    "readOnly": True})
    if k.storage_proxy and k.storage_proxy_ca:
        out.append({"name": "sweeper-proxy-ca", "mountPath": PROXY_CA_DIR, "readOnly": True})
    for v in k.volumes:
        mount: dict[str, Any] = {"name": v.name, "mountPath": v.mount_path}
        if v.read_only or v.kind in ("config_map", "secret"):
            mount["readOnly"] = True
        out.append(mount)
    return out


def _add_code(spec: SweepSpec, pod: dict[str, Any], code: str | None) -> None:
    """The code snapshot's emptyDir, its mount, and what tells the runner to fetch it: the
    snapshot, its store, and the spec's directory inside it (relative paths of the spec);
    nothing without a snapshot."""
    if code is None:
        return
    from sweeper.code.launch import spec_dir_in_code
    from sweeper.code.stores import store_kind

    pod["volumes"].append({"name": protocol.CODE_VOLUME, "emptyDir": {}})
    container = pod["containers"][0]
    container["volumeMounts"].append({"name": protocol.CODE_VOLUME,
                                      "mountPath": protocol.CODE_MOUNT_PATH})
    rel = spec_dir_in_code(spec)
    container["env"] += [
        {"name": protocol.ENV_CODE, "value": code},
        {"name": protocol.ENV_CODE_STORE, "value": store_kind(spec.artifacts)},
        {"name": protocol.ENV_SPEC_DIR,
         "value": protocol.CODE_MOUNT_PATH + ("" if rel == "." else "/" + rel)}]


def checkpoint_dir(k: KubernetesSpec) -> str:
    """Where the pod's runner keeps checkpoints: the named durable volume, else /scratch
    (gone with the pod; S3 artifacts make checkpoints durable there, see the runner)."""
    vol = k.volume(k.checkpoint_volume) if k.checkpoint_volume else None
    return f"{vol.mount_path}/checkpoints" if vol else f"{SCRATCH}/checkpoints"


# --------------------------------------------------------------------------- the container


def _container(spec: SweepSpec, mapping: list[int] | None) -> dict[str, Any]:
    k = spec.kubernetes
    return {
        "name": CONTAINER_NAME,
        "image": k.image,
        "imagePullPolicy": k.image_pull_policy,
        "command": list(RUNNER_COMMAND),
        "env": _env(spec, k, mapping),
        "resources": resources(spec),
        "securityContext": {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": _mounts(k),
    }


def _env(spec: SweepSpec, k: KubernetesSpec, mapping: list[int] | None) -> list[dict[str, Any]]:
    # The root filesystem is read-only: HOME, TMPDIR and checkpoints live on the emptyDir.
    plain: dict[str, str] = {"HOME": SCRATCH, "TMPDIR": SCRATCH, "PYTHONUNBUFFERED": "1",
                             "OMP_NUM_THREADS": str(_threads(spec))}
    if k.termination_grace_period is not None:
        # The runner's own deadline after SIGTERM follows the pod's grace period.
        plain[protocol.ENV_TERMINATION_GRACE_PERIOD] = f"{k.termination_grace_period:g}"
    plain.update(k.env)
    env: list[dict[str, Any]] = [{"name": n, "value": v} for n, v in plain.items()]
    env += [
        {"name": protocol.ENV_STUDY, "value": spec.name},
        # Never a literal: the kubelet reads the URL (it holds a password) from the Secret.
        # Through a storage proxy the pods get its address and no database Secret at all.
        {"name": protocol.ENV_STORAGE, "value": f"grpc://{k.storage_proxy}"}
        if k.storage_proxy else
        {"name": protocol.ENV_STORAGE, "valueFrom": {"secretKeyRef": {
            "name": k.storage_secret, "key": k.storage_secret_key}}},
        {"name": protocol.ENV_JOB_ID, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}},
        {"name": protocol.ENV_CHECKPOINT_DIR, "value": checkpoint_dir(k)},
        {"name": protocol.ENV_SPEC_FILE, "value": f"{SPEC_DIR}/{SPEC_KEY}"},
    ]
    if k.storage_proxy:
        env.append({"name": protocol.ENV_PROXY_TOKEN_FILE, "value": f"{PROXY_TOKEN_DIR}/token"})
        if k.storage_proxy_ca:
            env.append({"name": protocol.ENV_PROXY_CA, "value": f"{PROXY_CA_DIR}/ca.crt"})
    env += _data_env(spec)
    a = spec.artifacts
    secret = (a.credentials_secret if a.store == "s3" else None) or spec.data.credentials_secret
    if secret:
        # The S3 client reads its keys from the environment; they live in the user's Secret.
        env += [{"name": key, "valueFrom": {"secretKeyRef": {
            "name": secret, "key": key}}} for key in S3_CREDENTIAL_KEYS]
    if spec.open_ended:  # each of the Job's pods is a slot running index after index
        env.append({"name": protocol.ENV_INDEX_STRIDE, "value": str(slots_of(spec))})
    elif k.indexes_per_pod > 1:
        env.append({"name": protocol.ENV_INDEXES_PER_POD, "value": str(k.indexes_per_pod)})
    if mapping is not None:
        env.append({"name": protocol.ENV_INDEX_MAP,
                    "value": protocol.encode_index_map(mapping)})
    return env


def _data_env(spec: SweepSpec) -> list[dict[str, Any]]:
    """``data.path`` must be inside a read-only volume of the pod; an S3 dataset is synced
    into the pod's scratch (once per pod: the indexes a pod runs share it)."""
    d = spec.data
    if d.path is not None:
        vol = next((v for v in spec.kubernetes.volumes
                    if d.path == v.mount_path or d.path.startswith(v.mount_path + "/")), None)
        if vol is None:
            raise SpecError(f"{d.path} is in no volume of kubernetes.volumes: mount the dataset "
                            "(e.g. a pvc with read_only: true) at it or above it",
                            source=spec.source, field="data.path")
        if not (vol.read_only or vol.kind in ("config_map", "secret")):
            raise SpecError(f"the dataset's volume {vol.name!r} must be read_only: true (every "
                            "trial reads it at once)", source=spec.source, field="data.path")
        return [{"name": protocol.ENV_DATA_DIR, "value": d.path}]
    if d.bucket is not None:
        return [{"name": protocol.ENV_DATA_CACHE, "value": f"{SCRATCH}/sweeper-data"}]
    return []


def _threads(spec: SweepSpec) -> int:
    """Torch sizes its thread pool by the node's cores, not the pod's CPU share."""
    cpu = spec.trial.resources.cpu or DEFAULT_CPU
    try:
        value = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    except ValueError:  # an odd but valid quantity (1k): leave torch's default alone
        return 1
    return max(1, int(value))


def resources(spec: SweepSpec) -> dict[str, Any]:
    """Requests for what the scheduler must reserve (CPU, memory, the scratch disk); limits
    for memory, the GPUs and, only with ``cpu_limit: true``, the CPU."""
    r, k = spec.trial.resources, spec.kubernetes
    cpu, memory = r.cpu or DEFAULT_CPU, r.memory or DEFAULT_MEMORY
    requests = {"cpu": cpu, "memory": memory, "ephemeral-storage": k.scratch_size}
    limits: dict[str, Any] = {"memory": memory}
    if k.cpu_limit:
        limits["cpu"] = cpu
    if r.gpu:
        if r.gpu != int(r.gpu):
            raise SpecError(f"a fraction of a GPU ({r.gpu:g}) packs workers onto a GPU on the "
                            "local backend only; on Kubernetes ask for a whole slice, e.g. "
                            "kubernetes.gpu_resource: nvidia.com/mig-1g.10gb with gpu: 1",
                            source=spec.source, field="trial.resources.gpu")
        limits[k.gpu_resource] = int(r.gpu)
    return {"requests": requests, "limits": limits}
