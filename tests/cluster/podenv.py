"""What a container of a pod sees, worked out the way the kubelet does: its environment
(``env``, ``envFrom``, the downward API, Secrets and ConfigMaps, resource fields), its volumes
(emptyDir, Secret, ConfigMap, downward API, hostPath, PVC and NFS as directories) and its argv.

The emulated part: a pod is a process on this machine, so a volume's ``mountPath`` is rewritten
to its directory wherever it starts an env value, an argument or ``workingDir``, and a Service
address (``NAME.NS.svc[.cluster.local][:PORT]``) becomes 127.0.0.1 and the Service's
``targetPort`` (this node's stand-in for cluster DNS and kube-proxy: every pod shares the
host's network). A pod's own DNS name under a headless Service (``spec.hostname`` and
``spec.subdomain``, as JobSet and Indexed Jobs set them: ``HOST.SUBDOMAIN``,
``HOST.SUBDOMAIN.NS``, ``HOST.SUBDOMAIN.NS.svc[.cluster.local]``, each with an optional
``:PORT``) becomes 127.0.0.1 with the port unchanged, as for a hostNetwork pod. Both rewrites
apply after ``$(VAR)`` expansion.
"""

from __future__ import annotations

import base64
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

Obj = dict[str, Any]
NODE_IP = "127.0.0.1"
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_FIELD_MAP = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
#: NAME.NS.svc[.cluster.local][:PORT], or NAME[.NS]:PORT (a short name needs its port here, so
#: that a plain word is never taken for a Service).
_SERVICE_FQDN = re.compile(r"(?<![\w.-])([a-z0-9][-a-z0-9]*)\.([a-z0-9][-a-z0-9]*)"
                           r"\.svc(?:\.cluster\.local)?(?::(\d+))?(?![\w.-])")
#: HOST.SUBDOMAIN[.NS[.svc[.cluster.local]]][:PORT]: SUBDOMAIN a Service name (a DNS-1035
#: label: no float like 0.5 is a candidate), NS never ``svc`` (that is a Service's own FQDN).
_POD_HOST = re.compile(r"(?<![\w.-])([a-z0-9][-a-z0-9]*)\.([a-z][-a-z0-9]*)"
                       r"(?:\.(?!svc(?![\w-]))([a-z0-9][-a-z0-9]*)"
                       r"(?:\.svc(?:\.cluster\.local)?)?)?(?::(\d+))?(?![\w.-])")
_SERVICE_SHORT = re.compile(r"(?<![\w.-])([a-z0-9][-a-z0-9]*)(?:\.([a-z0-9][-a-z0-9]*))?"
                            r":(\d+)(?![\w.@-])")
_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60), "n": Decimal("1e-9"), "u": Decimal("1e-6"),
    "m": Decimal("1e-3"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18),
}


class Sources(Protocol):
    """The objects a pod refers to, read through the API server."""

    def data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None: ...

    def service_ports(self, namespace: str, name: str) -> dict[int, int] | None: ...

    def headless_services(self, namespace: str) -> frozenset[str]: ...

    def project_token(self, path: Path, namespace: str, account: str, audience: str | None,
                      seconds: int, pod: Obj) -> None:
        """Write a token from the TokenRequest API, bound to ``pod``, to ``path``, and renew
        it there as the kubelet does (at 80 % of its lifetime) while the pod lives."""
        ...


class ContainerConfigError(Exception):
    """The container cannot be created yet (a missing Secret, ConfigMap or key): the pod
    stays Pending with this waiting reason and the node retries, as the kubelet does."""

    def __init__(self, message: str, reason: str = "CreateContainerConfigError") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def parse_quantity(q: Any) -> Decimal:
    s = str(q).strip()
    for suf in sorted(_SUFFIXES, key=len, reverse=True):
        if s.endswith(suf):
            return Decimal(s[: -len(suf)]) * _SUFFIXES[suf]
    return Decimal(s)


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: ``$$`` escapes, unknown references stay as written."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([^)]*)\)", sub, value)


def rewrite_path(value: str, mounts: list[tuple[str, str]]) -> str:
    """``/scratch/ckpt`` -> ``<pod dir>/volumes/scratch-x/ckpt`` for a volume mounted at
    /scratch; also the value part of ``--flag=/scratch/x``."""
    for mount_path, host in mounts:
        mp = mount_path.rstrip("/") or "/"
        if value == mp or value.startswith(mp + "/"):
            return host + value[len(mp):]
    if value.startswith("-") and "=" in value:
        flag, rest = value.split("=", 1)
        new = rewrite_path(rest, mounts)
        if new != rest:
            return f"{flag}={new}"
    return value


