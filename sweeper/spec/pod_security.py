"""What a namespace that enforces Pod Security ``restricted`` (sweeper's own, manifests/) will
refuse in a valid spec: an inline ``nfs`` volume. The admission check runs when the Job
controller creates a pod, so nothing fails at submit time; the pod is just never created
(``FailedCreate`` on the Job). A warning, not an error: other namespaces may allow it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import SpecError
from sweeper.spec.model import KubernetesSpec, SweepSpec
from sweeper.spec.overrides import parse_overrides
from sweeper.spec.yamldoc import Doc, Path_, load_yaml, read_text

INLINE_NFS = ("an inline nfs volume: Pod Security \"restricted\" (enforced in sweeper's "
              "namespace) refuses it and the pod is never created; use a pvc volume whose "
              "PersistentVolumeClaim is bound to an NFS PersistentVolume (docs/kubernetes.md)")


def pod_security_warnings(spec: SweepSpec, overrides: Sequence[str] = ()) -> list[str]:
    """One ``file:line: field: message`` line per inline nfs volume of the spec (its
    ``kubernetes.volumes`` and its ``pod_template``'s); ``overrides``: the ``--set``s it was
    loaded with, so a volume they wrote is named as theirs."""
    paths = inline_nfs_paths(spec.kubernetes)
    if not paths:
        return []
    doc = _lines(spec.source, overrides)
    return [doc.error(p, INLINE_NFS).render() for p in paths]


def inline_nfs_paths(kube: KubernetesSpec) -> list[Path_]:
    out: list[Path_] = [("kubernetes", "volumes", i, "nfs")
                        for i, v in enumerate(kube.volumes) if v.kind == "nfs"]
    template: Any = kube.pod_template or {}
    pod = template.get("spec") if isinstance(template, Mapping) else None
    vols = pod.get("volumes") if isinstance(pod, Mapping) else None
    for i, v in enumerate(vols if isinstance(vols, (list, tuple)) else []):
        if isinstance(v, Mapping) and v.get("nfs") is not None:
            out.append(("kubernetes", "pod_template", "spec", "volumes", i, "nfs"))
    return out


def _lines(source: str | None, overrides: Sequence[str]) -> Doc:
    """The spec file's key lines (read again: the validated spec keeps none); none when the
    spec did not come from a readable file."""
    if not source:
        return Doc("<spec>", {})
    try:
        doc = load_yaml(read_text(Path(source)), source)[1]
        doc.overridden.update(o.path for o in parse_overrides(overrides, source))
    except SpecError:
        return Doc(source, {})
    return doc
