"""Spec -> the Kubernetes objects a sweep runs as. Pure: no I/O, no client, no cluster.

One ``batch/v1`` Indexed Job per launch. The first launch of a sweep is named after it; a
resume is ``NAME-r<N>`` and covers only the indexes with no finished trial: job index ``k``
then runs the k-th of them (``SWEEPER_INDEX_MAP``, see :mod:`sweeper.protocol`, mirrored in
the annotation ``sweeper.dev/index-map`` so ``sweeper logs`` and ``status`` can map back).
``sweeper render`` prints exactly what ``sweeper run --backend kubernetes`` submits.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from sweeper import protocol
from sweeper.errors import SpecError
from sweeper.spec import KubernetesSpec, SweepSpec

logger = logging.getLogger(__name__)

SWEEP_LABEL = "sweeper.dev/sweep"
INDEX_MAP_ANNOTATION = "sweeper.dev/index-map"
INDEXES_PER_POD_ANNOTATION = "sweeper.dev/indexes-per-pod"
LAUNCH_ANNOTATION = "sweeper.dev/launch"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CONTAINER_NAME = "trial"
RUNNER_COMMAND = ("python", "-m", "trial_runner")
SCRATCH = "/scratch"
#: The image's unprivileged user (Dockerfile: useradd --uid 10001).
RUN_AS = 10001
DEFAULT_CPU = "1"
DEFAULT_MEMORY = "2Gi"
GPU_RESOURCE = "nvidia.com/gpu"
#: Keys read from ``artifacts.credentials_secret`` (env names the S3 client expects).
S3_CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
#: A sparse index list longer than this would crowd the Job object (annotations are capped
#: at 256 KiB, the whole object at ~1.5 MiB); past it a resume Job covers every index instead
#: (runners of finished indexes exit 0 at once: the index protocol makes that safe).
MAX_INDEX_MAP_CHARS = 64 * 1024
_RESUME_RE = re.compile(r"-r(\d+)$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def labels(sweep_name: str) -> dict[str, str]:
    """The labels on every Job and pod of a sweep (``sweeper.dev/sweep`` selects them)."""
    return {
        "app.kubernetes.io/name": "sweeper-trial",
        "app.kubernetes.io/instance": sweep_name,
        "app.kubernetes.io/component": "trial",
        "app.kubernetes.io/managed-by": "sweeper",
        "app.kubernetes.io/part-of": "sweeper",
        SWEEP_LABEL: sweep_name,
    }


def selector(sweep_name: str) -> str:
    return f"{SWEEP_LABEL}={sweep_name}"


def job_name(sweep_name: str, launch: int) -> str:
    """Launch 0 is the sweep's name; later launches (resumes) are ``NAME-r<N>``."""
    return sweep_name if launch == 0 else f"{sweep_name}-r{launch}"


def launch_of(sweep_name: str, name: str) -> int | None:
    """Inverse of :func:`job_name` (None: not a Job name this sweep would use)."""
    if name == sweep_name:
        return 0
    if name.startswith(sweep_name):
        m = _RESUME_RE.fullmatch(name[len(sweep_name):])
        if m:
            return int(m.group(1))
    return None


def with_kubernetes(spec: SweepSpec, *, image: str | None = None, namespace: str | None = None,
                    storage_secret: str | None = None,
                    storage_proxy: str | None = None) -> SweepSpec:
    """The spec with command-line overrides of its ``kubernetes:`` section applied."""
    changes: dict[str, Any] = {k: v for k, v in (("image", image), ("namespace", namespace),
                                                 ("storage_secret", storage_secret)) if v}
    if storage_proxy:
        changes["storage_proxy"] = _proxy_address(storage_proxy)
    for key in ("namespace", "storage_secret"):
        if key in changes and not _DNS_LABEL_RE.match(changes[key]):
            raise SpecError(f"{changes[key]!r} is not a valid Kubernetes name",
                            source="command line", field="--" + key.replace("_", "-"))
    if not changes:
        return spec
    return dataclasses.replace(spec, kubernetes=dataclasses.replace(spec.kubernetes, **changes))


def _proxy_address(value: str) -> str:
    from sweeper.spec._primitives import parse_proxy_address

    try:
        return parse_proxy_address(value)
    except ValueError as e:
        raise SpecError(str(e), source="command line", field="--storage-proxy") from None


def index_map(spec: SweepSpec, indexes: Sequence[int] | None) -> list[int] | None:
    """The sweep indexes a Job covers, when that is not simply ``0 .. trials-1`` (else None)."""
    if indexes is None:
        return None
    todo = sorted(set(indexes))
    if todo == list(range(spec.trials)):
        return None
    for i in todo:
        if not 0 <= i < spec.trials:
            raise ValueError(f"index {i} is outside the sweep (0..{spec.trials - 1})")
    if len(protocol.encode_index_map(todo)) > MAX_INDEX_MAP_CHARS:
        logger.warning("%d missing indexes are too many to list in the Job; it covers all %d "
                       "(finished ones exit at once)", len(todo), spec.trials)
        return None
    return todo


