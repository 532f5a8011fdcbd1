"""The JobSet a multi-node sweep renders (sweeper.backends.jobset): valid against JobSet
v0.12.0's CRD schema (strict), and carrying what the gangs depend on. Pure: no cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sweeper import gang, protocol
from sweeper.backends import jobset as js
from sweeper.cli import cli
from sweeper.spec import load_spec, parse_spec
from tests.support.k8s_schema import validate_k8s_objects

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "search_spaces" / "digits_multinode.yaml"


def _docs_example() -> str:
    """The first YAML block of docs/multinode.md: the example a user copies."""
    text = (REPO / "docs" / "multinode.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    return block.group(1)


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    return dict(container)


def test_the_docs_example_and_the_runnable_one_render_schema_valid_jobsets() -> None:
    for spec in (parse_spec(_docs_example()), load_spec(EXAMPLE)):
        objects = js.render(spec)
        assert validate_k8s_objects(objects) == []
        assert [o["kind"] for o in objects] == ["ConfigMap", "JobSet"]


def test_a_gang_per_slot_of_n_pods_with_the_gang_environment() -> None:
    spec = parse_spec(_docs_example())
    obj = js.render_jobset(spec)
    [rjob] = obj["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 3  # parallelism gangs
    job = rjob["template"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 2, 2)
    assert job["backoffLimit"] == 40 * 3  # trials x (retries + 1): every attempt may cost a pod
    env = {e["name"]: e for e in _container(obj)["env"]}
    assert "JOB_ID" not in env
    assert env[gang.ENV_NODES]["value"] == "2" and env[gang.ENV_SLOTS]["value"] == "3"
    assert env[gang.ENV_SLOT]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['jobset.sigs.k8s.io/job-index']"
    assert env[gang.ENV_NODE_RANK]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    # $(SWEEPER_SLOT) is defined before the variable that uses it (the kubelet expands it).
    names = [e["name"] for e in _container(obj)["env"]]
    assert names.index(gang.ENV_SLOT) < names.index(gang.ENV_RDZV_HOST)
    assert env[gang.ENV_RDZV_HOST]["value"] == "llm-lr-t-$(SWEEPER_SLOT)-0.llm-lr"
    # 16 GPUs for the trial: 8 on each of its 2 pods.
    assert _container(obj)["resources"]["limits"]["nvidia.com/gpu"] == 8
    # Kueue admits the JobSet as one workload: created suspended, with the queue label.
    assert obj["spec"]["suspend"] is True
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"


def test_failures_a_config_error_fails_the_jobset_and_pods_are_replaced() -> None:
    obj = js.render_jobset(load_spec(EXAMPLE))
    assert obj["spec"]["failurePolicy"] == {"maxRestarts": 0, "rules": [
        {"name": "configError", "action": "FailJobSet",
         "onJobFailureReasons": ["PodFailurePolicy"]}]}
    job = obj["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["podReplacementPolicy"] == "Failed"
    rules = job["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["Ignore", "FailJob"]
    assert rules[1]["onExitCodes"]["values"] == [4]


def test_only_the_pods_carry_the_sweep_label_not_the_child_jobs() -> None:
    """`sweeper cancel` must delete the JobSet, never a child Job (JobSet would recreate it)."""
    obj = js.render_jobset(load_spec(EXAMPLE))
    template = obj["spec"]["replicatedJobs"][0]["template"]
    assert "metadata" not in template
    assert template["spec"]["template"]["metadata"]["labels"]["sweeper.dev/sweep"] == \
        "digits-2node"


def test_a_longest_name_keeps_pod_host_names_within_63_characters() -> None:
    name = "a" * 50
    spec = parse_spec(_docs_example().replace("name: llm-lr", f"name: {name}"))
    obj = js.render_jobset(spec, launch=12)
    host = f"{obj['metadata']['name']}-{js.REPLICATED_JOB}-{js.slots(spec) - 1}-1"
    assert len(host) <= 63, host
    assert validate_k8s_objects([obj]) == []


def test_sweeper_render_prints_the_jobset_for_a_multi_node_spec() -> None:
    result = CliRunner().invoke(cli, ["render", str(EXAMPLE), "--image", "reg/x:1"])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert [d["kind"] for d in docs] == ["ConfigMap", "JobSet"]
    assert _container(docs[1])["image"] == "reg/x:1"


@pytest.mark.parametrize("env, problem", [
    ({gang.ENV_NODES: "2", gang.ENV_NODE_RANK: "2"}, "node 2 of 2"),
    ({gang.ENV_NODES: "2", gang.ENV_SLOT: "3", gang.ENV_SLOTS: "3"}, "slot 3 of 3"),
    ({gang.ENV_NODES: "0"}, "SWEEPER_NODES must be >= 1"),
    ({gang.ENV_NODES: "2", gang.ENV_RDZV_TIMEOUT: "soon"}, "seconds"),
])
def test_a_gang_environment_that_contradicts_itself_is_refused(env: dict[str, str],
                                                               problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        gang.gang_from_env(env)


def test_a_gang_environment_round_trips_and_stripes_the_indexes() -> None:
    assert gang.gang_from_env({}) is None  # a single-node trial
    g = gang.Gang(3, node_rank=1, slot=2, slots=4, host="h", base_port=30000, timeout_s=60)
    assert gang.gang_from_env(g.env()) == g
    assert g.indexes(11) == [2, 6, 10]
    assert g.endpoint == "h:30002"  # slot 2's own port: gangs that share a host do not collide
    assert not g.leader and g.for_node(0).leader


def test_every_pod_of_a_gang_fetches_the_code_snapshot() -> None:
    spec = parse_spec(_docs_example())
    obj = js.render_jobset(spec, code="sha256:" + "ab" * 32)
    pod = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in _container(obj)["env"]}
    assert env[protocol.ENV_CODE] == "sha256:" + "ab" * 32
    assert {"name": protocol.CODE_VOLUME, "emptyDir": {}} in pod["volumes"]
    assert validate_k8s_objects([obj]) == []
    without = js.render_jobset(spec)
    assert protocol.ENV_CODE not in {e["name"] for e in _container(without)["env"]}
