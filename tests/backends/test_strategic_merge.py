"""The strategic merge of ``kubernetes.pod_template``: Kubernetes' rules for the lists of a pod
template that have merge keys, tolerations appended, every other list replaced. Pure."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sweeper.backends.strategic_merge import MergeError, merge

BASE = {
    "metadata": {"labels": {"a": "1", "b": "2"}},
    "spec": {
        "containers": [{"name": "trial", "image": "t:1", "args": ["x"],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                        "ports": [{"containerPort": 80, "name": "http"}]}],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    },
}


def test_maps_merge_and_null_deletes() -> None:
    out = merge(BASE, {"metadata": {"labels": {"b": None, "c": "3"}}})
    assert out["metadata"]["labels"] == {"a": "1", "c": "3"}


def test_lists_with_merge_keys_merge_by_key_and_keep_order() -> None:
    out = merge(BASE, {"spec": {"containers": [
        {"name": "trial", "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
         "volumeMounts": [{"mountPath": "/scratch", "readOnly": True},
                          {"name": "data", "mountPath": "/data"}],
         "ports": [{"containerPort": 80, "protocol": "TCP"}]},
        {"name": "side", "image": "s:1"}]}})
    trial, side = out["spec"]["containers"]
    assert trial["image"] == "t:1" and trial["args"] == ["x"]
    assert trial["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "two"},
                            {"name": "C", "value": "3"}]
    # volumeMounts merge by mountPath, as the API server's strategic merge does
    assert trial["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch",
                                      "readOnly": True}, {"name": "data", "mountPath": "/data"}]
    assert trial["ports"] == [{"containerPort": 80, "name": "http", "protocol": "TCP"}]
    assert side == {"name": "side", "image": "s:1"}


def test_tolerations_append_other_lists_replace() -> None:
    out = merge(BASE, {"spec": {"tolerations": [{"key": "spot", "operator": "Exists"}],
                                "containers": [{"name": "trial", "args": ["y", "z"]}]}})
    assert [t["key"] for t in out["spec"]["tolerations"]] == ["gpu", "spot"]
    assert out["spec"]["containers"][0]["args"] == ["y", "z"]


def test_patch_directives() -> None:
    out = merge(BASE, {"spec": {
        "volumes": [{"name": "scratch", "$patch": "delete"}, {"name": "new", "emptyDir": {}}],
        "containers": [{"name": "trial", "env": [{"$patch": "replace"}, {"name": "Z"}]}],
        "securityContext": {"$patch": "replace", "runAsUser": 5}}})
    assert out["spec"]["volumes"] == [{"name": "new", "emptyDir": {}}]
    assert out["spec"]["containers"][0]["env"] == [{"name": "Z"}]
    assert out["spec"]["securityContext"] == {"runAsUser": 5}
    gone = merge(BASE, {"metadata": {"labels": {"$patch": "delete"}}})
    assert "labels" not in gone["metadata"]


def test_inputs_are_not_changed() -> None:
    base, patch = copy.deepcopy(BASE), {"spec": {"containers": [{"name": "trial", "env": [
        {"name": "A", "value": "x"}]}]}}
    before = copy.deepcopy(patch)
    merge(base, patch)
    assert base == BASE and patch == before


@pytest.mark.parametrize(("patch", "path"), [
    ({"spec": {"containers": [{"image": "x"}]}}, ("spec", "containers", 0)),
    ({"spec": {"volumes": ["scratch"]}}, ("spec", "volumes", 0)),
    ({"spec": {"$retainKeys": ["a"]}}, ("spec", "$retainKeys")),
    ({"spec": {"$patch": "retain"}}, ("spec", "$patch")),
])
def test_unmergeable_patches_name_their_place(patch: dict[str, Any],
                                              path: tuple[str | int, ...]) -> None:
    with pytest.raises(MergeError) as e:
        merge(BASE, patch)
    assert e.value.path == path
