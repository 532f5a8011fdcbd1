"""Spec -> the Kubernetes objects a sweep runs as. Pure: no I/O, no client, no cluster.

One ``batch/v1`` Indexed Job per launch. The first launch of a sweep is named after it; a
resume is ``NAME-r<N>`` and covers only the indexes with no finished trial: job index ``k``
then runs the k-th of them (``SWEEPER_INDEX_MAP``, see :mod:`sweeper.protocol`, mirrored in
the annotation ``sweeper.dev/index-map`` so ``sweeper logs`` and ``status`` can map back).
``sweeper render`` prints exactly what ``sweeper run --backend kubernetes`` submits.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from sweeper import protocol
from sweeper.backends.pod import (  # re-exported: the names other modules know manifests by
    COMPLETION_INDEX,
    CONTAINER_NAME,
    DEFAULT_CPU,
    DEFAULT_MEMORY,
    RUN_AS,
    RUNNER_COMMAND,
    S3_CREDENTIAL_KEYS,
    SCRATCH,
    SPEC_DIR,
    SPEC_KEY,
    log_container,
    pod_template,
    slots_of,
    spec_configmap_name,
)
from sweeper.errors import SpecError
from sweeper.spec import SweepSpec

logger = logging.getLogger(__name__)

SWEEP_LABEL = "sweeper.dev/sweep"
INDEX_MAP_ANNOTATION = "sweeper.dev/index-map"
INDEXES_PER_POD_ANNOTATION = "sweeper.dev/indexes-per-pod"
LAUNCH_ANNOTATION = "sweeper.dev/launch"
#: An open-ended sweep's Job: each completion index j is a slot that runs the sweep indexes
#: ``j, j+S, j+2S, ...`` (S, this annotation's value: the runner's ``SWEEPER_INDEX_STRIDE``).
INDEX_STRIDE_ANNOTATION = "sweeper.dev/index-stride"
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
    from sweeper.spec.checks import parse_proxy_address

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


#: The label Kueue admits a Job by (the LocalQueue's name).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def render_job(spec: SweepSpec, indexes: Sequence[int] | None = None, *, launch: int = 0,
               code: str | None = None) -> dict[str, Any]:
    """The Indexed Job for ``indexes`` of ``spec`` (all of them when None); its pods fetch
    the code snapshot ``code`` when given (:func:`sweeper.backends.pod.pod_template`)."""
    k = spec.kubernetes
    # An open-ended sweep's slots replay their indexes (finished ones are a lookup each).
    mapping = None if spec.open_ended else index_map(spec, indexes)
    completions = slots_of(spec) if spec.open_ended else \
        protocol.completions(k.indexes_per_pod, mapping, spec.trials)
    if completions == 0:
        raise ValueError("a Job needs at least one index")
    name = job_name(spec.name, launch)
    annotations = {INDEXES_PER_POD_ANNOTATION: str(k.indexes_per_pod),
                   LAUNCH_ANNOTATION: str(launch)}
    if mapping is not None:
        annotations[INDEX_MAP_ANNOTATION] = protocol.encode_index_map(mapping)
    if spec.open_ended:
        annotations[INDEX_STRIDE_ANNOTATION] = str(completions)
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
        "template": pod_template(spec, mapping, labels(spec.name), code),
    }
    if k.active_deadline is not None:
        job_spec["activeDeadlineSeconds"] = math.ceil(k.active_deadline)
    if KUEUE_QUEUE_LABEL in k.labels:
        # Created suspended: Kueue unsuspends the Job when it admits it. A queued Job created
        # running could start pods before Kueue (webhook or reconciler) suspends it.
        job_spec["suspend"] = True
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # The user's labels too: Kueue admits a Job by its kueue.x-k8s.io/queue-name label.
        "metadata": {"name": name, "namespace": k.namespace,
                     "labels": {**k.labels, **labels(spec.name)},
                     "annotations": {**k.annotations, **annotations}},
        "spec": job_spec,
    }


def render(spec: SweepSpec, indexes: Sequence[int] | None = None, *, launch: int = 0,
           code: str | None = None) -> list[dict[str, Any]]:
    """Every object a launch submits: the ConfigMap with the normalised spec (every pod
    mounts it), then the Job. Applied on their own (GitOps, no ``sweeper run``), the first
    runner creates the sweep from the spec."""
    return [render_spec_configmap(spec), render_job(spec, indexes, launch=launch, code=code)]


def render_spec_configmap(spec: SweepSpec) -> dict[str, Any]:
    """ConfigMap ``NAME-spec``: the normalised spec as JSON (no storage URL, no secrets: the
    spec holds none), what a runner that finds no sweep creates it from."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": spec_configmap_name(spec.name),
                     "namespace": spec.kubernetes.namespace,
                     "labels": labels(spec.name)},
        "data": {SPEC_KEY: json.dumps(spec.to_dict(), indent=1) + "\n"},
    }


def checkpoint_warning(spec: SweepSpec) -> str | None:
    """Why checkpoints of this sweep would not survive a replaced pod (None: they would)."""
    if spec.artifacts.store == "s3" or spec.kubernetes.checkpoint_volume:
        return None
    return (f"checkpoints go to the pod's {SCRATCH}, which is gone when a pod is replaced "
            "(preemption, OOM kill, node loss): a retry then starts from step 0; set "
            "artifacts.store: s3 or kubernetes.checkpoint_volume to keep them")


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


__all__ = ["COMPLETION_INDEX", "CONTAINER_NAME", "DEFAULT_CPU", "DEFAULT_MEMORY",
           "INDEXES_PER_POD_ANNOTATION", "INDEX_MAP_ANNOTATION", "INDEX_STRIDE_ANNOTATION",
           "KUEUE_QUEUE_LABEL",
           "LAUNCH_ANNOTATION",
           "RUNNER_COMMAND", "RUN_AS", "S3_CREDENTIAL_KEYS", "SCRATCH", "SPEC_DIR", "SPEC_KEY",
           "SWEEP_LABEL", "checkpoint_warning", "index_map", "job_name", "labels",
           "launch_of", "log_container", "render", "render_job", "render_spec_configmap",
           "selector",           "spec_configmap_name", "with_kubernetes"]