def render_job(spec: SweepSpec, indexes: Sequence[int] | None = None, *, launch: int = 0
               ) -> dict[str, Any]:
    """The Indexed Job for ``indexes`` of ``spec`` (all of them when None)."""
    k = spec.kubernetes
    mapping = index_map(spec, indexes)
    completions = protocol.completions(k.indexes_per_pod, mapping, spec.trials)
    if completions == 0:
        raise ValueError("a Job needs at least one index")
    name = job_name(spec.name, launch)
    annotations = {INDEXES_PER_POD_ANNOTATION: str(k.indexes_per_pod),
                   LAUNCH_ANNOTATION: str(launch)}
    if mapping is not None:
        annotations[INDEX_MAP_ANNOTATION] = protocol.encode_index_map(mapping)
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": max(1, min(spec.parallelism, completions)),
        "backoffLimitPerIndex": spec.trial.retries,
        # Let every other index finish when some fail; the Job still ends Failed.
        "maxFailedIndexes": completions,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": _pod_failure_policy(),
        "ttlSecondsAfterFinished": math.ceil(k.ttl_after_finished),
        "template": _pod_template(spec, mapping),
    }
    if k.active_deadline is not None:
        job_spec["activeDeadlineSeconds"] = math.ceil(k.active_deadline)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": k.namespace, "labels": labels(spec.name),
                     "annotations": annotations},
        "spec": job_spec,
    }


def render(spec: SweepSpec, indexes: Sequence[int] | None = None, *, launch: int = 0
           ) -> list[dict[str, Any]]:
    """Every object a launch submits (today: the one Job)."""
    return [render_job(spec, indexes, launch=launch)]


def _pod_failure_policy() -> dict[str, Any]:
    """Disruptions (preemption, drain) do not count against retries; the runner's exit code
    says whether a retry can help: CONFIG stops the sweep, NO_RETRY fails only that index,
    anything else (RETRY, killed by a signal, OOM) counts against backoffLimitPerIndex."""
    return {"rules": [
        {"action": "Ignore",
         "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob",
         "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In",
                         "values": [protocol.EXIT_CONFIG]}},
        {"action": "FailIndex",
         "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In",
                         "values": [protocol.EXIT_NO_RETRY]}},
    ]}


def _pod_template(spec: SweepSpec, mapping: list[int] | None) -> dict[str, Any]:
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
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    }
    if k.node_selector:
        pod["nodeSelector"] = dict(k.node_selector)
    tolerations = [dict(t) for t in k.tolerations]
    if spec.trial.resources.gpu and not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        tolerations.append(dict(GPU_TOLERATION))
    if tolerations:
        pod["tolerations"] = tolerations
    if k.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in k.image_pull_secrets]
    return {"metadata": {"labels": labels(spec.name)}, "spec": pod}


def _container(spec: SweepSpec, mapping: list[int] | None) -> dict[str, Any]:
    k = spec.kubernetes
    return {
        "name": CONTAINER_NAME,
        "image": k.image,
        "imagePullPolicy": k.image_pull_policy,
        "command": list(RUNNER_COMMAND),
        "env": _env(spec, k, mapping),
        "resources": _resources(spec),
        "securityContext": {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "scratch", "mountPath": SCRATCH}],
    }


def _env(spec: SweepSpec, k: KubernetesSpec, mapping: list[int] | None) -> list[dict[str, Any]]:
    # The root filesystem is read-only: HOME, TMPDIR and checkpoints live on the emptyDir.
    plain: dict[str, str] = {"HOME": SCRATCH, "TMPDIR": SCRATCH, "PYTHONUNBUFFERED": "1",
                             "OMP_NUM_THREADS": str(_threads(spec))}
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
        {"name": protocol.ENV_CHECKPOINT_DIR, "value": f"{SCRATCH}/checkpoints"},
    ]
    a = spec.artifacts
    if a.store == "s3" and a.credentials_secret:
        # The S3 client reads its keys from the environment; they live in the user's Secret.
        env += [{"name": key, "valueFrom": {"secretKeyRef": {
            "name": a.credentials_secret, "key": key}}} for key in S3_CREDENTIAL_KEYS]
    if k.indexes_per_pod > 1:
        env.append({"name": protocol.ENV_INDEXES_PER_POD, "value": str(k.indexes_per_pod)})
    if mapping is not None:
        env.append({"name": protocol.ENV_INDEX_MAP,
                    "value": protocol.encode_index_map(mapping)})
    return env


def _threads(spec: SweepSpec) -> int:
    """Torch sizes its thread pool by the node's cores, not the pod's CPU share."""
    cpu = spec.trial.resources.cpu or DEFAULT_CPU
    try:
        value = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    except ValueError:  # an odd but valid quantity (1k): leave torch's default alone
        return 1
    return max(1, int(value))


def _resources(spec: SweepSpec) -> dict[str, Any]:
    r = spec.trial.resources
    requests = {"cpu": r.cpu or DEFAULT_CPU, "memory": r.memory or DEFAULT_MEMORY}
    limits: dict[str, Any] = dict(requests)
    if r.gpu:
        limits[GPU_RESOURCE] = r.gpu
    return {"requests": requests, "limits": limits}
