"""The process node's stand-in for cluster DNS, without a cluster: which names in an env value
or argument become 127.0.0.1 (a Service's, with its targetPort; a pod's under a headless
Service, with the port as written), after ``$(VAR)`` expansion and the downward API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cluster.podenv import PodEnv, rewrite_services


class FakeSources:
    """Service ``web`` (port 80 -> 8080) and headless Service ``js`` in namespace ``team``;
    headless ``other`` in namespace ``ml``."""

    def __init__(self) -> None:
        self.headless_lookups: list[str] = []

    def data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        return None

    def service_ports(self, namespace: str, name: str) -> dict[int, int] | None:
        known = {("team", "web"): {80: 8080}, ("team", "js"): {}, ("ml", "other"): {}}
        return known.get((namespace, name))

    def headless_services(self, namespace: str) -> frozenset[str]:
        self.headless_lookups.append(namespace)
        return frozenset({"team": {"js"}, "ml": {"other"}}.get(namespace, set()))

    def project_token(self, path: Path, namespace: str, account: str, audience: str | None,
                      seconds: int, pod: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"token-of-{namespace}-{account}-for-{audience}")


@pytest.mark.parametrize(("value", "expected"), [
    ("js-w-0-0.js", "127.0.0.1"),
    ("js-w-0-0.js:29500", "127.0.0.1:29500"),
    ("js-w-1-0.js.team", "127.0.0.1"),
    ("js-w-1-0.js.team.svc:80", "127.0.0.1:80"),  # a pod's port, not a Service's targetPort
    ("tcp://js-w-1-1.js.team.svc.cluster.local:1234/x", "tcp://127.0.0.1:1234/x"),
    ("a.other.ml:7", "127.0.0.1:7"),
    ("postgresql://u:pw@db-0.js:5432/x", "postgresql://u:pw@127.0.0.1:5432/x"),
    ("--peers=js-w-0-0.js:1,js-w-1-0.js:2", "--peers=127.0.0.1:1,127.0.0.1:2"),
    # Services as before: FQDN and short name with a port, to the targetPort.
    ("web.team.svc:80", "127.0.0.1:8080"),
    ("http://web.team.svc.cluster.local", "http://127.0.0.1"),
    ("web:80", "127.0.0.1:8080"),
    ("js.team.svc", "127.0.0.1"),  # the headless Service's own name
    # Left alone: no such headless Service (here or in that namespace), not a name at all.
    ("js-w-0-0.nosuch:29500", "js-w-0-0.nosuch:29500"),
    ("js-w-0-0.js.ml", "js-w-0-0.js.ml"),
    ("js-w-0-0.other", "js-w-0-0.other"),
    ("print(os.environ)", "print(os.environ)"),
    ("0.5", "0.5"),
    ("10.0.0.1:80", "10.0.0.1:80"),
    ("x.js.team.svc.example.org", "x.js.team.svc.example.org"),
])
def test_which_names_become_the_node(value: str, expected: str) -> None:
    assert rewrite_services(value, "team", FakeSources()) == expected


def test_headless_services_are_looked_up_once_per_namespace() -> None:
    sources, seen = FakeSources(), dict[str, frozenset[str]]()
    for value in ("a.js", "b.js:1", "c.js.team", "d.other.ml", "e.other.ml"):
        rewrite_services(value, "team", sources, seen)
    assert sources.headless_lookups == ["team", "ml"]


def test_after_expansion_and_the_downward_api(tmp_path: Path) -> None:
    pod = {"metadata": {"name": "js-w-1-0-abcde", "namespace": "team",
                        "labels": {"jobset.sigs.k8s.io/job-index": "1"},
                        "annotations": {"jobset.sigs.k8s.io/job-index": "1"}},
           "spec": {"containers": []}}
    index = "['jobset.sigs.k8s.io/job-index']"
    spec = {"name": "main", "command": ["python", "-c", "pass", "$(PEER):29500"], "env": [
        {"name": "SLOT", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations{index}"}}},
        {"name": "SLOT_LABEL", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels{index}"}}},
        {"name": "PEER", "value": "js-w-$(SLOT)-0.js"},
        {"name": "LEADER", "value": "js-w-0-$(SLOT_LABEL).js.team.svc:29500"}]}
    argv, env, _ = PodEnv(pod, FakeSources(), "node", lambda r: "0").launch(spec, {})
    assert env["SLOT"] == env["SLOT_LABEL"] == "1"
    assert env["PEER"] == "127.0.0.1"
    assert env["LEADER"] == "127.0.0.1:29500"
    assert argv[1:] == ["-c", "pass", "127.0.0.1:29500"]
