"""The local cluster's certificates, made with openssl: a CA, the apiserver's serving cert,
an admin client cert (group ``system:masters``), the node's client certs (the kubelet as
``system:node:sweeper-node``, kube-proxy, CoreDNS) and the service-account signing key.
Throwaway credentials for a test cluster on this machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

SUBJECTS = {
    "apiserver": ("/CN=kube-apiserver",
                  "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
                  "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                  "DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1"),
    "admin": ("/O=system:masters/CN=sweeper-admin", None),
    "kubelet": ("/O=system:nodes/CN=system:node:sweeper-node", None),
    "kube-proxy": ("/CN=system:kube-proxy", None),
    "coredns": ("/CN=system:coredns", None),
}


def _openssl(*args: str, cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {out.stderr.strip().splitlines()[-1:]}")


def make_pki(d: Path, host_ip: str) -> None:
    """Write the CA, the certs and keys into ``d`` (kept if already there); ``host_ip``: the
    address the node reaches the apiserver at, in its serving cert."""
    d.mkdir(parents=True, exist_ok=True)
    if (d / "done").exists():
        return
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "3650", "-subj", "/CN=sweeper-local-ca", cwd=d)
    for name, (subject, san) in SUBJECTS.items():
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", subject, cwd=d)
        ext = d / f"{name}.ext"
        if name == "apiserver" and san:
            san += f",IP:{host_ip}"
        ext.write_text((san or "") + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "3650",
                 "-extfile", str(ext), cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    (d / "done").write_text("")
