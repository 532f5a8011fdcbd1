"""Where snapshots live: the study storage (in parts, up to its limit) and an artifact store;
a put of a snapshot that is there writes nothing, a get of one that is not is a CodeError."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest

from sweeper.code import stores
from sweeper.code.snapshot import Snapshot, pack, unpack
from sweeper.code.stores import ArtifactCodeStore, StudyCodeStore, artifact_key, store_kind
from sweeper.errors import CodeError
from sweeper.spec import ArtifactsSpec
from sweeper.study import open_storage


def _snapshot(root: Path, size: int = 0) -> Snapshot:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text("def main(ctx):\n    return 1.0\n")
    if size:
        (root / "blob.bin").write_bytes(os.urandom(size))  # incompressible
    return pack(root)


def test_the_store_is_the_artifact_store_when_pods_reach_one() -> None:
    assert store_kind(ArtifactsSpec()) == "study"
    assert store_kind(ArtifactsSpec(store="s3", bucket="b")) == "artifacts"
    assert store_kind(ArtifactsSpec(path="/mnt/shared")) == "artifacts"


def test_study_store_round_trip_in_parts(storage_url: str, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stores, "PART_BYTES", 4096)
    storage = open_storage(storage_url)
    optuna.create_study(storage=storage, study_name="s")
    study_id = storage.get_study_id_from_name("s")
    store = StudyCodeStore(storage, study_id, "study s")
    snap = _snapshot(tmp_path / "code", size=20_000)
    assert store.put(snap) is True
    assert store.put(snap) is False  # there already: nothing written
    data = store.get(snap.digest)
    assert data == snap.data
    unpack(data, snap.digest, tmp_path / "out", store.where)
    assert storage.code_part(study_id, snap.hex, 0).parts == -(-snap.size // 4096)
    with pytest.raises(CodeError, match="not in the study"):
        store.get("sha256:" + "1" * 64)
    storage.close()


def test_study_store_refuses_a_snapshot_over_its_limit(sqlite_url: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stores, "STUDY_LIMIT_BYTES", 10_000)
    storage = open_storage(sqlite_url)
    optuna.create_study(storage=storage, study_name="s")
    study_id = storage.get_study_id_from_name("s")
    with pytest.raises(CodeError) as e:
        StudyCodeStore(storage, study_id, "study s").put(_snapshot(tmp_path / "c", 20_000))
    text = str(e.value)
    assert "artifacts.store: s3" in text and ".sweeperignore" in text and "trial.code: null" in text
    assert storage.get_study_system_attrs(study_id) == {}
    storage.close()


def test_artifact_store_round_trip(tmp_path: Path) -> None:
    from optuna.artifacts import FileSystemArtifactStore

    (tmp_path / "store").mkdir()
    store = ArtifactCodeStore(FileSystemArtifactStore(tmp_path / "store"), f"{tmp_path}/store/")
    snap = _snapshot(tmp_path / "code")
    assert store.put(snap) is True and store.put(snap) is False
    assert (tmp_path / "store" / artifact_key(snap.digest)).read_bytes() == snap.data
    assert store.get(snap.digest) == snap.data
    with pytest.raises(CodeError, match="not there"):
        store.get("sha256:" + "2" * 64)


@pytest.mark.postgres
def test_study_store_through_the_storage_proxy(pg_url: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The orchestrator puts and a pod gets a snapshot of several parts through a real
    `sweeper proxy` process: one part per call, each reply well under gRPC's 4 MiB."""
    from tests.support.proxy import ProxyProcess

    direct = open_storage(pg_url)
    optuna.create_study(storage=direct, study_name="s")
    study_id = direct.get_study_id_from_name("s")
    snap = _snapshot(tmp_path / "code", size=3 * stores.PART_BYTES + 100)
    proxy = ProxyProcess(pg_url, tmp_path).start()
    try:
        remote = open_storage(proxy.url)
        store = StudyCodeStore(remote, study_id, "study s via the proxy")
        assert store.put(snap) is True and store.put(snap) is False
        assert store.get(snap.digest) == snap.data
        assert StudyCodeStore(direct, study_id, "study s").get(snap.digest) == snap.data
        assert remote.code_part(study_id, snap.hex, 0).parts == 4
        remote.close()
    finally:
        proxy.kill()
        direct.close()
