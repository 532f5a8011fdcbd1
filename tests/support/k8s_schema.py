"""Validate Kubernetes objects against the official OpenAPI schemas, in process.

No cluster can run where the tests run, so every object sweeper ships
(manifests/) or renders (the Indexed Job from sweeper.backends.manifests) is
checked against the JSON schemas that `kubernetes-validate` packages, in strict
mode: an unknown or misspelt field is an error, as it is for `kubectl apply
--validate=strict`. This is what `kubernetes-validate --strict -k 1.33.0 FILE`
does, without one subprocess per object, and reporting every error of an
object instead of the first one.

Usage in a test::

    from tests.support.k8s_schema import validate_k8s_objects

    assert validate_k8s_objects([job]) == []

Custom resources (a JobSet) are checked against their CRD's ``openAPIV3Schema``, vendored in
tests/support/schemas/ (descriptions stripped; ``python -m tests.support.k8s_schema CRD.yaml``
writes it) so that no Go build is needed, made strict the way the apiserver's pruning is: an
object with ``properties`` takes no other field (unless ``x-kubernetes-preserve-unknown-fields``)
and the top-level ``metadata`` is an ObjectMeta. Not checked: the CRD's CEL rules
(``x-kubernetes-validations``) and what the custom resource's own webhooks reject.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import referencing
from kubernetes_validate import utils as kv_utils

#: The Kubernetes version sweeper targets; its schemas must ship with the installed
#: kubernetes-validate (1.37.0 ships 1.25 .. 1.37).
K8S_VERSION = "1.33.0"

_SCHEMA_ROOT = "kubernetes-json-schema"
_OBJECT_META = "https://kubernetes.io/api/_definitions.json#/$defs/" \
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
#: Custom resources and their vendored CRD schemas: (apiVersion, kind) -> file in SCHEMAS.
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CRD_SCHEMAS = {("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_v1alpha2_jobset.json"}


def validate_k8s_objects(objects: Iterable[Any], version: str = K8S_VERSION) -> list[str]:
    """Return one line per schema violation in ``objects`` (empty when all are valid).

    ``objects`` are plain dicts as they would be written to YAML (camelCase keys);
    a kubernetes client model must go through
    ``ApiClient().sanitize_for_serialization`` first. A kind the schemas do not
    know counts as an error (the CLI only warns), so a typo in ``kind`` or
    ``apiVersion`` cannot pass unnoticed.
    """
    errors: list[str] = []
    for position, obj in enumerate(objects):
        label = _label(position, obj)
        if not isinstance(obj, Mapping):
            errors.append(f"{label}: not a mapping but {type(obj).__name__}")
            continue
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            errors.append(f"{label}: apiVersion and kind must both be strings")
            continue
        try:
            validator = _validator(version, api_version, kind)
        except LookupError as e:
            errors.append(f"{label}: {e}")
            continue
        for error in sorted(validator.iter_errors(_plain(obj)), key=_error_sort_key):
            path = ".".join(str(part) for part in error.absolute_path) or "<root>"
            errors.append(f"{label}: {path}: {error.message}")
    return errors


def _label(position: int, obj: Any) -> str:
    if isinstance(obj, Mapping):
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        return f"[{position}] {obj.get('kind', '?')}/{name or '?'}"
    return f"[{position}]"


def _plain(obj: Mapping[str, Any]) -> Any:
    """Deep copy to JSON types, so tuples and other mappings validate like YAML would."""
    return json.loads(json.dumps(obj, default=_reject))


def _reject(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not representable in YAML/JSON: {value!r}")


def _error_sort_key(error: jsonschema.ValidationError) -> tuple[str, str]:
    return (".".join(str(part) for part in error.absolute_path), error.message)


def _schema_dir(version: str) -> str:
    version = version.removeprefix("v")
    if version not in kv_utils.all_versions():
        raise LookupError(
            f"kubernetes-validate ships no schemas for Kubernetes {version}; "
            f"it has {sorted(set(kv_utils.all_versions()))}"
        )
    return f"{_SCHEMA_ROOT}/v{version}-local-strict"


@cache
def _definitions(version: str) -> referencing.Resource[Any]:
    contents = kv_utils.schema_contents(f"{_schema_dir(version)}/_definitions.json", version)
    return referencing.Resource.from_contents(contents)


@cache
def _validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """Build (once per kind) the validator kubernetes_validate.utils.validate builds per call."""
    if (api_version, kind) in CRD_SCHEMAS:
        return _crd_validator(version, api_version, kind)
    # Same file naming as kubernetes-validate: rbac.authorization.k8s.io/v1 -> rbac-v1.
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    filename = f"{_schema_dir(version)}/{kind.lower()}-{group_version}.json"
    try:
        schema = kv_utils.schema_contents(filename, version)
    except FileNotFoundError:
        raise LookupError(
            f"no schema for kind {kind} in {api_version} (Kubernetes {version})"
        ) from None
    registry: referencing.Registry[Any] = (
        referencing.Resource.from_contents(schema) @ referencing.Registry()
    )
    registry = _definitions(version) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


# --------------------------------------------------------------------------- custom resources

def _crd_validator(version: str, api_version: str, kind: str) -> jsonschema.protocols.Validator:
    vendored = json.loads((SCHEMAS / CRD_SCHEMAS[api_version, kind]).read_text())
    schema = strict_schema(vendored["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"$ref": _OBJECT_META}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    registry: referencing.Registry[Any] = _definitions(version) @ referencing.Registry()
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def strict_schema(openapi: Any) -> Any:
    """A CRD's structural OpenAPI v3 schema as a strict JSON schema: no field beside an
    object's ``properties`` (what the apiserver would prune), ``nullable`` as a null type."""
    if isinstance(openapi, list):
        return [strict_schema(s) for s in openapi]
    if not isinstance(openapi, dict):
        return openapi
    out = {k: strict_schema(v) if k in _SUBSCHEMAS else v for k, v in openapi.items()}
    if "properties" in out:
        out["properties"] = {k: strict_schema(v) for k, v in out["properties"].items()}
        if not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


_SUBSCHEMAS = frozenset({"items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"})


def vendored_crd_schema(crd: Mapping[str, Any]) -> dict[str, Any]:
    """What tests/support/schemas/ keeps of a CRD: each served version's openAPIV3Schema,
    without descriptions (the first version; JobSet's CRD has one)."""
    version = crd["spec"]["versions"][0]
    group = crd["spec"]["group"]

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k != "description"}
        return [strip(v) for v in x] if isinstance(x, list) else x
    return {"apiVersion": f"{group}/{version['name']}", "kind": crd["spec"]["names"]["kind"],
            "openAPIV3Schema": strip(version["schema"]["openAPIV3Schema"])}


def main(argv: list[str]) -> int:
    """``python -m tests.support.k8s_schema CRD.yaml [SOURCE]``: vendor the CRD's schema."""
    import yaml

    crd = yaml.safe_load(Path(argv[0]).read_text())
    vendored = {"source": argv[1] if len(argv) > 1 else argv[0], **vendored_crd_schema(crd)}
    name = CRD_SCHEMAS[vendored["apiVersion"], vendored["kind"]]
    (SCHEMAS / name).write_text(json.dumps(vendored, sort_keys=True, separators=(",", ":"))
                                + "\n")
    print(f"wrote {SCHEMAS / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
