"""Artifact stores from the spec: where trials' files (checkpoints, final models) go.

Files are Optuna artifacts: the bytes live in a store, the trial holds the metadata (system attr
``artifacts:<id>``), so optuna-dashboard lists them and ``sweeper best --download`` finds them.

- ``artifacts: {store: filesystem, path: DIR}``: a directory (relative paths are relative to the
  working directory, like ``sqlite:///sweeps.db``).
- no ``artifacts:`` (the default): a directory next to the study. ``sqlite:///dir/sweeps.db`` ->
  ``dir/sweeps-artifacts/``; PostgreSQL -> ``./sweeper-artifacts/`` of the machine running the
  trials (fine for the local backend; pods need S3 or a shared volume).
- ``artifacts: {store: s3, bucket: B, prefix: P, endpoint_url: URL}``: S3 or an S3-compatible
  server (MinIO). Credentials come from the environment (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``), never from the spec.

Imports neither click nor kubernetes: the trial runner uses it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from sweeper.errors import ArtifactError
from sweeper.spec import ArtifactsSpec
from sweeper.study.sql.artifacts import ARTIFACT_ATTR_PREFIX

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

    from sweeper._optuna_compat import ArtifactStore

logger = logging.getLogger(__name__)

DEFAULT_DIR = "sweeper-artifacts"


# --------------------------------------------------------------------------- where


def default_artifact_dir(storage_url: str) -> Path:
    """The filesystem store used when the spec has no ``artifacts:``: next to a SQLite file,
    else ``./sweeper-artifacts``."""
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if storage_url.startswith(prefix):
            db = storage_url[len(prefix):].split("?", 1)[0]
            if db and db != ":memory:":
                p = Path(db)
                return p.with_name(f"{p.stem}-artifacts")
    return Path(DEFAULT_DIR)


def describe(spec: ArtifactsSpec, storage_url: str) -> str:
    """One line naming the store, safe to print (no credentials are ever in the spec)."""
    if spec.store == "s3":
        where = f"s3://{spec.bucket}/{spec.prefix + '/' if spec.prefix else ''}"
        return where + (f" at {spec.endpoint_url}" if spec.endpoint_url else "")
    return str(Path(spec.path) if spec.path else default_artifact_dir(storage_url))


def dashboard_artifacts_spec(storage: BaseStorage) -> ArtifactsSpec:
    """The store a dashboard over a whole storage should list: the one every sweeper sweep in
    it shares, else the default (one dashboard serves one store; name a sweep for its own)."""
    from sweeper.errors import SpecError
    from sweeper.protocol import SPEC_ATTR
    from sweeper.spec import load_stored

    found: set[ArtifactsSpec] = set()
    for study in storage.get_all_studies():
        record = study.user_attrs.get(SPEC_ATTR)
        if not isinstance(record, dict):
            continue
        try:
            found.add(load_stored(record, source=f"<study {study.study_name}>").artifacts)
        except SpecError:
            continue
    if len(found) == 1:
        return found.pop()
    if len(found) > 1:
        logger.warning("sweeps in this storage use different artifact stores; listing the "
                       "default one (pass a sweep NAME to list that sweep's)")
    return ArtifactsSpec()


# --------------------------------------------------------------------------- stores


class PrefixedStore:
    """Keeps a sweep's artifacts under ``prefix/`` of a shared bucket."""

    def __init__(self, inner: ArtifactStore, prefix: str) -> None:
        self.inner = inner
        self.prefix = prefix.strip("/")

    def _key(self, artifact_id: str) -> str:
        return f"{self.prefix}/{artifact_id}" if self.prefix else artifact_id

    def open_reader(self, artifact_id: str) -> BinaryIO:
        return self.inner.open_reader(self._key(artifact_id))

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self.inner.write(self._key(artifact_id), content_body)

    def remove(self, artifact_id: str) -> None:
        self.inner.remove(self._key(artifact_id))


def remove_artifacts(spec: ArtifactsSpec, storage_url: str, artifact_ids: Iterable[str]) -> str:
    """Remove the files of ``artifact_ids`` from a filesystem store (local files, this sweep's
    own by id); an S3 store is left alone (``sweeper.purge`` removes from it, when asked). One
    line saying what was done."""
    ids = list(artifact_ids)
    where = describe(spec, storage_url)
    if spec.store != "filesystem":
        return f"kept {len(ids)} artifact(s) in {where} (not a filesystem store)"
    from optuna.artifacts.exceptions import ArtifactNotFound

    store = open_artifact_store(spec, storage_url, create=False)
    removed = missing = 0
    for artifact_id in ids:
        try:
            store.remove(artifact_id)
            removed += 1
        except (ArtifactNotFound, ValueError):
            missing += 1
        except OSError as e:
            raise ArtifactError(f"cannot remove artifact {artifact_id} from {where}: "
                                f"{e.strerror}") from None
    return f"removed {removed} artifact file(s) from {where}" + (
        f" ({missing} not there)" if missing else "")


def open_artifact_store(spec: ArtifactsSpec, storage_url: str, *,
                        create: bool = True) -> ArtifactStore:
    """The store the spec names. ``create`` makes a filesystem store's directory (runners);
    readers (dashboard, download) pass False so that looking never creates directories."""
    if spec.store == "s3":
        return _s3_store(spec)
    from optuna.artifacts import FileSystemArtifactStore

    base = Path(spec.path) if spec.path else default_artifact_dir(storage_url)
    if create:
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArtifactError(f"cannot create the artifact directory {base}: "
                                f"{e.strerror}") from None
    return FileSystemArtifactStore(base)


