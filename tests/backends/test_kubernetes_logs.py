"""`sweeper logs` and `run`'s failure summary on Kubernetes, end to end through the local
control plane (or a cluster of your own, see conftest.py): an attempt of an index picked by the
runner's header in the pod logs, following a pod's log as it is written, and the failed index's
reason and pod log lines in `run`'s summary."""

from __future__ import annotations

import re
import time

import pytest

from sweeper.backends.manifests import COMPLETION_INDEX
from sweeper.runlogs import split_attempts
from tests.support.asha_objectives import k8s_promotion_spec
from tests.support.k8s_cluster import Cluster

pytestmark = pytest.mark.postgres

FLAKY = "tests.support.k8s_objectives:flaky"
SLOW = "tests.support.k8s_objectives:slow"


def _grid(name: str, entrypoint: str, n: int, parallelism: int, retries: int,
          fixed: str) -> str:
    return f"""
name: {name}
method: grid
objective: {{metric: loss, direction: minimize}}
parallelism: {parallelism}
trial:
  entrypoint: {entrypoint}
  fixed: {fixed}
  retries: {retries}
parameters:
  x: {{type: int, low: 0, high: {n - 1}}}
"""


def test_failure_summary_and_logs_by_attempt(cluster: Cluster) -> None:
    spec = cluster.spec(_grid("k8s-why", FLAKY, n=3, parallelism=3, retries=2, fixed="{}"))
    result = cluster.sweeper("run", spec, "--backend", "kubernetes")
    assert result.exit_code == 1, result.output
    # index 1 returns NaN: it fails for good at once, with its reason and its pod's last lines
    err = result.stderr
    start = err.index("index 1 failed for good after 1 attempt(s): ")
    block = err[start:].splitlines()
    assert "NaN" in block[0] or "nan" in block[0], block[0]
    assert block[1].startswith("  last lines of pod sweeper/k8s-why-"), block
    body = [line for line in block[2:] if line.startswith("    ")]
    assert 0 < len(body) <= 5
    assert any("index 1: trial #" in line for line in body), body
    assert block[len(body) + 2].startswith("  the rest: sweeper logs k8s-why --index 1")

    # index 0 failed once (attempt 0, one pod) and then finished (attempt 1, another pod)
    first = cluster.sweeper("logs", "k8s-why", "--index", "0", "--attempt", "0")
    assert first.exit_code == 0, first.output
    assert "RuntimeError: flaky: the first attempt of index 0 fails" in first.stdout
    assert "objective output of index 0" not in first.stdout
    assert "index 0, attempt 0, trial #" in first.stderr
    second = cluster.sweeper("logs", "k8s-why", "--index", "0", "--attempt", "1")
    assert second.exit_code == 0, second.output
    assert "objective output of index 0" in second.stdout and "RuntimeError" not in \
        second.stdout
    assert first.stderr.split()[1] != second.stderr.split()[1]  # two different pods
    none = cluster.sweeper("logs", "k8s-why", "--index", "0", "--attempt", "2")
    assert none.exit_code == 3
    assert "no log of attempt 2 of index 0 in the 2 pod(s) of sweep k8s-why" in none.stderr

    # --follow on a finished pod: its whole log, then the stream ends
    done = cluster.sweeper("logs", "k8s-why", "--index", "2", "--follow")
    assert done.exit_code == 0, done.output
    assert "objective output of index 2" in done.stdout
    assert "following" in done.stderr and "index 2" in done.stderr


def test_follow_streams_a_running_pod_until_it_ends(cluster: Cluster) -> None:
    spec = cluster.spec(_grid("k8s-tail", SLOW, n=2, parallelism=1, retries=0,
                              fixed="{delay: 2}"))
    started = cluster.sweeper("run", spec, "--backend", "kubernetes", "--detach")
    assert started.exit_code == 0, started.output
    followed = cluster.sweeper("logs", "k8s-tail", "--index", "0", "--follow")
    assert followed.exit_code == 0, followed.output
    assert followed.stderr.startswith("pod sweeper/k8s-tail-")
    assert "index 0: trial #0 complete" in followed.stdout  # the pod's last line
    deadline = time.monotonic() + cluster.patience(30)
    while cluster.finished_per_index("k8s-tail").get(0) != 1:  # it ended: the index finished
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _asha(name: str, claim: str) -> str:
    return k8s_promotion_spec(name, claim)


def test_logs_of_a_promoted_index_hold_its_segments_from_other_pods(cluster: Cluster) -> None:
    """Promotion ASHA, one pod at a time: index 0 (a=0, the best) pauses at rung 0 in its own
    pod, and index 2's pod, once three trials are at the rung, promotes it (then a later pod
    from rung 1). `sweeper logs --index 0` shows those segments too, in the order they ran,
    each after its header, and nothing of another index."""
    name = "k8s-asha-logs"
    with cluster.shared_claim("asha-logs") as (claim, _):
        result = cluster.sweeper("run", cluster.spec(_asha(name, claim)), "--backend",
                                 "kubernetes")
        assert result.exit_code == 0, result.output
        shown = cluster.sweeper("logs", name, "--index", "0")
        (own,) = [p["metadata"]["name"] for p in cluster.pods(name)  # its own pod
                  if (p["metadata"].get("labels") or {}).get(COMPLETION_INDEX) == "0"]
    assert shown.exit_code == 0, shown.output
    sections = split_attempts(shown.stdout)
    headers = [s.header for s in sections]
    assert all(h is not None and (h.index, h.attempt) == (0, 0) for h in headers), headers
    assert [h.promoted_from for h in headers if h is not None] == [None, 0, 1], shown.stdout
    assert "promoted from rung 0 ===" in shown.stdout
    # the runner's lines of each segment: index 0's only; each promotion resumed at its rung
    named = re.findall(r"\bindex (\d+)\b", shown.stdout)
    assert named and set(named) == {"0"}, shown.stdout
    resumed = re.findall(r"index 0 resumes from the checkpoint of step (\d+)", shown.stdout)
    assert resumed == ["1", "3"], shown.stdout
    assert "trial #0 complete: loss=0.1" in sections[-1].text, sections[-1].text
    assert "3 segments" in shown.stderr and "promoted segments from pod(s)" in shown.stderr
    assert f"pod sweeper/{own} " in shown.stderr, shown.stderr  # first, and not read twice
    assert own not in shown.stderr.split("promoted segments from pod(s)")[1]
