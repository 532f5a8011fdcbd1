"""Shape checks of pass-through Kubernetes objects against the official client's models."""

from __future__ import annotations

import pytest

from sweeper.spec.k8s_types import check


def test_a_valid_affinity_and_pod_template_pass() -> None:
    assert check({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}]}},
        "V1Affinity") is None
    assert check({"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [
        {"name": "c", "image": "i", "resources": {"limits": {"cpu": 2, "memory": "1Gi"}},
         "ports": [{"containerPort": 80}]}], "volumes": [
        {"name": "v", "emptyDir": {"sizeLimit": 1024}}]}}, "V1PodTemplateSpec") is None


@pytest.mark.parametrize(("value", "model", "partial", "problem"), [
    ({"nodeAffinity": []}, "V1Affinity", False,
     (("nodeAffinity",), "expected a mapping, got a list")),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}, "V1Affinity",
     False, (("podAffinity", "requiredDuringSchedulingIgnoredDuringExecution", 0),
             "missing required field 'topologyKey' of PodAffinityTerm")),
    ({"spec": {"containers": [{"name": "c", "tty": "yes"}]}}, "V1PodTemplateSpec", True,
     (("spec", "containers", 0, "tty"), "expected true or false, got string 'yes'")),
    ({"spec": {"terminationGracePeriodSeconds": 1.5}}, "V1PodTemplateSpec", True,
     (("spec", "terminationGracePeriodSeconds"), "expected an integer, got float 1.5")),
    ({"metadata": {"labels": {"a": 1}}}, "V1PodTemplateSpec", True,
     (("metadata", "labels", "a"), "expected a string, got int 1")),
    ({"spec": {"nodeSelecter": {}}}, "V1PodTemplateSpec", True,
     (("spec", "nodeSelecter"), "unknown field 'nodeSelecter' in PodSpec; did you mean "
                                "'nodeSelector'?")),
    ({"spec": {"hostIPC": None}}, "V1PodTemplateSpec", False,
     (("spec", "hostIPC"), "must not be null")),
])
def test_problems_name_the_field(value: object, model: str, partial: bool,
                                 problem: tuple[tuple[str | int, ...], str]) -> None:
    assert check(value, model, partial=partial) == problem


def test_partial_templates_may_omit_required_fields_and_use_directives() -> None:
    patch = {"spec": {"containers": [{"name": "trial", "env": [{"name": "X", "value": None}]}],
                      "volumes": [{"name": "dshm", "$patch": "delete"}], "hostIPC": None}}
    assert check(patch, "V1PodTemplateSpec", partial=True) is None
    assert check({"spec": {}}, "V1PodTemplateSpec", partial=True) is None
    assert check({"spec": {}}, "V1PodTemplateSpec") == (
        ("spec",), "missing required field 'containers' of PodSpec")
