"""A JobSet checked strictly against JobSet v0.12.0's CRD schema (tests/support/k8s_schema.py,
vendored in tests/support/schemas/): no cluster and no Go build needed; the vendored copy is
compared with the CRD that build.sh copies from the Go module, where that is built."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.control_plane import default_layout
from tests.support.k8s_schema import CRD_SCHEMAS, SCHEMAS, validate_k8s_objects, vendored_crd_schema

Obj = dict[str, Any]


def valid_jobset() -> Obj:
    """What sweeper's multi-node trials look like: one replicatedJob of Indexed Jobs, a
    failure policy, env from the downward API."""
    container = {
        "name": "trial", "image": "sweeper:local", "command": ["python", "-m", "trial_runner"],
        "env": [{"name": "SWEEPER_SLOT", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.annotations['jobset.sigs.k8s.io/job-index']"}}},
                {"name": "MASTER_ADDR", "value": "js-trial-$(SWEEPER_SLOT)-0.js"}],
        "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": 1}}}
    pod = {"restartPolicy": "Never", "containers": [container]}
    job = {"completions": 2, "parallelism": 2, "backoffLimit": 0, "completionMode": "Indexed",
           "template": {"spec": pod}}
    replicated = {"name": "trial", "replicas": 3, "template": {
        "metadata": {"labels": {"sweeper.dev/sweep": "s"}}, "spec": job}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "sweeper", "labels": {"app": "sweeper"}},
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": 2, "rules": [
                {"name": "restartTheFailedJob", "action": "RestartJob"}]},
            "successPolicy": {"operator": "All"},
            "replicatedJobs": [replicated],
        },
    }


def test_a_valid_jobset_passes() -> None:
    assert validate_k8s_objects([valid_jobset()]) == []


@pytest.mark.parametrize(("path", "field", "value"), [
    (("spec",), "replicatedJob", []),  # a misspelt top-level field
    (("spec", "replicatedJobs", 0), "replica", 2),
    (("spec", "replicatedJobs", 0, "template", "spec", "template", "spec", "containers", 0),
     "enviroment", []),  # deep in the embedded pod spec
    (("spec", "replicatedJobs", 0, "template", "metadata"), "generateName", "x-"),
    (("metadata",), "label", {}),  # ObjectMeta, from the Kubernetes schemas
])
def test_an_unknown_field_fails(path: tuple[str | int, ...], field: str, value: Any) -> None:
    js = copy.deepcopy(valid_jobset())
    node: Any = js
    for key in path:
        node = node[key]
    node[field] = value
    errors = validate_k8s_objects([js])
    assert len(errors) == 1, errors
    assert f"'{field}' was unexpected" in errors[0]
    assert errors[0].startswith("[0] JobSet/js: ")


def test_wrong_types_and_enums_fail() -> None:
    js = valid_jobset()
    js["spec"]["failurePolicy"]["rules"][0]["action"] = "Retry"
    js["spec"]["replicatedJobs"][0]["replicas"] = "3"
    errors = validate_k8s_objects([js])
    assert [e.split(": ", 2)[1] for e in errors] == [
        "spec.failurePolicy.rules.0.action", "spec.replicatedJobs.0.replicas"], errors


def test_the_vendored_schema_is_jobset_v0_12_0s_crd() -> None:
    """The copy in tests/support/schemas/ against the CRD build.sh copied from the module."""
    crd_file = default_layout().bin / "jobset-crds" / "jobset.x-k8s.io_jobsets.yaml"
    if not crd_file.exists():
        msg = f"{crd_file} is not built (tools/cluster/build.sh, make cluster-build)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    crd = yaml.load(crd_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    vendored = json.loads(
        (SCHEMAS / CRD_SCHEMAS["jobset.x-k8s.io/v1alpha2", "JobSet"]).read_text())
    assert vendored.pop("source").startswith("sigs.k8s.io/jobset@v0.12.0 ")
    assert vendored == vendored_crd_schema(crd), (
        "regenerate: python -m tests.support.k8s_schema "
        f"{crd_file} 'sigs.k8s.io/jobset@VERSION config/components/crd/bases/...'")
    assert Path(SCHEMAS).is_dir()
