"""The ``kubernetes:`` section: image, names, placement, the pod's shape (labels, annotations,
priority and runtime class, affinity, grace period, /dev/shm, scratch, volumes, GPU resource,
CPU limit) and the ``pod_template`` escape hatch.

Pass-through Kubernetes objects (``affinity``, ``pod_template``) are checked against the
official client's models when the spec comes from a file (``deep``); the trial runner reads
stored specs without that check (it never imports the kubernetes client).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sweeper.protocol import RESERVED_ENV
from sweeper.spec.checks import (
    ENV_NAME_RE,
    NAME_RE,
    QUANTITY_RE,
    Checks,
    clip,
    kind_of,
    parse_proxy_address,
)
from sweeper.spec.k8s_model import VOLUME_KINDS, KubernetesSpec, Volume
from sweeper.spec.yamldoc import Path_

K8S_KEYS = ("image", "runner_image", "image_pull_policy", "namespace", "storage_secret",
            "storage_secret_key", "service_account", "node_selector", "tolerations",
            "image_pull_secrets", "env",
            "indexes_per_pod", "active_deadline", "ttl_after_finished", "labels", "annotations",
            "priority_class", "runtime_class", "affinity", "termination_grace_period",
            "shm_size", "scratch_size", "volumes", "gpu_resource", "cpu_limit",
            "checkpoint_volume", "pod_template", "storage_proxy", "storage_proxy_ca")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
VOLUME_KEYS = ("name", "mount_path", "read_only", *VOLUME_KINDS)
#: Volumes and mount paths the rendered pod uses itself.
RESERVED_VOLUMES = ("scratch", "dshm", "sweeper-spec", "sweeper-proxy-token", "sweeper-proxy-ca",
                    "sweeper-exchange")
RESERVED_MOUNTS = ("/scratch", "/dev/shm", "/etc/sweeper", "/var/run/secrets/sweeper-proxy",
                   "/etc/sweeper-proxy-ca", "/run/sweeper")
#: Label and annotation keys sweeper sets (or the Job controller does) on every Job and pod.
_RESERVED_KEY_PREFIXES = ("sweeper.dev/", "batch.kubernetes.io/")
_RESERVED_LABELS = ("controller-uid", "job-name", "app.kubernetes.io/name",
                    "app.kubernetes.io/instance", "app.kubernetes.io/component",
                    "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of")
_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_MAX_ANNOTATIONS_BYTES = 256 * 1024
#: A Kubernetes extended resource name: a domain prefix and a name (nvidia.com/gpu).
_RESOURCE_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*"
                          r"[A-Za-z0-9])?$")


def kubernetes(v: Checks, value: Any, path: Path_, *, deep: bool) -> KubernetesSpec:
    if value is None:
        return KubernetesSpec()
    m = v.mapping(value, path, K8S_KEYS)
    kw = _names(v, m, path)
    kw.update(_placement(v, m, path))
    kw.update(_shape(v, m, path))
    for key in ("labels", "annotations"):
        if key in m:
            kw[key] = metadata_map(v, m[key], (*path, key), labels=key == "labels")
    if "volumes" in m:
        kw["volumes"] = volumes(v, m["volumes"], (*path, "volumes"))
    if "checkpoint_volume" in m:
        kw["checkpoint_volume"] = checkpoint_volume(v, m["checkpoint_volume"],
                                                    kw.get("volumes", ()),
                                                    (*path, "checkpoint_volume"))
    for key, model in (("affinity", "V1Affinity"), ("pod_template", "V1PodTemplateSpec")):
        if m.get(key) is not None:
            kw[key] = pass_through(v, m[key], (*path, key), model, deep=deep,
                                   partial=key == "pod_template")
    if "storage_proxy" in m:
        try:
            kw["storage_proxy"] = parse_proxy_address(
                v.string(m["storage_proxy"], (*path, "storage_proxy")))
        except ValueError as e:
            raise v.err((*path, "storage_proxy"), str(e)) from None
    if kw.get("storage_proxy_ca") and not kw.get("storage_proxy"):
        raise v.err((*path, "storage_proxy_ca"), "names the CA of a storage proxy: set "
                    "storage_proxy too")
    return replace(KubernetesSpec(), **kw)


def _names(v: Checks, m: Mapping[str, Any], path: Path_) -> dict[str, Any]:
    """The string settings: image, pull policy and the names of Kubernetes objects."""
    kw: dict[str, Any] = {}
    for key in ("image", "runner_image", "image_pull_policy", "namespace", "storage_secret",
                "storage_secret_key", "service_account", "priority_class", "runtime_class",
                "storage_proxy_ca"):
        if m.get(key) is not None:
            kw[key] = v.string(m[key], (*path, key))
    if "image_pull_policy" in kw:
        v.choice(kw["image_pull_policy"], (*path, "image_pull_policy"),
                 ("Always", "IfNotPresent", "Never"))
    for key in ("namespace", "storage_secret", "service_account"):
        if key in kw and not NAME_RE.match(kw[key]):
            raise v.err((*path, key), f"{kw[key]!r} is not a valid Kubernetes name")
    for key in ("priority_class", "runtime_class"):
        if key in kw and (not _SUBDOMAIN_RE.match(kw[key]) or len(kw[key]) > 253):
            raise v.err((*path, key), f"{clip(kw[key])} is not a valid Kubernetes object name "
                                      "(lowercase letters, digits, '-' and '.')")
    if m.get("gpu_resource") is not None:
        res = v.string(m["gpu_resource"], (*path, "gpu_resource"))
        if not _RESOURCE_RE.match(res) or len(res) > 253:
            raise v.err((*path, "gpu_resource"), f"{clip(res)} is not an extended resource name "
                                                 "like nvidia.com/gpu, nvidia.com/mig-1g.10gb "
                                                 "or amd.com/gpu")
        kw["gpu_resource"] = res
    return kw


def _placement(v: Checks, m: Mapping[str, Any], path: Path_) -> dict[str, Any]:
    """Where and how long: node selector, tolerations, pull secrets, env, deadlines."""
    kw: dict[str, Any] = {}
    if "node_selector" in m:
        ns = v.mapping(m["node_selector"], (*path, "node_selector"))
        kw["node_selector"] = {str(k): v.string(str(x) if isinstance(x, (int, float)) else x,
                                                (*path, "node_selector", k))
                               for k, x in ns.items()}
    if "tolerations" in m:
        tols = m["tolerations"]
        if not isinstance(tols, list):
            raise v.err((*path, "tolerations"), f"expected a list, got {kind_of(tols)}")
        kw["tolerations"] = tuple(toleration(v, t, (*path, "tolerations", i))
                                  for i, t in enumerate(tols))
    if "image_pull_secrets" in m:
        ips = m["image_pull_secrets"]
        if not isinstance(ips, list):
            raise v.err((*path, "image_pull_secrets"), "expected a list of secret names, got "
                                                       f"{kind_of(ips)}")
        kw["image_pull_secrets"] = tuple(v.string(s, (*path, "image_pull_secrets", i))
                                         for i, s in enumerate(ips))
    if "env" in m:
        kw["env"] = env(v, m["env"], (*path, "env"))
    if "indexes_per_pod" in m:
        kw["indexes_per_pod"] = v.integer(m["indexes_per_pod"], (*path, "indexes_per_pod"), 1)
    for key in ("active_deadline", "ttl_after_finished", "termination_grace_period"):
        if m.get(key) is not None:
            kw[key] = v.duration(m[key], (*path, key))
    return kw


def _shape(v: Checks, m: Mapping[str, Any], path: Path_) -> dict[str, Any]:
    """The pod's resources beyond ``trial.resources``: /dev/shm, scratch, the CPU limit."""
    kw: dict[str, Any] = {}
    if m.get("shm_size") is not None:
        kw["shm_size"] = size(v, m["shm_size"], (*path, "shm_size"), zero_ok=True)
    if m.get("scratch_size") is not None:
        kw["scratch_size"] = size(v, m["scratch_size"], (*path, "scratch_size"), zero_ok=False)
    if m.get("cpu_limit") is not None:
        kw["cpu_limit"] = v.boolean(m["cpu_limit"], (*path, "cpu_limit"))
    return kw


