"""Projected ServiceAccount tokens, as the kubelet handles a ``serviceAccountToken`` volume
source: a TokenRequest for the pod's ServiceAccount with the audience and lifetime asked for,
bound to the pod (the API server's TokenReview refuses it once the pod is gone), written to
the volume's file, and renewed there at 80 % of its lifetime while the pod's directory
exists."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from .podenv import Obj, write_atomically


class ProjectedTokens:
    def __init__(self, core: client.CoreV1Api, log: Callable[[str], None]) -> None:
        self.core = core
        self.log = log
        #: file -> (when to renew it, how to request it again)
        self.files: dict[Path, tuple[float, tuple[Any, ...]]] = {}

    def project(self, path: Path, namespace: str, account: str, audience: str | None,
                seconds: int, pod: Obj) -> None:
        spec: Obj = {"expirationSeconds": seconds, "boundObjectRef": {
            "apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"]}}
        if audience:
            spec["audiences"] = [audience]
        got = json.loads(self.core.create_namespaced_service_account_token(
            account, namespace, {"spec": spec}, _preload_content=False).data)
        write_atomically(path, str(got["status"]["token"]))
        self.files[path] = (time.monotonic() + 0.8 * seconds,
                            (path, namespace, account, audience, seconds, pod))

    def renew(self) -> None:
        """Renew the tokens that are due; forget those whose pod directory is gone."""
        now = time.monotonic()
        for path, (due, args) in list(self.files.items()):
            if not path.parent.exists():
                self.files.pop(path, None)
            elif due <= now:
                try:
                    self.project(*args)
                except client.exceptions.ApiException as e:  # the pod is gone: no token
                    self.log(f"token {path}: {e.status} {e.reason}")
                    self.files.pop(path, None)
