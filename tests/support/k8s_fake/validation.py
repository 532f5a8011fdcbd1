"""Defaulting and validation of created objects, following the real apiserver's order:
decode + defaults (`SetDefaults_Job`, `SetDefaults_PodSpec`), then the strategy's
PrepareForCreate (generated selector and labels), then validation. Only the checks an
orchestrator can plausibly trip are implemented, with the real field paths and messages.
"""

from __future__ import annotations

import re
from typing import Any

from .store import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_MSG,
    OMIT,
    SUBDOMAIN_MSG,
    FieldError,
    Obj,
    forbidden_field,
    invalid,
    not_supported,
    required,
)

MAX_INT32 = 2**31 - 1
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
INDEX_FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-ignored-failure-count"
CONTROLLER_UID_KEY = "batch.kubernetes.io/controller-uid"
JOB_NAME_KEY = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_KEY = "controller-uid"
LEGACY_JOB_NAME_KEY = "job-name"
_ENV_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


# --------------------------------------------------------------------------- defaults


def _image_pull_policy(image: str) -> str:
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def default_container(c: Obj) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _image_pull_policy(str(c.get("image") or "")))
    c.setdefault("resources", {})
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef")
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


def default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if isinstance(c, dict):
            default_container(c)
    for v in spec.get("volumes") or []:
        if isinstance(v.get("secret"), dict):
            v["secret"].setdefault("defaultMode", 420)
        if isinstance(v.get("configMap"), dict):
            v["configMap"].setdefault("defaultMode", 420)


def default_job(job: Obj) -> None:
    spec = job.setdefault("spec", {})
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    labels = tmeta.get("labels")
    meta = job.setdefault("metadata", {})
    if labels and not meta.get("labels"):
        meta["labels"] = dict(labels)
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = (
            "Failed" if spec.get("podFailurePolicy") is not None else "TerminatingOrFailed"
        )
    pfp = spec.get("podFailurePolicy")
    if isinstance(pfp, dict):
        for rule in pfp.get("rules") or []:
            for cond in (rule or {}).get("onPodConditions") or []:
                if isinstance(cond, dict):
                    cond.setdefault("status", "True")
    tspec = template.setdefault("spec", {})
    if isinstance(tspec, dict):
        default_pod_spec(tspec)


def prepare_job_for_create(job: Obj, uid: str) -> list[FieldError]:
    """Generated selector + template labels (the Job strategy's PrepareForCreate)."""
    spec = job["spec"]
    name = job["metadata"]["name"]
    errors: list[FieldError] = []
    if spec.get("manualSelector"):
        if not spec.get("selector"):
            errors.append(required("spec.selector"))
        return errors
    if spec.get("selector"):
        errors.append(invalid("spec.selector", spec["selector"], "`selector` not auto-generated"))
        return errors
    spec["selector"] = {"matchLabels": {CONTROLLER_UID_KEY: uid}}
    labels = spec["template"]["metadata"].setdefault("labels", {})
    labels[CONTROLLER_UID_KEY] = uid
    labels[JOB_NAME_KEY] = name
    labels[LEGACY_CONTROLLER_UID_KEY] = uid
    labels[LEGACY_JOB_NAME_KEY] = name
    return errors


# --------------------------------------------------------------------------- validation