def rewrite_services(value: str, namespace: str, sources: Sources,
                     headless: dict[str, frozenset[str]] | None = None) -> str:
    """A Service's DNS name (and port) -> 127.0.0.1 (and the port its endpoints listen on); a
    pod's DNS name under a headless Service (and port) -> 127.0.0.1 (and the same port).
    ``headless``: the headless Services per namespace already looked up (filled in here)."""
    known = {} if headless is None else headless

    def pod_host(m: re.Match[str]) -> str:
        subdomain, ns, port = m.group(2), m.group(3) or namespace, m.group(4)
        if ns not in known:
            known[ns] = sources.headless_services(ns)
        if subdomain not in known[ns]:
            return m.group(0)
        return NODE_IP if port is None else f"{NODE_IP}:{port}"

    def sub(m: re.Match[str], short: bool) -> str:
        name, ns, port = m.group(1), m.group(2) or namespace, m.group(3)
        ports = sources.service_ports(ns, name)
        if ports is None:
            return m.group(0)
        if port is None:
            return NODE_IP
        return f"{NODE_IP}:{ports.get(int(port), int(port))}"
    value = _POD_HOST.sub(pod_host, value)
    value = _SERVICE_FQDN.sub(lambda m: sub(m, False), value)
    return _SERVICE_SHORT.sub(lambda m: sub(m, True), value)


def _decode(b64: str) -> str:
    return base64.b64decode(b64).decode("utf-8", errors="surrogateescape")


def decode_secret(obj: Obj) -> dict[str, str]:
    out = {k: _decode(v) for k, v in (obj.get("data") or {}).items()}
    out.update(obj.get("stringData") or {})
    return out


