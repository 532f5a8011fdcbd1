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

import yaml

from . import addon
from .procs import Proc, stop_all

API = "jobset.x-k8s.io/v1alpha2"
#: Labels and annotations JobSet puts on its Jobs and pods.
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
#: Feature gates this cluster turns on.
FEATURE_GATES = {"RestartJob": True}
#: What JobSet's kustomize patches add to the pod webhooks: only JobSet's pods reach them.
POD_SELECTOR = {"matchExpressions": [{"key": NAME_LABEL, "operator": "Exists"}]}


def crds(crd_dir: Path) -> list[dict[str, Any]]:
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
    """JobSet's Configuration: loopback webhook and probes, no metrics, no leader election,
    certificates from ``cert_dir`` instead of JobSet's own cert rotation."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        "featureGates": FEATURE_GATES,
    }


def start(kubeconfig: Path, bin_dir: Path, run_dir: Path, timeout: float = 60.0) -> Proc:
    """Install JobSet's CRD and start its manager in its own session (logs in
    ``run_dir/jobset.log``); return once it is ready and its webhooks are registered."""
    exe = bin_dir / "jobset-manager"
    if not exe.exists() or not (bin_dir / "jobset-crds").is_dir():
        raise RuntimeError(f"jobset: {exe} or its CRD is not built: run tools/cluster/build.sh")
    d = run_dir / "jobset"
    d.mkdir(parents=True, exist_ok=True)
    webhook_port, probe_port = addon.free_port(), addon.free_port()
    ca = addon.make_cert("jobset", d)
    addon.apply_crds("jobset", kubeconfig, crds(bin_dir / "jobset-crds"), d / "crds.json")
    config = d / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(webhook_port, probe_port, d)))
    proc = Proc.start("jobset", [str(exe), f"--config={config}", f"--kubeconfig={kubeconfig}"],
                      run_dir, cwd=run_dir)
    try:
        addon.wait_ready(proc, probe_port, timeout)
        addon.apply("jobset", kubeconfig, webhook_configurations(
            bin_dir / "jobset-webhooks.yaml", f"https://127.0.0.1:{webhook_port}", ca),
            d / "webhooks.json")
    except BaseException:
        stop_all([proc])
        raise
    return proc
