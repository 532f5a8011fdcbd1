"""Spec -> the JobSet a multi-node sweep (``trial.nodes: N``) runs as. Pure, like
:mod:`sweeper.backends.manifests`.

One JobSet per launch (``NAME``, a resume ``NAME-r<N>``) with one replicated Job, ``t``, of
``parallelism`` replicas: the sweep's gangs (slots). Each is an Indexed Job of N pods at once
(completion index = node rank); JobSet gives every pod a stable DNS name,
``NAME-t-SLOT-NODE.NAME``, through its headless Service, and node 0's name is the gang's
rendezvous address (:mod:`sweeper.gang`). Slot ``s`` runs the indexes ``s, s+S, ...``
(:mod:`trial_runner.gang`).

Failures: a gang heals by pod. The Job controller replaces a pod that dies (same completion
index, so the same DNS name); the trial it was part of fails once for every rank (the other
ranks' collectives fail), node 0 retries it within ``trial.retries``, and the replacement joins
the retry's rendezvous. A replaced node 0 resumes its slot from the study. JobSet's own
``RestartJob`` (recreate one gang) is an alpha feature off by default in v0.12, and
``RestartJobSet`` would stop every gang's trial for one lost pod, so neither is used: a child
Job fails only when its pods failed ``backoffLimit`` times in all (the sweep's attempts), or
when a runner reports a configuration error (its pod failure policy), and either fails the
JobSet (``maxRestarts: 0``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from sweeper import gang, protocol
from sweeper.backends.manifests import (
    INDEXES_PER_POD_ANNOTATION,
    KUEUE_QUEUE_LABEL,
    LAUNCH_ANNOTATION,
    job_name,
    labels,
    render_spec_configmap,
)
from sweeper.backends.pod import COMPLETION_INDEX, CONTAINER_NAME, pod_template
from sweeper.spec import SweepSpec

API_VERSION = "jobset.x-k8s.io/v1alpha2"
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
#: The replicated Job of a sweep's JobSet: short, so that pod host names stay within 63.
REPLICATED_JOB = "t"
#: What JobSet sets on every pod of a child Job: which replica (slot) it belongs to.
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
#: ... and how many replicas (gangs) its replicated Job has, and the JobSet's name.
REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
SET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
_CONFIG_ERROR_RULE = "configError"


def slots(spec: SweepSpec) -> int:
    return max(1, min(spec.parallelism, spec.trials))


def rendezvous_host(jobset: str) -> str:
    """Node 0's DNS name in the gang of the slot ``$(SWEEPER_SLOT)`` (expanded by the kubelet
    from the variable defined before it)."""
    return f"{jobset}-{REPLICATED_JOB}-$({gang.ENV_SLOT})-0.{jobset}"


def _gang_env(spec: SweepSpec, name: str) -> list[dict[str, Any]]:
    def field(path: str) -> dict[str, Any]:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    return [
        {"name": gang.ENV_NODES, "value": str(spec.trial.nodes)},
        {"name": gang.ENV_SLOTS, "value": str(slots(spec))},
        {"name": gang.ENV_SLOT, **field(f"metadata.annotations['{JOB_INDEX}']")},
        {"name": gang.ENV_NODE_RANK, **field(f"metadata.annotations['{COMPLETION_INDEX}']")},
        {"name": gang.ENV_RDZV_HOST, "value": rendezvous_host(name)},
        {"name": gang.ENV_RDZV_PORT, "value": str(gang.DEFAULT_RDZV_PORT)},
    ]


def _gang_pod(spec: SweepSpec, name: str, code: str | None) -> dict[str, Any]:
    """The single-node pod, with each pod's share of the trial's GPUs, and the gang's
    environment in place of ``JOB_ID`` (a slot's indexes come from its place in the JobSet);
    every pod of the gang fetches the code snapshot ``code``, if any."""
    res = spec.trial.resources
    per_pod = dataclasses.replace(spec, trial=dataclasses.replace(
        spec.trial, resources=dataclasses.replace(res, gpu=res.gpu / spec.trial.nodes)))
    template = pod_template(per_pod, None, labels(spec.name), code)
    container = next(c for c in template["spec"]["containers"] if c["name"] == CONTAINER_NAME)
    env = [e for e in container["env"] if e["name"] != protocol.ENV_JOB_ID]
    container["env"] = env + _gang_env(spec, name)
    container.setdefault("ports", []).append(
        {"name": "rendezvous", "containerPort": gang.DEFAULT_RDZV_PORT, "protocol": "TCP"})
    return template


def _child_job(spec: SweepSpec, name: str, code: str | None) -> dict[str, Any]:
    n = spec.trial.nodes
    return {
        "completionMode": "Indexed", "completions": n, "parallelism": n,
        # Pods of the gang may fail (and be replaced) this often in all: each failed attempt
        # of the slot's indexes can cost one.
        "backoffLimit": spec.trials * (spec.trial.retries + 1),
        "podReplacementPolicy": "Failed",  # a replacement starts once the old pod is gone
        "podFailurePolicy": {"rules": [
            {"action": "Ignore",
             "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob",
             "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In",
                             "values": [protocol.EXIT_CONFIG]}}]},
        "template": _gang_pod(spec, name, code),
    }


def render_jobset(spec: SweepSpec, *, launch: int = 0, code: str | None = None
                  ) -> dict[str, Any]:
    """The JobSet of one launch of a multi-node sweep (every index: a resume's gangs skip
    the finished ones in a query each); its pods fetch the code snapshot ``code``, if any."""
    k = spec.kubernetes
    name = job_name(spec.name, launch)
    body: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All"},
        "failurePolicy": {
            "maxRestarts": 0,
            "rules": [{"name": _CONFIG_ERROR_RULE, "action": "FailJobSet",
                       "onJobFailureReasons": ["PodFailurePolicy"]}]},
        "replicatedJobs": [{
            "name": REPLICATED_JOB, "replicas": slots(spec),
            # No sweep label on the child Jobs: `sweeper status` and `cancel` see the
            # JobSet, never its Jobs (deleting one would only make JobSet recreate it).
            "template": {"spec": _child_job(spec, name, code)}}],
    }
    if KUEUE_QUEUE_LABEL in k.labels:
        body["suspend"] = True  # Kueue admits the whole JobSet (every gang) as one workload
    if k.active_deadline is not None:
        body["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"] = \
            math.ceil(k.active_deadline)
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": k.namespace,
                     "labels": {**k.labels, **labels(spec.name)},
                     "annotations": {**k.annotations, LAUNCH_ANNOTATION: str(launch),
                                     INDEXES_PER_POD_ANNOTATION: "1"}},
        "spec": body,
    }


def render(spec: SweepSpec, *, launch: int = 0, code: str | None = None
           ) -> list[dict[str, Any]]:
    """The ConfigMap with the normalised spec (every pod mounts it), then the JobSet."""
    return [render_spec_configmap(spec), render_jobset(spec, launch=launch, code=code)]
