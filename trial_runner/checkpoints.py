"""Checkpoints that survive the pod: a durable copy of each index's latest checkpoint in the
sweep's S3 artifact store, so a retry in a new pod on another node resumes where the killed
attempt stopped.

``ctx.save_checkpoint`` writes the checkpoint into the local checkpoint directory (atomically:
a temporary file renamed over the old one), then :meth:`CheckpointMirror.push` uploads it:
first the checkpoint, then a small JSON record naming its step. An S3 PUT replaces an object
whole, so a reader never sees half a checkpoint. A new attempt of the index calls
:meth:`CheckpointMirror.pull` before the user's code runs: the latest checkpoint of the previous
attempts lands in the local directory, where ``ctx.load_checkpoint()`` finds it.

Objects: ``[PREFIX/]checkpoints/SWEEP-UID8/index-I/checkpoint.pt`` and ``checkpoint.json``.
Without S3 artifacts nothing is mirrored: the local directory is the checkpoint (durable when
it is a volume that outlives the pod, ``kubernetes.checkpoint_volume``).
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeper.artifacts import cached_artifact_store, describe
from sweeper.errors import ArtifactError
from sweeper.spec import SweepSpec

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"
META_FILE = "checkpoint.json"


class CheckpointMirror:
    """The durable copy of one index's checkpoint, in an artifact store (S3)."""

    def __init__(self, store_factory: Callable[[], Any], key_prefix: str, where: str) -> None:
        self._store_factory = store_factory
        self.key_prefix = key_prefix
        #: For messages: ``s3://bucket/prefix/checkpoints/SWEEP/index-I``.
        self.where = where

    @classmethod
    def for_index(cls, spec: SweepSpec, storage_url: str, index: int, state_key: str
                  ) -> CheckpointMirror | None:
        """The mirror of ``index``'s checkpoint, or None when the sweep has no S3 store.
        ``state_key`` is the sweep's (:func:`sweeper.protocol.state_key`): a new sweep under
        an old name never finds the old one's checkpoints."""
        if spec.artifacts.store != "s3":
            return None
        key = f"checkpoints/{state_key}/index-{index}"
        where = describe(spec.artifacts, storage_url).split(" at ", 1)[0] + key
        return cls(lambda: cached_artifact_store(spec.artifacts, storage_url), key, where)

    def _key(self, name: str) -> str:
        return f"{self.key_prefix}/{name}"

    def push(self, local_dir: Path) -> None:
        """Upload the local checkpoint, then its record (a reader follows the record)."""
        store = self._store_factory()
        try:
            with open(local_dir / CHECKPOINT_FILE, "rb") as f:
                store.write(self._key(CHECKPOINT_FILE), f)
            meta = (local_dir / META_FILE).read_bytes()
            store.write(self._key(META_FILE), io.BytesIO(meta))
        except OSError as e:
            raise ArtifactError(f"cannot save the checkpoint to {self.where}: {e}") from None
        except Exception as e:  # botocore's errors: one line, no secrets in them
            if type(e).__module__.startswith(("botocore", "boto3")):
                raise ArtifactError(f"cannot save the checkpoint to {self.where}: {e}") \
                    from None
            raise

    def pull(self, local_dir: Path) -> dict[str, Any] | None:
        """Make the latest durable checkpoint the local one; its record, or None if there is
        none. Nothing is downloaded when the local copy is that checkpoint already (a retry in
        the same pod)."""
        from optuna.artifacts.exceptions import ArtifactNotFound

        store = self._store_factory()
        try:
            with store.open_reader(self._key(META_FILE)) as reader:
                meta = json.loads(reader.read())
        except ArtifactNotFound:
            return None
        except Exception as e:  # noqa: BLE001 - any store failure fails this attempt, one line
            raise ArtifactError(f"cannot read the checkpoint at {self.where}: "
                                f"{type(e).__name__}: {e}") from None
        local_meta = local_dir / META_FILE
        if local_meta.exists() and (local_dir / CHECKPOINT_FILE).exists():
            try:
                if json.loads(local_meta.read_text()) == meta:
                    return dict(meta)
            except ValueError:
                pass
        local_dir.mkdir(parents=True, exist_ok=True)
        tmp = local_dir / f".{CHECKPOINT_FILE}.part{os.getpid()}"
        try:
            with store.open_reader(self._key(CHECKPOINT_FILE)) as reader, open(tmp, "wb") as f:
                shutil.copyfileobj(reader, f)
            os.replace(tmp, local_dir / CHECKPOINT_FILE)
        except Exception as e:  # noqa: BLE001 - no partial file, one line, the attempt fails
            tmp.unlink(missing_ok=True)
            raise ArtifactError(f"cannot download the checkpoint from {self.where}: "
                                f"{type(e).__name__}: {e}") from None
        write_atomically(local_meta, json.dumps(meta).encode())
        return dict(meta)


def read_checkpoint(path: Path) -> Any:
    """The payload ``ctx.save_checkpoint`` wrote at ``path`` (``{"state", "step", ...}``): a
    torch file, or a pickle where torch is missing or could not write the state."""
    try:
        import torch

        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - no torch, or not a torch file: saved by pickle
        with open(path, "rb") as f:
            return pickle.load(f)


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.part{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
