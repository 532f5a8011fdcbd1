"""A sweep's files off this machine, for ``sweeper delete``: what it keeps of them (and how to
remove them later) and, with ``--purge-artifacts``, removing them.

What is the sweep's own, and only that, is removed:

- its artifacts in an S3 store, each by the id its trial recorded (they share the store's
  ``[PREFIX/]`` with other sweeps' artifacts);
- its checkpoints, under its :func:`~sweeper.protocol.state_key` ``NAME-UID8``:
  ``[PREFIX/]checkpoints/NAME-UID8/`` in S3 (:mod:`trial_runner.checkpoints`) and
  ``MOUNT/checkpoints/NAME-UID8/`` on a Kubernetes checkpoint volume, removed where that volume
  is mounted on this machine (``--volume-dir``, or its own mount path when the sweep's
  directory is there).

Another sweep of the same name has another identity, hence another prefix; a sweep from before
identities keyed its checkpoints by its name alone (``checkpoints/NAME/``), a prefix it may
share with any study of that name, so those are never removed (the local ones neither).

Imports neither click nor kubernetes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sweeper.errors import ArtifactError
from sweeper.spec import ArtifactsSpec

#: Keys per DeleteObjects request (S3's limit).
_BATCH = 1000


@dataclass(frozen=True)
class RemoteState:
    """Where a sweep's remote files are (a description: nothing is looked at)."""

    #: The sweep's :func:`~sweeper.protocol.state_key`.
    state_key: str
    #: Keyed by the sweep's identity; False for a sweep from before identities (by name).
    own: bool
    #: The S3 store of its artifacts and checkpoint mirror; None: not S3.
    s3: ArtifactsSpec | None = None
    #: Its artifacts in that store.
    artifact_ids: tuple[str, ...] = ()
    #: The checkpoint volume: its name, its mount path in the pods and the checkpoint
    #: directory under it (``kubernetes.checkpoint_volume``); None: none.
    volume: tuple[str, str, str] | None = None

    @property
    def s3_root(self) -> str:
        assert self.s3 is not None
        prefix = self.s3.prefix.strip("/")
        return f"s3://{self.s3.bucket}/" + (f"{prefix}/" if prefix else "")

    def s3_key(self, name: str) -> str:
        assert self.s3 is not None
        prefix = self.s3.prefix.strip("/")
        return f"{prefix}/{name}" if prefix else name

    @property
    def checkpoint_prefix(self) -> str:
        """The sweep's checkpoint objects' key prefix (trailing slash: ``NAME-UID8x`` is not
        under it)."""
        return self.s3_key(f"checkpoints/{self.state_key}/")

    @property
    def volume_checkpoints(self) -> str | None:
        """The sweep's checkpoint directory on the volume, as the pods see it."""
        return None if self.volume is None else f"{self.volume[2]}/{self.state_key}"

    def local_volume_checkpoints(self, volume_dir: Path | None) -> Path | None:
        """That directory on this machine: under ``volume_dir`` (where the volume is mounted
        here), else at the pods' own path when it is there; None when it cannot be found."""
        if self.volume is None:
            return None
        _, mount, ckpt = self.volume
        relative = PurePosixPath(ckpt).relative_to(mount) / self.state_key
        if volume_dir is not None:
            return volume_dir / relative
        same = Path(mount) / relative
        return same if same.is_dir() else None


def remote_state(state_key: str, own: bool, artifacts: ArtifactsSpec,
                 artifact_ids: Sequence[str], volume: tuple[str, str, str] | None
                 ) -> RemoteState:
    return RemoteState(state_key, own, artifacts if artifacts.store == "s3" else None,
                       tuple(artifact_ids) if artifacts.store == "s3" else (), volume)


# --------------------------------------------------------------------------- what, in words


def purge_summary(state: RemoteState) -> str | None:
    """For the question before deleting: what ``--purge-artifacts`` removes."""
    parts = []
    if state.artifact_ids:
        parts.append(f"{len(state.artifact_ids)} artifact(s) in {state.s3_root}")
    if state.s3 is not None and state.own:
        parts.append(f"the checkpoints under {state.s3_root}checkpoints/{state.state_key}/")
    if state.volume is not None and state.own:
        parts.append(f"the checkpoints in {state.volume_checkpoints}/ on volume "
                     f"{state.volume[0]!r}")
    return " and ".join(parts) or None


