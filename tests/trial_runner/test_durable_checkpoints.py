"""Checkpoints that survive the pod, runner side: with S3 artifacts (moto's server) every
checkpoint is uploaded as it is saved, and a new attempt that starts with an empty local
directory (another pod, another node) gets the latest one before the user's code runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper import protocol
from sweeper.entrypoint import load_entrypoint
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import spec_dict
from tests.support.s3 import S3Server, s3_in_env
from trial_runner.checkpoints import CheckpointMirror
from trial_runner.runner import RunnerSettings, run_index

RESUMABLE = "tests.support.cluster_objectives:resumable"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    with s3_in_env(monkeypatch) as server:
        yield server


def _sweep(tmp_path: Path, artifacts: dict[str, Any] | None) -> Any:
    from sweeper.spec import parse_spec

    d = spec_dict(name="ckpt", trial={"entrypoint": RESUMABLE,
                                      "fixed": {"steps": 5, "fail_at": 2}})
    d["parameters"] = {"x": {"type": "int", "low": 0, "high": 1}}
    if artifacts:
        d["artifacts"] = artifacts
    spec = parse_spec(yaml.safe_dump(d, sort_keys=False))
    sweep, _ = create_or_resume(open_storage(f"sqlite:///{tmp_path / 's.db'}"), spec)
    return sweep


def _in_pod(tmp_path: Path, pod: str) -> RunnerSettings:
    """A runner whose local checkpoint directory is its pod's own (empty at start)."""
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=2.0,
                          checkpoint_root=tmp_path / pod / "checkpoints")


def test_a_retry_in_another_pod_resumes_from_the_s3_checkpoint(tmp_path: Path,
                                                               s3: S3Server) -> None:
    s3.client().create_bucket(Bucket="ckpts")
    sweep = _sweep(tmp_path, {"store": "s3", "bucket": "ckpts", "prefix": "team",
                              "endpoint_url": s3.endpoint, "region": "us-east-1"})
    objective = load_entrypoint(RESUMABLE)
    first = run_index(sweep, 1, objective, _in_pod(tmp_path, "pod-a"))
    assert (first.state, first.exit_code) == ("FAIL", protocol.EXIT_RETRY)
    keys = sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket="ckpts")["Contents"])
    key = sweep.state_key
    assert key.startswith("ckpt-") and len(key) == len("ckpt-") + 8  # the sweep's own
    assert keys == [f"team/checkpoints/{key}/index-1/checkpoint.json",
                    f"team/checkpoints/{key}/index-1/checkpoint.pt"]

    retry = run_index(sweep, 1, objective, _in_pod(tmp_path, "pod-b"))
    assert retry.state == "COMPLETE"
    t = sweep.study().trials[retry.trial_number]
    assert t.user_attrs[protocol.ATTEMPT_ATTR] == 1
    assert t.user_attrs[protocol.RESUMED_ATTR] == 2  # the history says where it resumed
    assert t.user_attrs["start_step"] == 3
    assert [s for s, _ in t.user_attrs[protocol.HISTORY_ATTR]["loss"]] == [3, 4]
    assert t.value == 2.0  # steps 3 and 4 only
    # The second pod got the checkpoint before user code ran; it saved newer ones since.
    mirror = CheckpointMirror.for_index(sweep.spec, sweep.storage.url, 1, key)
    assert mirror is not None
    meta = mirror.pull(tmp_path / "pod-c")
    assert meta == {"step": 4, "trial_number": retry.trial_number, "attempt": 1}
    assert mirror.where == f"s3://ckpts/team/checkpoints/{key}/index-1"


def test_without_s3_a_new_pod_starts_over(tmp_path: Path) -> None:
    """The contrast: the local directory alone is gone with the pod (hence the warning)."""
    sweep = _sweep(tmp_path, None)
    assert CheckpointMirror.for_index(sweep.spec, sweep.storage.url, 0, sweep.state_key) is None
    objective = load_entrypoint(RESUMABLE)
    assert run_index(sweep, 0, objective, _in_pod(tmp_path, "pod-a")).state == "FAIL"
    retry = run_index(sweep, 0, objective, _in_pod(tmp_path, "pod-b"))
    t = sweep.study().trials[retry.trial_number]
    assert t.user_attrs["start_step"] == 0 and protocol.RESUMED_ATTR not in t.user_attrs


def test_an_unreachable_store_fails_the_attempt_with_one_line(tmp_path: Path,
                                                              s3: S3Server) -> None:
    sweep = _sweep(tmp_path, {"store": "s3", "bucket": "no-such-bucket",
                              "endpoint_url": s3.endpoint, "region": "us-east-1"})
    out = run_index(sweep, 0, load_entrypoint(RESUMABLE), _in_pod(tmp_path, "pod-a"))
    assert out.state == "FAIL"
    reason = sweep.study().trials[out.trial_number].user_attrs[protocol.FAIL_REASON_ATTR]
    assert f"cannot save the checkpoint to s3://no-such-bucket/checkpoints/{sweep.state_key}/" \
        "index-0" in reason
    assert "NoSuchBucket" in reason and "test-secret" not in reason
