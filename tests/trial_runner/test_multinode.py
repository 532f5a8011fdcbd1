"""``trial.nodes: 2`` on the local backend (gloo on CPUs): each trial runs on two nodes, here
two process groups of torchrun agents that rendezvous over c10d on this machine. Both nodes'
ranks get the same params and the same prune decisions; the leader alone reports; a node
that dies fails the attempt once, for every rank, and the retry runs both nodes again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from click.testing import Result
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.study.urls import driver_url
from tests.support.ddp_runs import run_ddp, sqlite_url

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, name: str, xs: list[int], **fixed: Any) -> Result:
    return run_ddp(tmp_path, name, xs, {"nproc": 1, "nodes": 2}, **fixed)


def _url(tmp_path: Path) -> str:
    return sqlite_url(tmp_path)


def _seen(tmp_path: Path, index: int, attempt: int) -> list[dict[str, Any]]:
    files = sorted((tmp_path / "markers").glob(f"rank-{index}-{attempt}-*.json"))
    return sorted((json.loads(f.read_text()) for f in files), key=lambda r: r["node"])


def test_two_nodes_one_trial_same_params_one_report(tmp_path: Path) -> None:
    result = _run(tmp_path, "mn", [0, 1])
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="mn", storage=driver_url(_url(tmp_path)))
    assert len(study.trials) == 2  # one trial per index: node 0 claims, the others follow
    first, second = sorted(study.trials, key=lambda t: t.user_attrs[protocol.INDEX_ATTR])
    assert first.state == TrialState.COMPLETE and second.state == TrialState.PRUNED
    for index in (0, 1):
        nodes = _seen(tmp_path, index, 0)
        assert [n["node"] for n in nodes] == [0, 1]
        assert nodes[0]["pgid"] != nodes[1]["pgid"]  # two process groups: two "pods"
        assert {n["rank"] for n in nodes} == {0, 1} and all(n["world_size"] == 2
                                                            for n in nodes)
        assert nodes[0]["params"] == nodes[1]["params"] == {"x": index, "steps": 3}
        assert nodes[0]["decisions"] == nodes[1]["decisions"]  # one prune decision
        assert [n["main"] for n in nodes] == [True, False]  # node 0 leads, whatever its rank
    assert _seen(tmp_path, 1, 0)[0]["decisions"] == [True]
    assert first.intermediate_values == {0: 3.0, 1: 2.0, 2: 1.0}  # one set of reports
    assert first.value == 1.0 and first.user_attrs["sum_of_ranks"] == 1.0


def test_a_node_that_dies_fails_the_attempt_once_and_the_retry_runs_both(
        tmp_path: Path) -> None:
    result = _run(tmp_path, "mn-kill", [0], kill_node=1)
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="mn-kill", storage=driver_url(_url(tmp_path)))
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.COMPLETE]
    failed, retry = study.trials
    assert "torchrun exited with code" in failed.user_attrs[protocol.FAIL_REASON_ATTR]
    assert retry.user_attrs[protocol.ATTEMPT_ATTR] == 1 and retry.value == 1.0
    assert [n["node"] for n in _seen(tmp_path, 0, 1)] == [0, 1]  # both nodes ran it again
