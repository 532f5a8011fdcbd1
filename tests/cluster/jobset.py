"""JobSet on the local control plane: its manager (tools/cluster/jobset, built by build.sh into
.cluster/bin with JobSet's CRD in jobset-crds/ and its webhook manifests in
jobset-webhooks.yaml): the JobSet and pod reconcilers, and JobSet's admission webhooks.

The webhooks are served for real on loopback, as Kueue's are (tests/cluster/addon.py): a
throwaway self-signed certificate and the Mutating/ValidatingWebhookConfigurations of JobSet's
manifests registered with ``clientConfig.url``, the pod hooks limited to JobSet's pods by the
``objectSelector`` that JobSet's kustomize patches add. So a JobSet is defaulted and validated
by JobSet's own code, as on a real cluster. The CRD serves one version (v1alpha2), so the
conversion webhook that JobSet's kustomization patches in is never called and is left out.

The alpha feature gate ``RestartJob`` is on (failure-policy actions ``RestartJob`` and
``RestartJobAndIgnoreMaxRestarts``: recreate only the failed child Job); JobSet's default
leaves it off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import addon
from .procs import Proc

API = "jobset.x-k8s.io/v1alpha2"
#: Labels and annotations JobSet puts on its Jobs and pods.
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
#: Feature gates this cluster turns on.
FEATURE_GATES = {"RestartJob": True}
#: What JobSet's kustomize patches add to the pod webhooks: only JobSet's pods reach them.
POD_SELECTOR = {"matchExpressions": [{"key": NAME_LABEL, "operator": "Exists"}]}


def crds(crd_dir: Path, base_url: str, ca: bytes) -> list[dict[str, Any]]:
    """JobSet's CRD as it is (it serves one version: no conversion webhook to point)."""
    return [addon.load_yaml(f) for f in sorted(crd_dir.glob("*.yaml"))]


def webhook_configurations(manifests: Path, base_url: str,
                           ca: bytes) -> list[dict[str, Any]]:
    """The Mutating/ValidatingWebhookConfigurations of JobSet's manifests pointed at
    ``base_url``, the pod hooks with JobSet's ``objectSelector``."""
    out = []
    for doc in addon.load_all_yaml(manifests):
        for h in doc.get("webhooks", []):
            addon.point_at(h, base_url, ca)
            if any("pods" in r["resources"] for r in h["rules"]):
                h["objectSelector"] = POD_SELECTOR
        doc["metadata"] = {"name": "jobset-" + doc["metadata"]["name"]}
        out.append(doc)
    return out


def configuration(webhook_port: int, probe_port: int, cert_dir: Path) -> dict[str, Any]:
    """JobSet's Configuration (:func:`addon.configuration`) with this cluster's feature gates."""
    return addon.configuration("config.jobset.x-k8s.io/v1alpha1", webhook_port, probe_port,
                               cert_dir, featureGates=FEATURE_GATES)


def start(kubeconfig: Path, bin_dir: Path, run_dir: Path, timeout: float = 60.0) -> Proc:
    """Install JobSet's CRD and start its manager (:func:`addon.start`, logs in
    ``run_dir/jobset.log``); return once it is ready and its webhooks are registered."""
    return addon.start("jobset", kubeconfig, bin_dir, run_dir, timeout, crds=crds,
                       webhooks=webhook_configurations, configuration=configuration)