class PodEnv:
    """Env, argv and volumes of one pod's containers."""

    def __init__(self, pod: Obj, sources: Sources, node_name: str,
                 allocatable: Callable[[str], str]) -> None:
        self.pod = pod
        self.sources = sources
        self.node_name = node_name
        self.allocatable = allocatable
        self.ns = pod["metadata"].get("namespace", "")

    def _key_ref(self, kind: str, ref: Obj) -> str | None:
        name, key, optional = ref.get("name", ""), ref.get("key", ""), ref.get("optional", False)
        data = self.sources.data(kind, self.ns, name)
        if data is None or key not in data:
            if optional:
                return None
            if data is None:
                raise ContainerConfigError(f'{kind.lower()} "{name}" not found')
            raise ContainerConfigError(f"couldn't find key {key} in {kind} {self.ns}/{name}")
        return data[key]

    def field_ref(self, path: str) -> str:
        meta, spec, status = self.pod["metadata"], self.pod["spec"], self.pod.get("status") or {}
        m = _FIELD_MAP.match(path)
        if m:
            return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
        simple = {
            "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
            "metadata.uid": meta.get("uid"),
            "spec.nodeName": spec.get("nodeName") or self.node_name,
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.hostIP": NODE_IP, "status.hostIPs": NODE_IP,
            "status.podIP": status.get("podIP") or NODE_IP, "status.podIPs": NODE_IP,
        }
        if path not in simple:
            raise ContainerConfigError(f"unsupported fieldPath: {path}")
        return str(simple[path] or "")

    def _resource_ref(self, spec: Obj, ref: Obj) -> str:
        cname = ref.get("containerName") or spec.get("name")
        container = next((c for c in self.pod["spec"].get("containers") or []
                          if c.get("name") == cname), spec)
        kind, _, res = str(ref.get("resource", "")).partition(".")
        resources = container.get("resources") or {}
        value = (resources.get(kind) or {}).get(res)
        if value is None and kind == "requests":
            value = (resources.get("limits") or {}).get(res)
        if value is None:
            value = self.allocatable(res)
        divisor = parse_quantity(ref.get("divisor") or "1")
        return str(math.ceil(parse_quantity(value) / divisor))

    def _env_from(self, spec: Obj) -> dict[str, str]:
        env: dict[str, str] = {}
        for src in spec.get("envFrom") or []:
            prefix = src.get("prefix", "")
            for kind, key in (("Secret", "secretRef"), ("ConfigMap", "configMapRef")):
                ref = src.get(key)
                if not ref:
                    continue
                data = self.sources.data(kind, self.ns, ref.get("name", ""))
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise ContainerConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
                env.update({prefix + k: v for k, v in data.items()})
        return env

    def _value_from(self, spec: Obj, vf: Obj) -> str | None:
        if vf.get("fieldRef"):
            return self.field_ref(vf["fieldRef"]["fieldPath"])
        if vf.get("secretKeyRef"):
            return self._key_ref("Secret", vf["secretKeyRef"])
        if vf.get("configMapKeyRef"):
            return self._key_ref("ConfigMap", vf["configMapKeyRef"])
        if vf.get("resourceFieldRef"):
            return self._resource_ref(spec, vf["resourceFieldRef"])
        return None

    def env(self, spec: Obj) -> dict[str, str]:
        env = self._env_from(spec)
        for e in spec.get("env") or []:
            vf = e.get("valueFrom")
            value = (expand(str(e.get("value", "")), env) if vf is None
                     else self._value_from(spec, vf))
            if value is not None:
                env[e["name"]] = value
        return env

    def argv(self, spec: Obj, env: dict[str, str]) -> list[str]:
        argv = list(spec.get("command") or []) + list(spec.get("args") or [])
        if not spec.get("command") and not spec.get("args"):
            raise ContainerConfigError(
                f"container {spec.get('name')!r} has no command or args: this node runs "
                "processes, not images, so it has no image entrypoint to fall back on",
                "CreateContainerError")
        argv = [expand(a, env) for a in argv]
        if _PYTHON.match(os.path.basename(argv[0])):
            argv[0] = sys.executable  # the project's environment stands in for the image
        return argv

    def launch(self, spec: Obj, volumes: dict[str, Path]
               ) -> tuple[list[str], dict[str, str], str | None]:
        """(argv, declared env, working directory or None) with mounts and Services
        rewritten."""
        mounts = []
        for vm in spec.get("volumeMounts") or []:
            host = volumes.get(vm.get("name", ""))
            if host is None:
                continue
            if vm.get("subPath"):
                host = host / vm["subPath"]
                host.mkdir(parents=True, exist_ok=True)
            mounts.append((str(vm["mountPath"]), str(host)))
        mounts.sort(key=lambda m: len(m[0]), reverse=True)
        declared = self.env(spec)
        argv = self.argv(spec, declared)
        headless: dict[str, frozenset[str]] = {}

        def fix(v: str) -> str:
            return rewrite_services(rewrite_path(v, mounts), self.ns, self.sources, headless)
        declared = {k: fix(v) for k, v in declared.items()}
        argv = [argv[0]] + [fix(a) for a in argv[1:]]
        wd = spec.get("workingDir")
        cwd = rewrite_path(wd, mounts) if wd else None
        if cwd is not None and not Path(cwd).is_dir():
            cwd = None  # a directory inside the image: the node's working directory instead
        return argv, declared, cwd

    # ------------------------------------------------------------------ volumes

    def volumes(self, pod_dir: Path, shared: Path) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for vol in self.pod["spec"].get("volumes") or []:
            out[vol["name"]] = self._volume(vol, pod_dir, shared)
        return out

    def _volume(self, vol: Obj, pod_dir: Path, shared: Path) -> Path:
        name = vol["name"]
        if "persistentVolumeClaim" in vol:  # one directory per claim, shared by its pods
            d = shared / "pvc" / self.ns / vol["persistentVolumeClaim"].get("claimName", name)
        elif "nfs" in vol:  # one directory per export, shared by every pod (as NFS is)
            nfs = vol["nfs"]
            d = shared / "nfs" / nfs.get("server", "") / nfs.get("path", "").lstrip("/")
        elif "hostPath" in vol:  # under the node's root: never the machine's own /
            d = shared / "host" / str(vol["hostPath"].get("path", name)).lstrip("/")
        else:
            d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=pod_dir / "volumes"))
            self._fill(vol, d)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _fill(self, vol: Obj, d: Path) -> None:
        # A projected volume's sources are the same sources as a volume's (secretName is
        # ``name`` there), plus serviceAccountToken.
        projected = (vol.get("projected") or {}).get("sources") or []
        for source in [vol, *projected]:
            for kind, key, ref_name in (("Secret", "secret", "secretName"),
                                        ("ConfigMap", "configMap", "name")):
                if source.get(key) is not None:
                    ref = ref_name if source is vol else "name"
                    self._fill_items(kind, source[key], ref, vol["name"], d)
            for item in (source.get("downwardAPI") or {}).get("items") or []:
                if item.get("fieldRef"):
                    _write(d / item["path"], self.field_ref(item["fieldRef"]["fieldPath"]))
            if source.get("serviceAccountToken") is not None:
                self._project_token(source["serviceAccountToken"], d)

    def _fill_items(self, kind: str, src: Obj, ref_name: str, vol_name: str, d: Path) -> None:
        data = self.sources.data(kind, self.ns, src.get(ref_name, ""))
        if data is None:
            if src.get("optional"):
                return
            shutil.rmtree(d, ignore_errors=True)
            raise ContainerConfigError(
                f'MountVolume.SetUp failed for volume "{vol_name}" : '
                f'{kind.lower()} "{src.get(ref_name)}" not found', "ContainerCreating")
        for item in src.get("items") or [{"key": k, "path": k} for k in data]:
            if item["key"] in data:
                _write(d / item["path"], data[item["key"]])

    def _project_token(self, src: Obj, d: Path) -> None:
        """What the kubelet does for a ``serviceAccountToken`` projection: a TokenRequest for
        the pod's ServiceAccount with the audience and lifetime asked for, bound to the pod
        (the API server's TokenReview refuses it once the pod is gone), written to the path."""
        account = self.pod["spec"].get("serviceAccountName") or "default"
        self.sources.project_token(d / src.get("path", "token"), self.ns, account,
                                   src.get("audience"),
                                   int(src.get("expirationSeconds") or 3600), self.pod)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, errors="surrogateescape")


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` whole (a reader sees the old token or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
