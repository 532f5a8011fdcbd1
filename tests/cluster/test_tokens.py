"""The process node's projected ServiceAccount tokens (tests/cluster/tokens.py): the
TokenRequest the kubelet sends (audience, lifetime, bound to the pod), the file written whole,
renewed at 80 % of its lifetime, forgotten with the pod's directory."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.cluster.tokens import ProjectedTokens

POD = {"metadata": {"name": "p-0", "uid": "u-1", "namespace": "sweeper"}}


class FakeCore:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []

    def create_namespaced_service_account_token(self, account: str, namespace: str,
                                                body: Any, **_: Any) -> Any:
        self.requests.append((account, namespace, body))
        token = f"token-{len(self.requests)}"
        return SimpleNamespace(data=json.dumps({"status": {"token": token}}).encode())


def test_a_token_is_requested_bound_to_the_pod_and_renewed_before_it_expires(
        tmp_path: Path) -> None:
    core = FakeCore()
    tokens = ProjectedTokens(core, log=lambda line: None)
    path = tmp_path / "pod" / "vol" / "token"
    tokens.project(path, "sweeper", "sweeper-trial", "sweeper-proxy", 1, POD)
    assert path.read_text() == "token-1"
    assert core.requests == [("sweeper-trial", "sweeper", {"spec": {
        "expirationSeconds": 1, "audiences": ["sweeper-proxy"],
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p-0", "uid": "u-1"}}})]
    tokens.renew()
    assert path.read_text() == "token-1"  # not due yet
    time.sleep(0.85)
    tokens.renew()
    assert path.read_text() == "token-2" and len(core.requests) == 2
    shutil.rmtree(tmp_path / "pod" / "vol")
    tokens.renew()
    assert tokens.files == {} and len(core.requests) == 2
