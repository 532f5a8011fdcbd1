"""The dataset of a sweep (spec ``data:``), as the directory ``ctx.data_dir`` names.

- ``data.path``: a directory used as it is (on Kubernetes, inside a read-only volume; the pod's
  ``SWEEPER_DATA_DIR`` names it as mounted).
- ``data.s3``: every object under ``s3://bucket/prefix`` is downloaded into a cache directory
  (``$SWEEPER_DATA_CACHE``: the pod's scratch on Kubernetes; locally the user's cache
  directory), once: the first process to need it takes a file lock and downloads into a
  temporary directory that becomes the dataset only when complete; every other process (the
  other indexes a pod runs, the other local workers of a machine) waits for the lock and
  finds it done. Progress goes to the log.

A bucket or prefix that does not exist is a :class:`DataError` that no retry can fix.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from sweeper import protocol
from sweeper.errors import SweeperError
from sweeper.spec import DataSpec

logger = logging.getLogger(__name__)

_PROGRESS_EVERY_S = 2.0
_lock = threading.Lock()
_ready: dict[DataSpec, Path] = {}


class DataError(SweeperError):
    """The dataset cannot be made available. ``retryable``: False when a retry cannot help
    (no such bucket or prefix, a missing directory)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def data_dir(spec: DataSpec, env: Mapping[str, str] | None = None) -> Path | None:
    """The dataset's directory, synced first if it is on S3 (once per process, and once per
    cache directory across processes). None when the spec has no ``data:``."""
    if not spec.configured:
        return None
    env = os.environ if env is None else env
    if spec.path is not None:
        # A relative path is the spec's directory's (the local backend passes it on).
        path = Path(env.get(protocol.ENV_DATA_DIR)
                    or Path(env.get(protocol.ENV_SPEC_DIR) or ".") / spec.path)
        if not path.is_dir():
            raise DataError(f"data: {spec.path} is not a directory here ({path})")
        return path
    with _lock:
        if spec not in _ready:
            _ready[spec] = sync(spec, cache_root(env))
        return _ready[spec]


def cache_root(env: Mapping[str, str]) -> Path:
    configured = env.get(protocol.ENV_DATA_CACHE)
    if configured:
        return Path(configured)
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sweeper" / "data"


def cache_key(spec: DataSpec) -> str:
    """A directory name per source: readable, and unique per endpoint + bucket + prefix."""
    digest = hashlib.sha256(f"{spec.endpoint_url}|{spec.url}".encode()).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{spec.bucket}-{spec.prefix}").strip("-")
    return f"{readable[:80]}-{digest}"


def sync(spec: DataSpec, root: Path) -> Path:
    """Download ``spec``'s prefix into ``root`` unless a complete copy is there already."""
    key = cache_key(spec)
    target, done = root / key, root / f"{key}.complete"
    if done.exists():
        logger.info("data: %s is in %s already", spec.url, target)
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process downloading it: wait for it
        if done.exists():
            logger.info("data: %s is in %s already (synced by another process)", spec.url,
                        target)
            return target
        _download(spec, target)
        done.write_text(json.dumps({"source": spec.url, "endpoint_url": spec.endpoint_url}))
    return target


def _download(spec: DataSpec, target: Path) -> None:
    from sweeper.artifacts import s3_client

    client = s3_client(spec.endpoint_url, spec.region)
    objects = _listing(client, spec)
    total = sum(size for _, size in objects)
    logger.info("data: downloading %s: %d files, %s", spec.url, len(objects), _size(total))
    part = target.with_name(f".{target.name}.part")
    shutil.rmtree(part, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    started = last = time.monotonic()
    got = 0
    try:
        for i, (key, size) in enumerate(objects, 1):
            dest = part / _relative(spec.prefix, key)
            dest.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(spec.bucket, key, str(dest))
            got += size
            if time.monotonic() - last >= _PROGRESS_EVERY_S or i == len(objects):
                last = time.monotonic()
                logger.info("data: %d/%d files, %s/%s", i, len(objects), _size(got),
                            _size(total))
    except Exception as e:  # noqa: BLE001 - S3 or disk: one line; a retry may succeed
        shutil.rmtree(part, ignore_errors=True)
        raise DataError(f"data: cannot download {spec.url}: {type(e).__name__}: {e}",
                        retryable=True) from None
    os.replace(part, target)
    logger.info("data: downloaded %d files (%s) from %s into %s in %.1fs", len(objects),
                _size(total), spec.url, target, time.monotonic() - started)


def _listing(client: Any, spec: DataSpec) -> list[tuple[str, int]]:
    """(key, size) of every object under the prefix; one line when there is nothing."""
    prefix = f"{spec.prefix}/" if spec.prefix else ""
    out: list[tuple[str, int]] = []
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=spec.bucket,
                                                                     Prefix=prefix):
            out += [(o["Key"], int(o["Size"])) for o in page.get("Contents") or []
                    if not o["Key"].endswith("/")]
    except Exception as e:  # noqa: BLE001 - botocore's ClientError and connection errors
        code = getattr(e, "response", {}).get("Error", {}).get("Code")
        if code == "NoSuchBucket":
            raise DataError(f"data: {spec.url}: no such bucket {spec.bucket!r}") from None
        raise DataError(f"data: cannot list {spec.url}: {type(e).__name__}: {e}",
                        retryable=True) from None
    if not out:
        raise DataError(f"data: {spec.url}: no objects under this prefix")
    return out


def _relative(prefix: str, key: str) -> PurePosixPath:
    rel = PurePosixPath(key[len(prefix):].lstrip("/") if prefix else key)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise DataError(f"data: refusing object key {key!r} (it would land outside the "
                        "dataset directory)")
    return rel


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
