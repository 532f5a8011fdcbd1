"""A stateful fake Kubernetes API server for tests (never a sweeper backend).

It speaks HTTP to the official `kubernetes` client (kubeconfig from `write_kubeconfig`),
runs a Job controller with Kubernetes 1.33 semantics (`controller.py`) and a "kubelet" that
runs each pod's command as a local process with the env the manifest declares
(`kubelet.py`). Behaviour a real cluster has and tests should expect:

- deleting a batch/v1 Job without `propagationPolicy` orphans its pods (they keep running)
  and the response carries the apiserver's `Warning` header; pass Background/Foreground;
- counters and index strings are omitted from `status` when zero/empty (`omitempty`), except
  `ready`, `terminating`, `uncountedTerminatedPods` and `failedIndexes` (with
  backoffLimitPerIndex);
- pods the controller or the user deletes disappear from the API once terminated; failed
  pods of a running Job stay (phase Failed) like the real ones.
"""

from __future__ import annotations

from .controller import format_intervals, match_pod_failure_policy, parse_intervals
from .server import DEFAULT_USER, FakeKubeAPI, RecordedRequest
from .store import ApiError, parse_label_selector

__all__ = [
    "DEFAULT_USER",
    "ApiError",
    "FakeKubeAPI",
    "RecordedRequest",
    "format_intervals",
    "match_pod_failure_policy",
    "parse_intervals",
    "parse_label_selector",
]