def validate_name(name: Any, path: str = "metadata.name", label: bool = False) -> list[FieldError]:
    if not name:
        return [required(path, "name or generateName is required")]
    if not isinstance(name, str):
        return [invalid(path, name, "must be a string")]
    if label:
        if len(name) > 63:
            return [invalid(path, name, "must be no more than 63 characters")]
        if not DNS1123_LABEL.match(name):
            return [invalid(path, name, LABEL_MSG)]
        return []
    if len(name) > 253:
        return [invalid(path, name, "must be no more than 253 characters")]
    if not DNS1123_SUBDOMAIN.match(name):
        return [invalid(path, name, SUBDOMAIN_MSG)]
    return []


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _label_value_ok(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= 63 and bool(_LABEL_VALUE.match(v))


def validate_labels(labels: Any, path: str) -> list[FieldError]:
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [invalid(path, labels, "must be a map of string to string")]
    errs = []
    for k, v in labels.items():
        if not _label_value_ok(v):
            errs.append(
                invalid(
                    path, v,
                    "a valid label must be an empty string or consist of alphanumeric characters,"
                    " '-', '_' or '.', and must start and end with an alphanumeric character "
                    "(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                )
            )
        if not isinstance(k, str) or not k:
            errs.append(invalid(path, k, "name part must be non-empty"))
    return errs


def _nonneg(spec: Obj, key: str, path: str) -> list[FieldError]:
    v = spec.get(key)
    if v is None:
        return []
    if not isinstance(v, int) or isinstance(v, bool):
        return [invalid(f"{path}.{key}", v, "must be an integer")]
    if v < 0:
        return [invalid(f"{path}.{key}", v, "must be greater than or equal to 0")]
    return []


def _validate_env(env: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if env is None:
        return errs
    if not isinstance(env, list):
        return [invalid(path, env, "must be a list")]
    for i, e in enumerate(env):
        p = f"{path}[{i}]"
        if not isinstance(e, dict):
            errs.append(invalid(p, e, "must be an object"))
            continue
        name = e.get("name")
        if not name:
            errs.append(required(f"{p}.name"))
        elif not set(str(name)) <= _ENV_NAME_CHARS or str(name)[0].isdigit():
            errs.append(
                invalid(
                    f"{p}.name", name,
                    "a valid environment variable name must consist of alphabetic characters, "
                    "digits, '_', '-', or '.', and must not start with a digit",
                )
            )
        vf = e.get("valueFrom")
        if vf is None:
            continue
        if e.get("value"):
            errs.append(
                invalid(f"{p}.valueFrom", OMIT, "may not be specified when `value` is not empty")
            )
        sources = [k for k in ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")
                   if vf.get(k) is not None]
        if len(sources) != 1:
            errs.append(
                invalid(f"{p}.valueFrom", OMIT,
                        "may not have more than one field specified at a time")
                if sources else required(f"{p}.valueFrom", "must specify one of: `fieldRef`, "
                                         "`resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`")
            )
            continue
        src = sources[0]
        ref = vf[src]
        if src == "fieldRef" and not ref.get("fieldPath"):
            errs.append(required(f"{p}.valueFrom.fieldRef.fieldPath"))
        if src in ("secretKeyRef", "configMapKeyRef"):
            if not ref.get("key"):
                errs.append(required(f"{p}.valueFrom.{src}.key"))
            if not ref.get("name"):
                errs.append(required(f"{p}.valueFrom.{src}.name"))
    return errs


def validate_pod_spec(spec: Any, path: str) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required(path)]
    errs: list[FieldError] = []
    volumes = spec.get("volumes") or []
    vol_names: set[str] = set()
    for i, v in enumerate(volumes):
        n = (v or {}).get("name")
        errs += validate_name(n, f"{path}.volumes[{i}].name", label=True)
        if n in vol_names:
            errs.append(FieldError("FieldValueDuplicate", f"{path}.volumes[{i}].name", value=n))
        vol_names.add(str(n))
    containers = spec.get("containers")
    if not containers:
        errs.append(required(f"{path}.containers"))
        containers = []
    seen: set[str] = set()
    for kind, items in (("initContainers", spec.get("initContainers") or []),
                        ("containers", containers)):
        for i, c in enumerate(items):
            p = f"{path}.{kind}[{i}]"
            if not isinstance(c, dict):
                errs.append(invalid(p, c, "must be an object"))
                continue
            name = c.get("name")
            if not name:
                errs.append(required(f"{p}.name"))
            else:
                errs += validate_name(name, f"{p}.name", label=True)
                if name in seen:
                    errs.append(FieldError("FieldValueDuplicate", f"{p}.name", value=name))
                seen.add(str(name))
            for key in ("command", "args"):
                val = c.get(key)
                if val is not None and (
                    not isinstance(val, list) or not all(isinstance(a, str) for a in val)
                ):
                    errs.append(invalid(f"{p}.{key}", val, "must be a list of strings"))
            errs += _validate_env(c.get("env"), f"{p}.env")
            for j, vm in enumerate(c.get("volumeMounts") or []):
                vp = f"{p}.volumeMounts[{j}]"
                if not vm.get("name"):
                    errs.append(required(f"{vp}.name"))
                elif vm["name"] not in vol_names:
                    errs.append(FieldError("FieldValueNotFound", f"{vp}.name", value=vm["name"]))
                if not vm.get("mountPath"):
                    errs.append(required(f"{vp}.mountPath"))
            res = c.get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            for rname, rval in requests.items():
                if "/" in rname and not rname.startswith(("kubernetes.io/", "hugepages")):
                    if rname not in limits:
                        errs.append(forbidden_field(
                            f"{p}.resources.limits",
                            "Limit must be set for non overcommitable resources",
                        ))
                    elif str(limits[rname]) != str(rval):
                        errs.append(invalid(
                            f"{p}.resources.requests", str(rval),
                            f"must be equal to {rname} limit of {limits[rname]}",
                        ))
    rp = spec.get("restartPolicy")
    if rp not in ("Always", "OnFailure", "Never"):
        errs.append(not_supported(f"{path}.restartPolicy", rp, ("Always", "Never", "OnFailure")))
    return errs


def _validate_pod_failure_policy(spec: Obj, template_spec: Obj) -> list[FieldError]:
    pfp = spec.get("podFailurePolicy")
    if pfp is None:
        return []
    path = "spec.podFailurePolicy"
    errs: list[FieldError] = []
    if template_spec.get("restartPolicy") != "Never":
        errs.append(invalid("spec.template.spec.restartPolicy", template_spec.get("restartPolicy"),
                            'only "Never" is supported when podFailurePolicy is specified'))
    container_names = {
        c.get("name") for c in (template_spec.get("containers") or [])
        + (template_spec.get("initContainers") or []) if isinstance(c, dict)
    }
    actions = ["Count", "FailJob", "Ignore"]
    if spec.get("backoffLimitPerIndex") is not None:
        actions.insert(1, "FailIndex")
    for i, rule in enumerate(pfp.get("rules") or []):
        rp = f"{path}.rules[{i}]"
        if not isinstance(rule, dict):
            errs.append(invalid(rp, rule, "must be an object"))
            continue
        action = rule.get("action")
        if action not in actions:
            errs.append(not_supported(f"{rp}.action", action, tuple(actions)))
        has_codes = rule.get("onExitCodes") is not None
        has_conds = rule.get("onPodConditions") is not None
        if has_codes == has_conds:
            errs.append(invalid(rp, OMIT,
                                "specifying one of OnExitCodes and OnPodConditions is required"))
            continue
        if has_codes:
            oc = rule["onExitCodes"]
            cp = f"{rp}.onExitCodes"
            cname = oc.get("containerName")
            if cname is not None and cname not in container_names:
                errs.append(invalid(f"{cp}.containerName", cname,
                                    "must be one of the container or initContainer names in "
                                    "the pod template"))
            op = oc.get("operator")
            if op not in ("In", "NotIn"):
                errs.append(not_supported(f"{cp}.operator", op, ("In", "NotIn")))
            values = oc.get("values") or []
            if not values:
                errs.append(invalid(f"{cp}.values", values, "at least one value is required"))
            seen: set[int] = set()
            ordered = True
            for j, v in enumerate(values):
                if v == 0 and op == "In":
                    errs.append(invalid(f"{cp}.values[{j}]", v,
                                        "must not be 0 for the In operator"))
                if v in seen:
                    errs.append(FieldError("FieldValueDuplicate", f"{cp}.values[{j}]", value=v))
                seen.add(v)
                if j > 0 and values[j - 1] > v:
                    ordered = False
            if not ordered:
                errs.append(invalid(f"{cp}.values", values, "must be ordered"))
        else:
            for j, cond in enumerate(rule["onPodConditions"] or []):
                pp = f"{rp}.onPodConditions[{j}]"
                if not cond.get("type"):
                    errs.append(required(f"{pp}.type"))
                if cond.get("status") not in ("True", "False", "Unknown"):
                    errs.append(not_supported(f"{pp}.status", cond.get("status"),
                                              ("False", "True", "Unknown")))
    return errs


def validate_job(job: Obj) -> list[FieldError]:
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    errs: list[FieldError] = []
    # The Job name becomes a label value (job-name), so it must be a DNS-1123 label.
    errs += validate_name(meta.get("name"), label=True)
    errs += validate_labels(meta.get("labels"), "metadata.labels")
    for key in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds",
                "ttlSecondsAfterFinished", "backoffLimitPerIndex", "maxFailedIndexes"):
        errs += _nonneg(spec, key, "spec")
    if isinstance(spec.get("activeDeadlineSeconds"), int) and spec["activeDeadlineSeconds"] == 0:
        errs.append(invalid("spec.activeDeadlineSeconds", 0, "must be greater than 0"))
    mode = spec.get("completionMode")
    if mode not in ("NonIndexed", "Indexed"):
        errs.append(not_supported("spec.completionMode", mode, ("NonIndexed", "Indexed")))
    indexed = mode == "Indexed"
    if indexed and spec.get("completions") is None:
        errs.append(required("spec.completions", "when completion mode is Indexed"))
    if spec.get("backoffLimitPerIndex") is not None and not indexed:
        errs.append(forbidden_field("spec.backoffLimitPerIndex",
                                    "requires indexed completion mode"))
    if spec.get("maxFailedIndexes") is not None:
        if spec.get("backoffLimitPerIndex") is None:
            errs.append(required("spec.backoffLimitPerIndex",
                                 "when maxFailedIndexes is specified"))
        comp = spec.get("completions")
        if isinstance(comp, int) and isinstance(spec["maxFailedIndexes"], int) \
                and spec["maxFailedIndexes"] > comp:
            errs.append(invalid("spec.maxFailedIndexes", spec["maxFailedIndexes"],
                                "must be less than or equal to completions"))
    prp = spec.get("podReplacementPolicy")
    if spec.get("podFailurePolicy") is not None and prp != "Failed":
        errs.append(not_supported("spec.podReplacementPolicy", prp, ("Failed",)))
    elif prp not in ("Failed", "TerminatingOrFailed"):
        errs.append(not_supported("spec.podReplacementPolicy", prp,
                                  ("Failed", "TerminatingOrFailed")))
    template = spec.get("template") or {}
    tmeta = template.get("metadata") or {}
    errs += validate_labels(tmeta.get("labels"), "spec.template.metadata.labels")
    tspec = template.get("spec")
    errs += validate_pod_spec(tspec, "spec.template.spec")
    if isinstance(tspec, dict):
        rp = tspec.get("restartPolicy")
        if rp not in ("OnFailure", "Never"):
            errs = [e for e in errs if e.field != "spec.template.spec.restartPolicy"]
            errs.append(not_supported("spec.template.spec.restartPolicy", rp,
                                      ("OnFailure", "Never")))
        errs += _validate_pod_failure_policy(spec, tspec)
    return errs