@functools.lru_cache(maxsize=8)
def cached_artifact_store(spec: ArtifactsSpec, storage_url: str) -> ArtifactStore:
    """One store per process (a boto3 client is not free to build)."""
    return open_artifact_store(spec, storage_url)


def s3_client(endpoint_url: str | None, region: str | None) -> Any:
    """A boto3 S3 client with retries; credentials from the environment, never the spec."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ArtifactError("S3 needs boto3: pip install boto3") from None
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=region,
                        config=Config(retries={"max_attempts": 5, "mode": "standard"},
                                      connect_timeout=10, read_timeout=60))


def _s3_store(spec: ArtifactsSpec) -> ArtifactStore:
    from optuna.artifacts import Boto3ArtifactStore

    assert spec.bucket is not None
    client = s3_client(spec.endpoint_url, spec.region)
    store: ArtifactStore = Boto3ArtifactStore(spec.bucket, client=client)
    return PrefixedStore(store, spec.prefix) if spec.prefix else store


# --------------------------------------------------------------------------- upload


def upload(store: ArtifactStore, trial: optuna.Trial,
           data: str | os.PathLike[str] | bytes, name: str | None = None) -> str:
    """Save a file (a path) or bytes as an artifact of ``trial``; returns the artifact id.

    ``name`` is the file name the dashboard shows and downloads use (default: the file's own
    name; required for bytes)."""
    from optuna.artifacts import upload_artifact

    if isinstance(data, (bytes, bytearray, memoryview)):
        if not name:
            raise ValueError("save_artifact(bytes) needs name=, e.g. name='model.pt'")
        payload: bytes | None = bytes(data)
        source = None
    else:
        payload = None
        source = Path(data)
        if not source.is_file():
            raise FileNotFoundError(f"no such file to save as an artifact: {source}")
    filename = _safe_name(name or (source.name if source else ""))
    try:
        with tempfile.TemporaryDirectory(prefix="sweeper-artifact-") as tmp:
            path = Path(tmp) / filename
            if payload is not None:
                path.write_bytes(payload)
            else:
                assert source is not None
                if source.name == filename:
                    path = source
                else:
                    shutil.copyfile(source, path)
            return upload_artifact(artifact_store=store, file_path=str(path),
                                   study_or_trial=trial)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"cannot save artifact {filename!r}: {e}") from None
    except Exception as e:  # botocore's ClientError and friends: one line, no secrets
        if type(e).__module__.startswith(("botocore", "boto3")):
            raise ArtifactError(f"cannot save artifact {filename!r}: {e}") from None
        raise


def _safe_name(name: str) -> str:
    clean = Path(str(name).replace("\\", "/")).name
    if clean in ("", ".", ".."):
        raise ValueError(f"{name!r} is not a usable artifact file name")
    return clean


# --------------------------------------------------------------------------- list / download


@dataclass(frozen=True)
class ArtifactInfo:
    artifact_id: str
    filename: str
    mimetype: str


def trial_artifacts(trial: FrozenTrial) -> list[ArtifactInfo]:
    """The artifacts recorded on a trial (read from the trial itself: no storage call)."""
    out = []
    for key, raw in trial.system_attrs.items():
        if not key.startswith(ARTIFACT_ATTR_PREFIX):
            continue
        try:
            meta = json.loads(raw) if isinstance(raw, str) else raw
            out.append(ArtifactInfo(str(meta["artifact_id"]), str(meta["filename"]),
                                    str(meta.get("mimetype") or "application/octet-stream")))
        except (ValueError, KeyError, TypeError):
            logger.warning("trial #%d: unreadable artifact record %s", trial.number, key)
    return sorted(out, key=lambda a: (a.filename, a.artifact_id))


def download_trial(store: ArtifactStore, trial: FrozenTrial, dest: Path) -> list[Path]:
    """Copy every artifact of ``trial`` into ``dest`` (created; existing files replaced).
    A file name saved more than once gets the artifact id's first 8 characters appended."""
    infos = trial_artifacts(trial)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for info, filename in zip(infos, _unique_names(infos), strict=True):
        target = dest / filename
        tmp = target.with_name(f".{filename}.part")
        try:
            with store.open_reader(info.artifact_id) as reader, open(tmp, "wb") as out:
                shutil.copyfileobj(reader, out)
            os.replace(tmp, target)
        except Exception as e:  # noqa: BLE001 - any store/IO failure: no partial file, one line
            tmp.unlink(missing_ok=True)
            raise ArtifactError(f"trial #{trial.number}: cannot download artifact "
                                f"{info.filename!r} ({info.artifact_id}): "
                                f"{type(e).__name__}: {e}") from None
        written.append(target)
    return written


def _unique_names(infos: Iterable[ArtifactInfo]) -> list[str]:
    seen: set[str] = set()
    out = []
    for info in infos:
        name = _safe_name(info.filename)
        if name in seen:
            p = Path(name)
            name = f"{p.stem}-{info.artifact_id[:8]}{p.suffix}"
        seen.add(name)
        out.append(name)
    return out


__all__ = ["ArtifactInfo", "PrefixedStore", "cached_artifact_store", "default_artifact_dir",
           "describe", "download_trial", "open_artifact_store",
           "remove_artifacts", "s3_client",
           "trial_artifacts", "upload"]
