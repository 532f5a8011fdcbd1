"""Kubernetes strategic merge of a partial PodTemplateSpec (``kubernetes.pod_template``) into
the rendered one. Pure: dicts in, a new dict out; neither input is changed.

The rules are the API server's for the fields of a pod template
(``kubectl patch --type strategic``):

- mappings merge key by key; ``key: null`` deletes the key;
- lists of objects with a merge key merge element by element: containers, initContainers,
  ephemeralContainers, volumes, env, imagePullSecrets, resourceClaims and schedulingGates by
  ``name``, volumeMounts by ``mountPath``, volumeDevices by ``devicePath``, ports by
  ``containerPort``, hostAliases by ``ip``, topologySpreadConstraints by ``topologyKey``;
  a patch element with ``$patch: delete`` removes the matching element (in a mapping's
  value, the mapping);
- tolerations are appended (the API server would replace them; appending keeps the GPU
  toleration sweeper adds, which is what a partial template means);
- every other list is replaced;
- ``$patch: replace`` in a mapping replaces the whole mapping; a list holding an element
  ``{$patch: replace}`` replaces the whole list.
"""

from __future__ import annotations

import copy
from typing import Any

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
APPENDED = frozenset({"tolerations"})
PATCH = "$patch"


class MergeError(ValueError):
    """The patch cannot be merged; ``path`` says where (a tuple of keys and list positions)."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in, by the rules above."""
    return _merge_map(copy.deepcopy(base), patch, ())


def _merge_map(base: dict[str, Any], patch: dict[str, Any], path: tuple[str | int, ...]
               ) -> dict[str, Any]:
    directive = patch.get(PATCH)
    if directive == "replace":
        return _clean(patch)
    if directive not in (None, "merge"):
        raise MergeError((*path, PATCH), f"unsupported {PATCH}: {directive!r} (use replace "
                                         "or delete)")
    for key, value in patch.items():
        if key.startswith("$"):
            if key != PATCH:
                raise MergeError((*path, key), f"unsupported strategic-merge directive {key!r}")
            continue
        if value is None or (isinstance(value, dict) and value.get(PATCH) == "delete"):
            base.pop(key, None)
        elif isinstance(value, dict):
            old = base.get(key)
            base[key] = _merge_map(old if isinstance(old, dict) else {}, value, (*path, key))
        elif isinstance(value, list):
            old = base.get(key)
            base[key] = _merge_list(key, old if isinstance(old, list) else [], value,
                                    (*path, key))
        else:
            base[key] = value
    return base


def _merge_list(field: str, base: list[Any], patch: list[Any], path: tuple[str | int, ...]
                ) -> list[Any]:
    if any(isinstance(x, dict) and x.get(PATCH) == "replace" and len(x) == 1 for x in patch):
        return [_clean(x) for x in patch if not (isinstance(x, dict) and set(x) == {PATCH})]
    if field in APPENDED:
        return base + [_clean(x) for x in patch]
    key = MERGE_KEYS.get(field)
    if key is None:
        return [_clean(x) for x in patch]
    out = list(base)
    for i, item in enumerate(patch):
        if not isinstance(item, dict) or item.get(key) is None:
            raise MergeError((*path, i), f"each element of {field} needs its merge key "
                                         f"{key!r}")
        _merge_keyed(out, key, item, (*path, i))
    return out


def _merge_keyed(out: list[Any], key: str, item: dict[str, Any],
                 path: tuple[str | int, ...]) -> None:
    """Merge one patch element into the element of ``out`` with the same ``key`` (appended
    when there is none; removed for ``$patch: delete``)."""
    at = next((j for j, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]),
              None)
    if item.get(PATCH) == "delete":
        if at is not None:
            del out[at]
        return
    if at is None:
        out.append(_merge_map({}, item, path))
    else:
        out[at] = _merge_map(out[at], item, path)


def _clean(value: Any) -> Any:
    """A patch value as it lands in the result: no directives, no null map entries."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_clean(x) for x in value]
    return value