def kept(state: RemoteState) -> list[str]:
    """Without ``--purge-artifacts``: what stays, and how to remove it (phrases of the one
    "kept ..." line)."""
    parts = []
    how = []
    if state.artifact_ids:
        parts.append(f"{len(state.artifact_ids)} artifact(s) in {state.s3_root}")
    if state.s3 is not None and state.own:
        where = f"{state.s3_root}checkpoints/{state.state_key}/"
        parts.append(f"the checkpoints under {where}")
        endpoint = f" --endpoint-url {state.s3.endpoint_url}" if state.s3.endpoint_url else ""
        how.append(f"aws s3 rm --recursive {where}{endpoint}")
    if state.volume is not None and state.own:
        parts.append(f"the checkpoints in {state.volume_checkpoints}/ on the cluster's volume "
                     f"{state.volume[0]!r}")
        how.append(f"rm -r {state.volume_checkpoints} where the volume is mounted")
    out = [f"{' and '.join(parts)} (no new sweep reads them; `sweeper delete "
           "--purge-artifacts` removes them with the sweep"
           + (f"; once the study is gone: {', '.join(how)}" if how else "") + ")"] \
        if parts else []
    return out + _old_layout(state)


def _old_layout(state: RemoteState) -> list[str]:
    """A sweep from before identities: its remote checkpoints are keyed by its name, which it
    may share with another study; they stay, whatever the flag."""
    if state.own:
        return []
    where = [f"{state.s3_root}checkpoints/{state.state_key}/"] if state.s3 else []
    where += [f"{state.volume_checkpoints}/ on the cluster's volume"] if state.volume else []
    return [f"the checkpoints under {' and '.join(where)} (a sweep from before identities: "
            "keyed by its name alone, they may be another study's of that name)"] \
        if where else []


# --------------------------------------------------------------------------- removing


def purge(state: RemoteState, volume_dir: Path | None) -> tuple[list[str], list[str]]:
    """Remove the sweep's own remote files: the lines saying what was removed, and what is
    kept (phrases of the one "kept ..." line). Raises ArtifactError (one line) if S3 refuses;
    S3 goes first, so a refusal leaves the volume's checkpoints (and the study) in place."""
    removed: list[str] = []
    left = _old_layout(state)
    if state.s3 is not None:
        removed += _purge_s3(state)
    local = state.local_volume_checkpoints(volume_dir) if state.own else None
    if local is not None and local.is_dir():
        try:
            shutil.rmtree(local)
        except OSError as e:
            raise ArtifactError(f"cannot remove the checkpoints {local}: {e.strerror}") \
                from None
        removed.append(f"removed the checkpoints {local} (volume {state.volume[0]!r})"
                       if state.volume else f"removed the checkpoints {local}")
    elif local is not None:
        removed.append(f"no checkpoints of the sweep in {local} (the volume mounted at "
                       f"{volume_dir})")
    elif state.volume is not None and state.own:
        left.append(f"the checkpoints in {state.volume_checkpoints}/ on the cluster's volume "
                    f"{state.volume[0]!r}: it is not mounted here (--volume-dir DIR says where "
                    "it is)")
    return removed, left


def _purge_s3(state: RemoteState) -> list[str]:
    assert state.s3 is not None
    from sweeper.artifacts import s3_client

    client = s3_client(state.s3.endpoint_url, state.s3.region)
    bucket = str(state.s3.bucket)
    out = []
    try:
        if state.artifact_ids:
            n = _delete(client, bucket, [state.s3_key(i) for i in state.artifact_ids])
            out.append(f"removed {n} artifact(s) from {state.s3_root}")
        if state.own:
            keys = list(_keys_under(client, bucket, state.checkpoint_prefix))
            n = _delete(client, bucket, keys)
            out.append(f"removed {n} checkpoint object(s) under "
                       f"s3://{bucket}/{state.checkpoint_prefix}")
    except ArtifactError:
        raise
    except Exception as e:  # botocore's errors: one line, no secrets in them
        if type(e).__module__.startswith(("botocore", "boto3")):
            raise ArtifactError(f"cannot remove the sweep's files from {state.s3_root}: "
                                f"{e}") from None
        raise
    return out


def _keys_under(client: Any, bucket: str, prefix: str) -> Iterator[str]:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", ()):
            yield obj["Key"]


def _delete(client: Any, bucket: str, keys: Sequence[str]) -> int:
    """Delete ``keys`` (absent ones too: S3's delete is idempotent), a thousand a request."""
    for start in range(0, len(keys), _BATCH):
        chunk = keys[start:start + _BATCH]
        response = client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
        errors = response.get("Errors") or []
        if errors:
            e = errors[0]
            raise ArtifactError(f"cannot remove s3://{bucket}/{e.get('Key')}: "
                                f"{e.get('Code')}: {e.get('Message')}"
                                + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    return len(keys)


__all__ = ["RemoteState", "kept", "purge", "purge_summary", "remote_state"]
