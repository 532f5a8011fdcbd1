"""Katib's trial parameters as sweeper's per-trial values, and the trial template's metadata.

Katib replaces ``${trialParameters.NAME}`` everywhere in the trial template (command, env,
labels, ...) with what that trial parameter's ``reference`` names: a search parameter, or the
trial's metadata (``${trialSpec.Name}``, ``Namespace``, ``Kind``, ``APIVersion``,
``Labels[key]``, ``Annotations[key]``). Here each becomes sweeper's own value:

- a search parameter: the ``{name}`` placeholder, filled in per trial;
- ``Name`` (Katib's trial name, ``<experiment>-<suffix>``): ``<sweep>-{index}``, the sweep's
  name and the trial's index, the same for every attempt of that index;
- ``Namespace``: ``kubernetes.namespace`` as imported; ``Kind`` / ``APIVersion``: those of the
  Job sweeper runs (``Job``, ``batch/v1``);
- ``Labels[key]`` / ``Annotations[key]``: that value of the trialSpec's metadata, as Katib does.

A value that differs per trial can only go where sweeper fills placeholders: the command. So an
env variable holding one is set by ``env NAME=VALUE`` in front of the command (``kubernetes.env``
is the same for every trial of a pod); a label or annotation holding one is not carried (one Job
and one pod template serve every trial). Labels and annotations of the trial's Job and of its
pod template go to ``kubernetes.labels`` / ``kubernetes.annotations``. What is not carried is a
note, never dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sweeper.errors import SpecError
from sweeper.importers._common import Importer, escape_braces
from sweeper.protocol import RESERVED_ENV
from sweeper.spec.checks import ENV_NAME_RE, Checks
from sweeper.spec.k8s_section import metadata_map

PLACEHOLDER_RE = re.compile(r"\$\{trialParameters\.([A-Za-z0-9_.-]+)\}")
_META_RE = re.compile(r"^\$\{trialSpec\.([A-Za-z]+)(?:\[(.+)\])?\}$")
#: What Kind and APIVersion name in sweeper: the Indexed Job its trials run in.
_SWEEPER_KIND = ("Job", "batch/v1")
#: Container and pod fields the importer maps (or sweeper sets itself: restartPolicy).
_CONTAINER_KEYS = {"name", "image", "command", "args", "env", "resources"}
_POD_KEYS = {"containers", "restartPolicy"}


@dataclass(frozen=True)
class Value:
    """What a trial parameter becomes: ``template`` for the command (``{placeholders}``,
    literal braces escaped); ``literal`` the same text where no placeholder is filled in,
    None when it differs per trial."""

    template: str
    literal: str | None


def trial_values(im: Importer, tt: dict[str, Any], refs: dict[str, str], sweep: str,
                 namespace: str) -> dict[str, Value]:
    """Each trial parameter of the template by name, as sweeper's value for it; one that
    cannot be mapped is a note (and stays as text where it is used)."""
    spec = _mapping(tt, "trialSpec")
    out: dict[str, Value] = {}
    for tp in tt.get("trialParameters") or []:
        if not isinstance(tp, dict) or not tp.get("name"):
            continue
        name, ref = str(tp["name"]), str(tp.get("reference", ""))
        if ref in refs:
            out[name] = Value("{" + refs[ref] + "}", None)
        elif (m := _META_RE.match(ref)) is not None:
            value = _metadata(im, name, m.group(1), m.group(2), spec, sweep, namespace)
            if value is not None:
                out[name] = value
        else:
            im.note(f"trialTemplate.trialParameters.{name}", f"reference {ref!r} names no "
                    "parameter and no trial metadata: ${trialParameters." + name + "} is left "
                    "as text")
    return out


def _metadata(im: Importer, name: str, key: str, index: str | None, spec: dict[str, Any],
              sweep: str, namespace: str) -> Value | None:
    where, ref = f"trialTemplate.trialParameters.{name}", f"${{trialSpec.{key}}}"
    if key == "Name" and index is None:
        im.note(where, f"{ref} (Katib's trial name) -> {sweep}-{{index}}: the sweep's name and "
                       "the trial's index, the same for each attempt of an index (not the name "
                       "of a Kubernetes object)")
        return Value(escape_braces(sweep) + "-{index}", None)
    if key == "Namespace" and index is None:
        im.note(where, f"{ref} -> {namespace}, kubernetes.namespace as imported")
        return _static(namespace)
    if key in ("Kind", "APIVersion") and index is None:
        ours = _SWEEPER_KIND[key == "APIVersion"]
        theirs = str(spec.get("kind" if key == "Kind" else "apiVersion"))
        if theirs != ours:
            im.note(where, f"{ref} -> {ours}, what sweeper runs each trial in (Katib's trial "
                           f"was a {theirs})")
        return _static(ours)
    if key in ("Labels", "Annotations") and index is not None:
        values = _mapping(_mapping(spec, "metadata"), key.lower())
        if index in values:
            return _static(str(values[index]))
        im.note(where, f"${{trialSpec.{key}[{index}]}}: the trialSpec's metadata has no such "
                       f"{key[:-1].lower()} (Katib refuses it): left as text")
        return None
    im.note(where, f"{ref}{f'[{index}]' if index else ''} is not trial metadata Katib knows "
                   "(Name, Namespace, Kind, APIVersion, Labels[key], Annotations[key]): left "
                   "as text")
    return None


def _mapping(node: dict[str, Any], key: str) -> dict[str, Any]:
    """``node[key]`` when it is a mapping, else an empty one (the template is not checked)."""
    value = node.get(key)
    return value if isinstance(value, dict) else {}


def _static(text: str) -> Value:
    return Value(escape_braces(text), text)


def substitute(im: Importer, text: str, values: dict[str, Value]) -> Value:
    """``text`` with its ``${trialParameters.x}`` replaced by their values."""
    template, literal, last = [], [], 0
    per_trial = False
    for m in PLACEHOLDER_RE.finditer(text):
        template.append(escape_braces(text[last:m.start()]))
        literal.append(text[last:m.start()])
        value = values.get(m.group(1))
        if value is None:
            im.note("trialTemplate", f"${{trialParameters.{m.group(1)}}} names no trial "
                                     "parameter that maps: left as text")
            value = _static(m.group(0))
        template.append(value.template)
        literal.append(value.literal or "")
        per_trial = per_trial or value.literal is None
        last = m.end()
    template.append(escape_braces(text[last:]))
    literal.append(text[last:])
    return Value("".join(template), None if per_trial else "".join(literal))


def container_env(im: Importer, container: dict[str, Any],
                  values: dict[str, Value]) -> tuple[dict[str, str], list[str]]:
    """(``kubernetes.env``: variables the same for every trial, ``NAME=VALUE`` arguments for
    ``env`` in front of the command: those whose value differs per trial)."""
    static: dict[str, str] = {}
    per_trial: list[str] = []
    for e in container.get("env") or []:
        if not isinstance(e, dict) or "name" not in e or "value" not in e:
            continue
        name = str(e["name"])
        if not ENV_NAME_RE.match(name):
            im.note(f"trialTemplate env {name}", "not a valid variable name: not carried")
            continue
        value = substitute(im, str(e["value"]), values)
        if value.literal is not None and name in RESERVED_ENV:
            im.note(f"trialTemplate env {name}", "set by sweeper itself: not carried")
        elif value.literal is not None:
            static[name] = value.literal
        else:
            per_trial.append(f"{name}={value.template}")
    if per_trial:
        names = [a.split("=", 1)[0] for a in per_trial]
        what = f"the value of {names[0]} differs" if len(names) == 1 else \
            f"the values of {', '.join(names)} differ"
        im.note("trialTemplate env", f"{what} per trial: the command starts with `env "
                                     "NAME=VALUE ...`, which sets them for each trial "
                                     "(kubernetes.env is the same for every trial of a pod)")
    return static, per_trial


def labels_and_annotations(im: Importer, spec: dict[str, Any], pod: dict[str, Any],
                           values: dict[str, Value]) -> dict[str, dict[str, str]]:
    """The labels and annotations of the trial's Job (trialSpec.metadata) and of its pod
    template, for ``kubernetes.labels`` / ``kubernetes.annotations`` (sweeper puts both on the
    Job and on each pod); each that cannot be carried is a note."""
    out: dict[str, dict[str, str]] = {}
    for key in ("labels", "annotations"):
        merged: dict[str, str] = {}
        for where, meta in (("trialSpec.metadata", spec.get("metadata")),
                            ("pod template metadata", pod.get("metadata"))):
            items = meta.get(key) if isinstance(meta, dict) else None
            for k, raw in (items.items() if isinstance(items, dict) else ()):
                value = _carried(im, f"{where}.{key}.{k}", str(k), raw, key, values)
                if value is not None:
                    merged[str(k)] = value
        if merged:
            out[key] = merged
    return out


def _carried(im: Importer, where: str, key: str, raw: Any, kind: str,
             values: dict[str, Value]) -> str | None:
    if isinstance(raw, (dict, list)) or raw is None:
        im.note(where, f"expected a string, got {type(raw).__name__}: not carried")
        return None
    value = substitute(im, str(raw).lower() if isinstance(raw, bool) else str(raw), values)
    if value.literal is None:
        im.note(where, "differs per trial: not carried (one Job and one pod template serve "
                       "every trial)")
        return None
    try:
        metadata_map(Checks(im.doc), {key: value.literal}, (), labels=kind == "labels")
    except SpecError as e:
        im.note(where, f"{e.message}: not carried")
        return None
    return value.literal


def leftovers(im: Importer, spec: dict[str, Any], pod: dict[str, Any],
              container: dict[str, Any]) -> None:
    """One note for the fields of the trial template the import does not carry."""
    dropped = [f"container {k}" for k in container if k not in _CONTAINER_KEYS]
    dropped += [f"pod {k}" for k in _mapping(pod, "spec") if k not in _POD_KEYS]
    if spec.get("kind") == "Job":
        dropped += [f"Job {k}" for k in _mapping(spec, "spec") if k != "template"]
    if dropped:
        im.note("trialTemplate.trialSpec", f"not carried: {', '.join(dropped)} (set what the "
                "trials need under kubernetes:, e.g. volumes, or kubernetes.pod_template)")
