"""Where code snapshots live, behind one small interface (:class:`CodeStore`):

- the sweep's artifact store, when the spec configures one a pod reaches (``artifacts.store:
  s3``, or a ``filesystem`` store with a ``path``: a volume every pod mounts), under
  ``code-sha256-<hex>.tar.gz`` (flat: a filesystem store makes no directories): no size
  limit beyond the store's;
- otherwise the study storage itself (the database, or the storage proxy in front of it): the
  archive in parts of :data:`PART_BYTES` (base64 in study system attrs, one part per call so a
  gRPC message stays well under 4 MiB), up to :data:`STUDY_LIMIT_BYTES`.

A put of a snapshot that is already there writes nothing (the name is its content).
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any, Literal, Protocol

from sweeper.code.snapshot import Snapshot, parse_digest
from sweeper.errors import ArtifactError, CodeError
from sweeper.protocol import code_part_key

if TYPE_CHECKING:
    from sweeper.spec import ArtifactsSpec, SweepSpec
    from sweeper.study.open import StudyStorage

logger = logging.getLogger(__name__)

#: Raw bytes per part of a snapshot kept in the study (base64: a third more on the wire).
PART_BYTES = 1024 * 1024
#: The largest snapshot (compressed) the study storage keeps; past it, an artifact store.
STUDY_LIMIT_BYTES = 32 * 1024 * 1024
#: The artifact key prefix of snapshots.
KEY_PREFIX = "code-"

StoreKind = Literal["artifacts", "study"]


class CodeStore(Protocol):
    """A place snapshots are put by the orchestrator and fetched by pods."""

    #: For messages: where the snapshots are.
    where: str
    #: The largest snapshot it keeps, in bytes (None: the store's own limit).
    limit: int | None

    def location(self, digest: str) -> str:
        """Where the snapshot ``digest`` is, for messages."""

    def put(self, snapshot: Snapshot) -> bool:
        """Store the snapshot; False when it was there already."""

    def get(self, digest: str) -> bytes:
        """The archive of ``digest`` as stored (not verified). CodeError when it is not
        there; ArtifactError or StorageError for a failure a retry may fix."""


def store_kind(artifacts: ArtifactsSpec) -> StoreKind:
    """Where a sweep with these artifact settings keeps its snapshots."""
    if artifacts.store == "s3" or artifacts.path is not None:
        return "artifacts"
    return "study"


def artifact_key(digest: str) -> str:
    return f"{KEY_PREFIX}sha256-{parse_digest(digest)}.tar.gz"


class ArtifactCodeStore:
    """Snapshots as objects of an Optuna artifact store (S3, or a shared directory)."""

    limit: int | None = None

    def __init__(self, store: Any, where: str) -> None:
        self._store = store
        self.where = where

    def location(self, digest: str) -> str:
        return self.where + artifact_key(digest)

    def _exists(self, key: str) -> bool:
        from optuna.artifacts.exceptions import ArtifactNotFound

        try:
            with self._store.open_reader(key) as reader:
                reader.read(1)
            return True
        except ArtifactNotFound:
            return False

    def put(self, snapshot: Snapshot) -> bool:
        import io

        key = artifact_key(snapshot.digest)
        try:
            if self._exists(key):
                return False
            self._store.write(key, io.BytesIO(snapshot.data))
        except Exception as e:  # noqa: BLE001 - any store failure, one line, no secrets
            raise ArtifactError(f"cannot store the code snapshot at {self.where}: "
                                f"{type(e).__name__}: {e}") from None
        return True

    def get(self, digest: str) -> bytes:
        from optuna.artifacts.exceptions import ArtifactNotFound

        key = artifact_key(digest)
        try:
            with self._store.open_reader(key) as reader:
                return bytes(reader.read())
        except ArtifactNotFound:
            raise CodeError(f"{self.where}{key}: the code snapshot {digest} is not there") \
                from None
        except Exception as e:  # noqa: BLE001 - transient or not, the attempt is retried
            raise ArtifactError(f"cannot fetch the code snapshot {self.where}{key}: "
                                f"{type(e).__name__}: {e}") from None


class StudyCodeStore:
    """Snapshots in the study itself: parts in study system attrs, written with Optuna's
    ``set_study_system_attr`` and read one by one (``IndexStore.code_part``)."""

    limit: int | None = STUDY_LIMIT_BYTES

    def __init__(self, storage: StudyStorage, study_id: int, where: str) -> None:
        self._studies_storage = storage
        self._sweep_study_id = study_id
        self.where = where

    def location(self, digest: str) -> str:
        return f"{self.where} (study system attrs {code_part_key(parse_digest(digest), 0)}...)"

    def put(self, snapshot: Snapshot) -> bool:
        if snapshot.size > STUDY_LIMIT_BYTES:
            raise CodeError(too_large(snapshot, self.where))
        hex_ = snapshot.hex
        parts = max(1, -(-snapshot.size // PART_BYTES))
        last = self._studies_storage.code_part(self._sweep_study_id, hex_, parts - 1)
        if last is not None and last.parts == parts:
            return False  # the last part is written last: the rest is there
        for k in range(parts):
            chunk = snapshot.data[k * PART_BYTES:(k + 1) * PART_BYTES]
            self._studies_storage.set_study_system_attr(
                self._sweep_study_id, code_part_key(hex_, k),
                {"parts": parts, "data": base64.b64encode(chunk).decode("ascii")})
        return True

    def get(self, digest: str) -> bytes:
        hex_ = parse_digest(digest)
        first = self._studies_storage.code_part(self._sweep_study_id, hex_, 0)
        if first is None:
            raise CodeError(f"{self.where}: the code snapshot {digest} is not in the study")
        chunks = [first.data]
        for k in range(1, first.parts):
            part = self._studies_storage.code_part(self._sweep_study_id, hex_, k)
            if part is None:
                raise CodeError(f"{self.where}: part {k} of the code snapshot {digest} is "
                                "missing from the study")
            chunks.append(part.data)
        try:
            return b"".join(base64.b64decode(c, validate=True) for c in chunks)
        except ValueError:
            raise CodeError(f"{self.where}: the code snapshot {digest} in the study is not "
                            "valid base64 (corrupted)") from None


def too_large(snapshot: Snapshot, where: str) -> str:
    """The error past the study storage's limit, naming the alternatives."""
    return (f"trial.code: the code snapshot is {snapshot.size / 2**20:.1f} MiB, over the "
            f"{STUDY_LIMIT_BYTES // 2**20} MiB the study storage ({where}) keeps: configure "
            "an artifact store (artifacts.store: s3, or a filesystem path on a volume every "
            "pod mounts), leave files out with .sweeperignore, or set trial.code: null and "
            "build the code into the image")


def open_code_store(spec: SweepSpec, storage_url: str, storage: StudyStorage | None,
                    study_id: int | None, kind: StoreKind | None = None) -> CodeStore:
    """The store of ``spec``'s snapshots (``kind``: the one :func:`store_kind` picks); the
    study path needs the open study."""
    from sweeper.study.urls import redact

    if (kind or store_kind(spec.artifacts)) == "artifacts":
        from sweeper.artifacts import cached_artifact_store, describe

        where = describe(spec.artifacts, storage_url).split(" at ", 1)[0]
        where = where if where.endswith("/") else where + "/"
        return ArtifactCodeStore(cached_artifact_store(spec.artifacts, storage_url), where)
    if storage is None or study_id is None:
        raise CodeError(f"{spec.source}: trial.code: without an artifact store the code "
                        "snapshot is kept in the study storage, which this command has not "
                        "opened")
    return StudyCodeStore(storage, study_id, f"study {spec.name} in {redact(storage_url)}")
