"""The Katib Experiment's trial side: the trial template (image, command with
``${trialParameters.x}`` placeholders, env, resources, labels and annotations; the trial
metadata references in ``_katib_meta``) and the metrics collector."""

from __future__ import annotations

import re
from typing import Any

from sweeper.importers._common import Importer
from sweeper.importers._katib_meta import (
    Value,
    container_env,
    labels_and_annotations,
    leftovers,
    substitute,
    trial_values,
)
from sweeper.spec.k8s_model import DEFAULT_IMAGE

_GPU_KEYS = ("nvidia.com/gpu", "amd.com/gpu")


def metrics_collector(im: Importer, s: dict[str, Any]) -> dict[str, Any] | None:
    spec = s.get("metricsCollectorSpec")
    if not isinstance(spec, dict):
        return None
    kind = (spec.get("collector") or {}).get("kind", "StdOut")
    source = spec.get("source") or {}
    formats = ((source.get("filter") or {}).get("metricsFormat")) or []
    out: dict[str, Any] = {}
    if formats:
        fmt = named_groups(str(formats[0]))
        if fmt is None:
            im.note("metricsCollectorSpec.source.filter", f"metricsFormat {formats[0]!r}: "
                    "not two capture groups (name, value); sweeper's default format is used")
        else:
            out["format"] = fmt
        if len(formats) > 1:
            im.note("metricsCollectorSpec.source.filter", "only the first metricsFormat is "
                                                          "used")
    if kind == "File":
        _file_collector(im, source.get("fileSystemPath") or {}, out)
    elif kind != "StdOut":
        im.note("metricsCollectorSpec.collector", f"kind {kind} has no sweeper counterpart: "
                "metrics are read from the program's stdout (name=value lines) instead")
    return out or None


def _file_collector(im: Importer, fs: dict[str, Any], out: dict[str, Any]) -> None:
    """Katib's File collector as ``trial.metrics.file`` (JSON lines, or text lines read with
    the format: Katib's default ``name=value`` one unless a metricsFormat gave one)."""
    out["file"] = str(fs.get("path"))
    if fs.get("format", "TEXT") == "JSON":
        out.pop("format", None)
    elif "format" not in out:
        out["format"] = r"(?P<name>[\w|-]+)\s*=\s*(?P<value>[+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"
    if out["file"].startswith("/"):
        im.note("metricsCollectorSpec", f"the program writes {out['file']}: sweeper's "
                "pods have a read-only root filesystem, so on Kubernetes point the "
                "program (and trial.metrics.file) under /scratch")


