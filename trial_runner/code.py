"""The trial's code in a pod: the snapshot the backend names (``SWEEPER_CODE``, fetched from
``SWEEPER_CODE_STORE``) is fetched once per pod, its hash checked, unpacked into the pod's
``sweeper-code`` emptyDir, and the runner works there: the directory is the working
directory of the trial and first on ``sys.path``, so ``entrypoint`` modules import from it
and a ``command`` runs in it.

A pod that runs several indexes finds the snapshot unpacked (its marker names it) and
fetches nothing. Locally (no ``SWEEPER_CODE_STORE``) nothing is fetched: the code is on the
machine, and ``SWEEPER_CODE`` only names what every trial records.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from sweeper import protocol
from sweeper.code.snapshot import unpack, unpacked
from sweeper.code.stores import StoreKind, open_code_store
from sweeper.errors import CodeError
from sweeper.spec import SweepSpec
from sweeper.study.open import StudyStorage

logger = logging.getLogger(__name__)

STORE_KINDS = ("artifacts", "study")


def code_of(env: Mapping[str, str]) -> str | None:
    """The snapshot every trial of this runner records (None: no snapshot)."""
    return env.get(protocol.ENV_CODE) or None


def enter_code(env: Mapping[str, str], spec: SweepSpec, storage: StudyStorage, study_id: int,
               storage_url: str) -> Path | None:
    """Fetch, check and unpack the pod's snapshot unless it is there, then work in it; the
    directory, or None when the runner fetches no code. Raises CodeError (no retry fixes
    it: a missing or corrupted snapshot), ArtifactError or StorageError (a retry may)."""
    digest, kind = code_of(env), env.get(protocol.ENV_CODE_STORE)
    if digest is None or not kind:
        return None
    if kind not in STORE_KINDS:
        raise CodeError(f"{protocol.ENV_CODE_STORE}={kind!r}: expected one of "
                        f"{', '.join(STORE_KINDS)}")
    dest = Path(env.get(protocol.ENV_CODE_DIR) or protocol.CODE_MOUNT_PATH)
    if unpacked(dest) != digest:
        start = time.monotonic()
        store = open_code_store(spec, storage_url, storage, study_id, cast(StoreKind, kind))
        data = store.get(digest)
        n = unpack(data, digest, dest, store.location(digest))
        logger.info("code snapshot %s: %d entries, %.1f KiB from %s into %s in %.2fs", digest,
                    n, len(data) / 1024, store.location(digest), dest,
                    time.monotonic() - start)
    work_in(dest)
    return dest


def work_in(dest: Path) -> None:
    """``dest`` as the working directory and first on ``sys.path`` (and on ``PYTHONPATH``,
    for the processes a trial starts: torchrun's ranks, a command); the directory the runner
    started in stays importable (where the image keeps its own modules)."""
    here = os.getcwd()
    sys.path[:] = [here if p in ("", ".") else p for p in sys.path]
    if here not in sys.path:
        sys.path.append(here)
    os.chdir(dest)
    sys.path.insert(0, str(dest))
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(dest), *rest, here])
