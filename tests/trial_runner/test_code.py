"""The runner's side of code snapshots: fetched once per pod (the marker says it is there),
checked, unpacked, and the runner works in it; a missing one is a CodeError."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweeper import protocol
from sweeper.code.snapshot import pack
from sweeper.errors import CodeError
from sweeper.spec import ArtifactsSpec, parse_spec_dict
from trial_runner import code as runner_code


@pytest.fixture
def restored() -> Iterator[None]:
    cwd, path, env = os.getcwd(), list(sys.path), os.environ.get("PYTHONPATH")
    yield
    os.chdir(cwd)
    sys.path[:] = path
    if env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = env


def _spec(store: Path) -> object:
    spec = parse_spec_dict({
        "name": "c", "method": "grid", "objective": {"metric": "loss", "direction": "minimize"},
        "trial": {"entrypoint": "m:f"}, "parameters": {"x": {"type": "int", "values": [0]}},
        "artifacts": {"store": "filesystem", "path": str(store)}}, source="<test>")
    assert spec.artifacts == ArtifactsSpec(path=str(store))
    return spec


def test_fetched_once_then_worked_in(tmp_path: Path, restored: None,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeper.code.stores import open_code_store

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "m.py").write_text("def f(ctx):\n    return 1.0\n")
    snap = pack(tmp_path / "code")
    spec = _spec(tmp_path / "store")
    open_code_store(spec, "sqlite://", None, None).put(snap)  # type: ignore[arg-type]
    env = {protocol.ENV_CODE: snap.digest, protocol.ENV_CODE_STORE: "artifacts",
           protocol.ENV_CODE_DIR: str(tmp_path / "pod-code")}
    fetched: list[str] = []
    real = runner_code.unpack
    monkeypatch.setattr(runner_code, "unpack", lambda *a: fetched.append(a[1]) or real(*a))
    dest = runner_code.enter_code(env, spec, None, 0, "sqlite://")  # type: ignore[arg-type]
    assert dest == tmp_path / "pod-code" and Path.cwd() == dest
    assert sys.path[0] == str(dest) and os.environ["PYTHONPATH"].startswith(str(dest))
    assert runner_code.enter_code(env, spec, None, 0, "sqlite://") == dest  # type: ignore[arg-type]
    assert fetched == [snap.digest]  # the second index of the pod fetched nothing


def test_no_store_no_fetch_and_a_missing_snapshot_is_a_code_error(tmp_path: Path,
                                                                   restored: None) -> None:
    spec = _spec(tmp_path / "store")
    digest = "sha256:" + "3" * 64
    assert runner_code.enter_code({protocol.ENV_CODE: digest}, spec, None, 0,  # type: ignore[arg-type]
                                  "sqlite://") is None  # local: the code is on the machine
    (tmp_path / "store").mkdir()
    env = {protocol.ENV_CODE: digest, protocol.ENV_CODE_STORE: "artifacts",
           protocol.ENV_CODE_DIR: str(tmp_path / "pod-code")}
    with pytest.raises(CodeError, match="not there"):
        runner_code.enter_code(env, spec, None, 0, "sqlite://")  # type: ignore[arg-type]
    with pytest.raises(CodeError, match="SWEEPER_CODE_STORE"):
        runner_code.enter_code({**env, protocol.ENV_CODE_STORE: "ftp"}, spec, None, 0,  # type: ignore[arg-type]
                               "sqlite://")
