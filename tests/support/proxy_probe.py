"""What a pod of one sweep tries against the storage proxy with its own projected token
(tests/backends/test_proxy_auth_k8s.py): ``python -m tests.support.proxy_probe OWN OTHER``.
Each attempt prints one JSON line ``{"try": ..., "code": "OK" | <gRPC status>}``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any


def _code(fn: Callable[[], Any]) -> str:
    import grpc

    from sweeper.errors import StorageError

    try:
        fn()
    except grpc.RpcError as e:
        return e.code().name if isinstance(e, grpc.Call) else "RpcError"
    except StorageError as e:
        for code in ("PERMISSION_DENIED", "UNAUTHENTICATED", "INVALID_ARGUMENT"):
            if code in str(e):
                return code
        return f"StorageError: {e}"
    return "OK"


def main(own: str, other: str) -> int:
    import optuna

    from sweeper.study.remote.client import ProxyStorage

    storage = ProxyStorage(os.environ["SWEEPER_STORAGE"])
    storage.wait_ready(30)
    own_id = storage.get_study_id_from_name(own)
    tries: dict[str, Callable[[], Any]] = {
        "read own study": lambda: storage.get_study_directions(own_id),
        "read own trials": lambda: storage.get_all_trials(own_id),
        "find other study": lambda: storage.get_study_id_from_name(other),
    }
    other_id = int(sys.argv[3])
    other_trial = int(sys.argv[4])
    tries.update({
        "finish other's trial": lambda: storage.set_trial_state_values(
            other_trial, optuna.trial.TrialState.COMPLETE, [0.0]),
        "write other's trial attr": lambda: storage.set_trial_user_attr(other_trial, "x", 1),
        "claim other's trial": lambda: storage.claim(other_trial),
        "heartbeat other's trial": lambda: storage.record_heartbeat(other_trial),
        "read other's trials": lambda: storage.get_all_trials(other_id),
        "delete other study": lambda: storage.delete_study(other_id),
        "delete own study": lambda: storage.delete_study(own_id),
        "create a study": lambda: storage.create_new_study(
            [optuna.study.StudyDirection.MINIMIZE], "intruder"),
        "rewrite own study": lambda: storage.set_study_user_attr(own_id, "sweeper:spec", {}),
        "list every study": lambda: storage.get_all_studies(),
    })
    for name, fn in tries.items():
        print(json.dumps({"try": name, "code": _code(fn)}), flush=True)
    storage.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