def size(v: Checks, value: Any, path: Path_, *, zero_ok: bool) -> str:
    """A storage quantity (512Mi, 1Gi, 10G); ``0`` only where it turns the thing off."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise v.err(path, f"expected a size like 512Mi or 10Gi, got {kind_of(value)}")
    text = str(value)
    if not QUANTITY_RE.match(text) or text.endswith("m"):
        raise v.err(path, f"expected a size like 512Mi or 10Gi, got {text!r}")
    if float(re.sub(r"[A-Za-z]+$", "", text)) == 0:
        if not zero_ok:
            raise v.err(path, f"must be a positive size like 10Gi, got {text!r}")
        return "0"
    return text


def env(v: Checks, value: Any, path: Path_) -> dict[str, str]:
    m = v.mapping(value, path)
    out = {}
    for k, x in m.items():
        if not ENV_NAME_RE.match(k):
            raise v.err((*path, k), f"{k!r} is not a valid env var name")
        if k in RESERVED_ENV:
            raise v.err((*path, k), f"{k} is set by sweeper itself")
        if isinstance(x, (dict, list)) or x is None:
            raise v.err((*path, k), f"expected a string, got {kind_of(x)}")
        out[k] = str(x).lower() if isinstance(x, bool) else str(x)
    return out


def toleration(v: Checks, value: Any, path: Path_) -> dict[str, Any]:
    t = v.plain(v.mapping(value, path, TOLERATION_KEYS), path)
    for key in ("key", "value"):
        if key in t:
            v.string(t[key], (*path, key))
    operator = v.choice(t.get("operator", "Equal"), (*path, "operator"), ("Equal", "Exists"))
    if operator == "Exists" and t.get("value"):
        raise v.err((*path, "value"), "a toleration with operator Exists takes no value")
    if "effect" in t:
        v.choice(t["effect"], (*path, "effect"), ("NoSchedule", "PreferNoSchedule", "NoExecute"))
    if "tolerationSeconds" in t:
        v.integer(t["tolerationSeconds"], (*path, "tolerationSeconds"))
        if t.get("effect") != "NoExecute":
            raise v.err((*path, "tolerationSeconds"), "tolerationSeconds applies to effect "
                                                      "NoExecute only")
    return t


# --------------------------------------------------------------------------- labels


def metadata_map(v: Checks, value: Any, path: Path_, *, labels: bool) -> dict[str, str]:
    """Labels or annotations: Kubernetes key syntax, string values (numbers and booleans
    are written as YAML would print them), none of the keys sweeper sets itself."""
    m = v.mapping(value, path)
    out = {str(key): _metadata_entry(v, key, raw, (*path, key), labels=labels)
           for key, raw in m.items()}
    if not labels and sum(len(k) + len(x) for k, x in out.items()) > _MAX_ANNOTATIONS_BYTES:
        raise v.err(path, "annotations may hold at most 256 KiB in total")
    return out


def _metadata_entry(v: Checks, key: Any, raw: Any, p: Path_, *, labels: bool) -> str:
    """One label's or annotation's value as a string, its key checked."""
    if problem := _key_problem(str(key)):
        raise v.err(p, f"{clip(key)} is not a valid {'label' if labels else 'annotation'} "
                       f"key: {problem}")
    if str(key).startswith(_RESERVED_KEY_PREFIXES) or (labels and key in _RESERVED_LABELS):
        raise v.err(p, f"{key} is set by sweeper (or the Job controller) itself")
    if isinstance(raw, (dict, list)) or raw is None:
        raise v.err(p, f"expected a string, got {kind_of(raw)}")
    text = str(raw).lower() if isinstance(raw, bool) else str(raw)
    if labels and (len(text) > 63 or (text and not _LABEL_NAME_RE.match(text))):
        raise v.err(p, f"label value {clip(text)} must be at most 63 characters: letters, "
                       "digits, '-', '_' and '.', starting and ending with a letter or digit")
    return text


def _key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix)):
        return "the prefix before '/' must be a DNS subdomain like example.com"
    if not name or len(name) > 63 or not _LABEL_NAME_RE.match(name):
        return ("the name must be 1-63 letters, digits, '-', '_' and '.', starting and "
                "ending with a letter or digit")
    return None


# --------------------------------------------------------------------------- volumes


def volumes(v: Checks, value: Any, path: Path_) -> tuple[Volume, ...]:
    if not isinstance(value, list):
        raise v.err(path, f"expected a list of volumes, got {kind_of(value)}")
    out: list[Volume] = []
    for i, item in enumerate(value):
        vol = volume(v, item, (*path, i))
        for other in out:
            if other.name == vol.name:
                raise v.err((*path, i, "name"), f"volume name {vol.name!r} is used twice")
            if other.mount_path == vol.mount_path:
                raise v.err((*path, i, "mount_path"), f"{vol.mount_path} is already the mount "
                                                      f"path of volume {other.name!r}")
        out.append(vol)
    return tuple(out)


def volume(v: Checks, value: Any, path: Path_) -> Volume:
    m = v.mapping(value, path, VOLUME_KEYS)
    name = v.string(v.require(m, "name", path), (*path, "name"))
    if not NAME_RE.match(name) or len(name) > 63:
        raise v.err((*path, "name"), f"{clip(name)} is not a valid volume name (lowercase "
                                     "letters, digits and '-')")
    if name in RESERVED_VOLUMES:
        raise v.err((*path, "name"), f"volume name {name!r} is used by sweeper itself")
    mount = _mount_path(v, v.require(m, "mount_path", path), (*path, "mount_path"))
    read_only = v.boolean(m.get("read_only", False), (*path, "read_only"))
    kinds = [k for k in VOLUME_KINDS if k in m]
    if len(kinds) != 1:
        raise v.err(path, f"a volume needs exactly one of {', '.join(VOLUME_KINDS)}, got "
                          f"{', '.join(kinds) if kinds else 'none'}")
    kind = kinds[0]
    p = (*path, kind)
    if kind == "nfs":
        nfs = v.mapping(m[kind], p, ("server", "path"))
        server = v.string(v.require(nfs, "server", p), (*p, "server"))
        export = v.string(v.require(nfs, "path", p), (*p, "path"))
        if not export.startswith("/"):
            raise v.err((*p, "path"), f"the NFS export path must be absolute, got {export!r}")
        return Volume(name, mount, "nfs", server=server, path=export, read_only=read_only)
    if kind == "empty_dir":
        ed = v.mapping(m[kind] if m[kind] is not None else {}, p, ("size_limit",))
        limit = size(v, ed["size_limit"], (*p, "size_limit"), zero_ok=False) \
            if ed.get("size_limit") is not None else None
        return Volume(name, mount, "empty_dir", size_limit=limit, read_only=read_only)
    source = v.string(m[kind], p)
    if not _SUBDOMAIN_RE.match(source) or len(source) > 253:
        raise v.err(p, f"{clip(source)} is not a valid Kubernetes name")
    return Volume(name, mount, kind, source=source,  # type: ignore[arg-type]
                  read_only=read_only)


def _mount_path(v: Checks, value: Any, path: Path_) -> str:
    mount = v.string(value, path)
    clean = posixpath.normpath(mount)
    if not mount.startswith("/") or clean == "/" or ":" in mount:
        raise v.err(path, f"expected an absolute path like /data, got {mount!r}")
    for reserved in RESERVED_MOUNTS:
        if clean == reserved or clean.startswith(reserved + "/") or \
                reserved.startswith(clean + "/"):
            raise v.err(path, f"{clean} overlaps {reserved}, which sweeper mounts itself")
    return clean


def checkpoint_volume(v: Checks, value: Any, vols: tuple[Volume, ...], path: Path_) -> str:
    name = v.string(value, path)
    vol = next((x for x in vols if x.name == name), None)
    if vol is None:
        known = ", ".join(x.name for x in vols) or "none"
        raise v.err(path, f"names no volume of kubernetes.volumes (known: {known})")
    if vol.read_only or vol.kind not in ("pvc", "nfs"):
        raise v.err(path, f"volume {name!r} cannot hold checkpoints: use a writable pvc or nfs "
                          "volume (one that outlives the pod)")
    return name


# --------------------------------------------------------------------------- pass-through


def pass_through(v: Checks, value: Any, path: Path_, model: str, *, deep: bool,
                 partial: bool) -> dict[str, Any]:
    """A Kubernetes object written as in a manifest (camelCase keys), kept as it is."""
    obj = v.plain(v.mapping(value, path), path)
    if deep:
        from sweeper.spec.k8s_types import check

        problem = check(obj, model, partial=partial)
        if problem is not None:
            where, message = problem
            raise v.err((*path, *where), message)
    return obj