def named_groups(katib: str) -> str | None:
    """Katib's metricsFormat (group 1 the name, group 2 the value) with those groups named as
    sweeper's trial.metrics.format wants; None when it does not have two."""
    groups: list[int] = []
    k, in_class = 0, False
    while k < len(katib):
        c = katib[k]
        if c == "\\":
            k += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(" and not katib.startswith("(?", k):
            groups.append(k)
        k += 1
    if len(groups) < 2:
        return None
    first, second = groups[0], groups[1]
    out = katib[:first] + "(?P<name>" + katib[first + 1:second] + "(?P<value>" + \
        katib[second + 1:]
    try:
        regex = re.compile(out)
    except re.error:
        return None
    return out if {"name", "value"} <= set(regex.groupindex) else None


def trial_template(im: Importer, s: dict[str, Any], refs: dict[str, str], *, sweep: str,
                   namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``trial``, ``kubernetes``) from the trial template; ``refs``: Katib parameter name ->
    sweeper's, ``sweep`` and ``namespace``: the imported spec's (per-trial metadata values are
    made of them, see ``_katib_meta``)."""
    tt = _inline_template(im, s)
    values = trial_values(im, tt, refs, sweep, namespace)
    container, pod = _container(im, tt)
    argv = _argv(im, container)
    env, per_trial = container_env(im, container, values)
    trial = _trial_section(im, container, argv, values, per_trial)
    kube = _kubernetes_section(im, tt, container, pod, values, env)
    leftovers(im, tt["trialSpec"], pod, container)
    kube["runner_image"] = DEFAULT_IMAGE
    im.note("kubernetes.runner_image", f"the command runs in {container.get('image')} as it "
            f"is (it needs sh and sleep, not sweeper); sweeper's runner runs beside it from "
            f"{DEFAULT_IMAGE}: make that image pullable by the cluster or name yours")
    _note_unmapped_conditions(im, tt)
    return trial, kube


def _inline_template(im: Importer, s: dict[str, Any]) -> dict[str, Any]:
    """The experiment's ``trialTemplate``, which must hold its ``trialSpec`` inline."""
    tt = s.get("trialTemplate")
    if not isinstance(tt, dict):
        raise im.err(("spec", "trialTemplate"), "a Katib Experiment needs a trialTemplate")
    if "trialSpec" not in tt:
        raise im.err(("spec", "trialTemplate"), "the trial template is not inline (configMap): "
                                                "put it under trialSpec to import it")
    return tt


def _argv(im: Importer, container: dict[str, Any]) -> list[Any]:
    """The trial container's command and arguments, which must not be empty."""
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if not argv:
        raise im.err(("spec", "trialTemplate"), "the trial container has no command: sweeper "
                                                "runs the command, not the image's entrypoint")
    return argv


def _trial_section(im: Importer, container: dict[str, Any], argv: list[Any],
                   values: dict[str, Value], per_trial: list[str]) -> dict[str, Any]:
    """``trial``: the command (per-trial variables set by ``env`` in front), and the
    container's CPU and memory."""
    command = [_argument(im, str(a), values) for a in argv]
    if per_trial:
        command = ["env", *per_trial, *command]
    trial: dict[str, Any] = {"command": command}
    resources = _resources(container.get("resources") or {})
    if resources:
        trial["resources"] = resources
    return trial


def _kubernetes_section(im: Importer, tt: dict[str, Any], container: dict[str, Any],
                        pod: dict[str, Any], values: dict[str, Value],
                        env: dict[str, str]) -> dict[str, Any]:
    """``kubernetes``: the container's image and plain variables, the pod's labels and
    annotations."""
    kube: dict[str, Any] = {"image": container.get("image")}
    if env:
        kube["env"] = env
    kube.update(labels_and_annotations(im, tt["trialSpec"], pod, values))
    if any(isinstance(e, dict) and "valueFrom" in e for e in container.get("env") or []):
        im.note("trialTemplate env", "variables from valueFrom (Secrets, fields) are not "
                                     "mapped: add them to the runner image or kubernetes.env")
    return kube


def _note_unmapped_conditions(im: Importer, tt: dict[str, Any]) -> None:
    for key in ("retain", "successCondition", "failureCondition", "primaryPodLabels"):
        if key in tt:
            im.note(f"trialTemplate.{key}", "not mapped (sweeper reads the exit code and "
                                            "the metrics)")


def _container(im: Importer, tt: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the trial's container: primaryContainerName or the first, the pod template holding
    it: ``metadata`` and ``spec``)."""
    spec = tt["trialSpec"]
    kind = spec.get("kind") if isinstance(spec, dict) else None
    found: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def walk(node: Any, parent: dict[str, Any]) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                found.extend((c, parent) for c in node["containers"] if isinstance(c, dict))
                return
            for value in node.values():
                walk(value, node)
        elif isinstance(node, list):
            for value in node:
                walk(value, {})

    walk(spec, {})
    if not found:
        raise im.err(("spec", "trialTemplate", "trialSpec"), "no container found in trialSpec")
    if kind != "Job":
        im.note("trialTemplate.trialSpec", f"a {kind} runs as one pod per trial here (sweeper "
                "starts no distributed job): its first replica's container is used")
    primary = tt.get("primaryContainerName")
    return next((f for f in found if f[0].get("name") == primary), found[0])


def _argument(im: Importer, arg: str, values: dict[str, Value]) -> str:
    text = substitute(im, arg, values).template
    if "${trialSpec." in arg:
        im.note("trialTemplate", "${trialSpec.*} outside a trial parameter's reference is not "
                                 "replaced by Katib either: passed as written")
    return text


def _resources(res: dict[str, Any]) -> dict[str, Any]:
    limits = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    out: dict[str, Any] = {}
    for key in ("cpu", "memory"):
        if key in limits:
            out[key] = str(limits[key])
    for key in _GPU_KEYS:
        if key in limits and str(limits[key]).isdigit():
            out["gpu"] = int(limits[key])
    return out
