"""Kueue on the local control plane: its manager (tools/cluster/kueue, built by build.sh into
.cluster/bin with Kueue's CRDs in kueue-crds/ and its webhook manifests in
kueue-webhooks.yaml), with the batch/Job integration only.

Kueue's webhooks are served for real on loopback: a throwaway self-signed certificate, the
conversion webhook patched into the CRDs kustomize patches, and the admission webhooks of
Kueue's own kinds and of batch/v1 Jobs registered with ``clientConfig.url``. So a Job created
with the queue label is suspended by Kueue's mutating webhook, as on a real cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import addon
from .procs import Proc

API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: CRDs that Kueue's kustomization points at the /convert webhook (v1beta1 <-> v1beta2).
CONVERTED = ("clusterqueues", "cohorts", "localqueues", "workloads")
#: The API groups whose admission webhooks this manager serves; the manifests list more.
SERVED_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
#: Quota for the resources sweeper's pods request besides CPU, so that only CPU gates admission.
AMPLE = {"memory": "1Ti", "ephemeral-storage": "1Ti"}


def crds(crd_dir: Path, base_url: str, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs, with the conversion webhook that Kueue's kustomization adds."""
    out = []
    for f in sorted(crd_dir.glob("*.yaml")):
        crd = addon.load_yaml(f)
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": addon.client_config(f"{base_url}/convert", ca),
                "conversionReviewVersions": ["v1"]}}
        out.append(crd)
    return out


def webhook_configurations(manifests: Path, base_url: str,
                           ca: bytes) -> list[dict[str, Any]]:
    """The Mutating/ValidatingWebhookConfigurations of Kueue's manifests, cut to what is served
    and pointed at ``base_url``."""
    out = []
    for doc in addon.load_all_yaml(manifests):
        hooks = [h for h in doc.get("webhooks", [])
                 if {g for r in h["rules"] for g in r["apiGroups"]} <= SERVED_GROUPS]
        for h in hooks:
            addon.point_at(h, base_url, ca)
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
        out.append({**doc, "webhooks": hooks})
    return out


def configuration(webhook_port: int, probe_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration (:func:`addon.configuration`): batch/Job only, Jobs without the
    queue label left alone."""
    return addon.configuration("config.kueue.x-k8s.io/v1beta2", webhook_port, probe_port,
                               cert_dir, namespace="kueue-system",
                               manageJobsWithoutQueueName=False,
                               integrations={"frameworks": ["batch/job"]})


def start(kubeconfig: Path, bin_dir: Path, run_dir: Path, timeout: float = 60.0) -> Proc:
    """Install Kueue's CRDs and start its manager (:func:`addon.start`, logs in
    ``run_dir/kueue.log``); return once it is ready and its webhooks are registered."""
    return addon.start("kueue", kubeconfig, bin_dir, run_dir, timeout, crds=crds,
                       webhooks=webhook_configurations, configuration=configuration)


def queue_objects(name: str, namespace: str, cpu: str) -> list[dict[str, Any]]:
    """A ResourceFlavor, a ClusterQueue and a LocalQueue (in ``namespace``), all named ``name``:
    ``cpu`` is the ClusterQueue's CPU quota ("0": nothing is admitted until it is raised);
    memory and ephemeral storage get ample quota so that only CPU decides."""
    quota = {"cpu": cpu, **AMPLE}
    return [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}},
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": list(quota),
             "flavors": [{"name": name, "resources": [
                 {"name": r, "nominalQuota": q} for r, q in quota.items()]}]}]}},
        {"apiVersion": API, "kind": "LocalQueue",
         "metadata": {"name": name, "namespace": namespace},
         "spec": {"clusterQueue": name}},
    ]
