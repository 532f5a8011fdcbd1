"""What a code snapshot adds to a pod's start-up (no targets): fetching, checking and unpacking
a snapshot of ``snap_mb`` MiB (incompressible files, so the archive is that size) from the
study in PostgreSQL (its parts, one query each) and from a filesystem artifact store, against
nothing (a pod whose image holds the code), measured next to the runner's own start-up (the
interpreter and its imports) on the same machine. Packing it (what ``sweeper run`` does once
per launch) is reported too."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Row, fresh_database, median, plain_env, undisturbed


def _tree(root: Path, megabytes: int) -> None:
    """``megabytes`` MiB of random bytes in 64 KiB files across a few packages."""
    rng = random.Random(0)
    for i in range(megabytes * 16):
        pkg = root / f"pkg{i % 8}"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / f"m{i}.bin").write_bytes(rng.randbytes(64 * 1024))
    (root / "train.py").write_text("def main(ctx):\n    return 0.0\n")


def _fetch_unpack(store: Any, digest: str, dest: Path) -> float:
    from sweeper.code.snapshot import unpack

    shutil.rmtree(dest, ignore_errors=True)
    t0 = time.perf_counter()
    unpack(store.get(digest), digest, dest, store.location(digest))
    return time.perf_counter() - t0


def measure(megabytes: int, repeats: int) -> dict[str, Any]:
    import optuna
    from optuna.artifacts import FileSystemArtifactStore

    from sweeper.code.snapshot import pack
    from sweeper.code.stores import ArtifactCodeStore, StudyCodeStore
    from sweeper.study.sql import open_sql_store

    with tempfile.TemporaryDirectory(prefix="sweeper-bench-snap-") as tmp:
        base = Path(tmp)
        _tree(base / "code", megabytes)
        t0 = time.perf_counter()
        snap = pack(base / "code")
        pack_s = time.perf_counter() - t0
        (base / "store").mkdir()
        fs = ArtifactCodeStore(FileSystemArtifactStore(base / "store"), f"{base}/store/")
        fs.put(snap)
        fs_s = [_fetch_unpack(fs, snap.digest, base / "out") for _ in range(repeats)]
        with fresh_database("snapshots") as (_, url):
            storage = open_sql_store(url)
            optuna.create_study(storage=storage, study_name="bench-snapshot")
            study_id = storage.get_study_id_from_name("bench-snapshot")
            db = StudyCodeStore(storage, study_id, "study bench-snapshot")
            t0 = time.perf_counter()
            db.put(snap)
            put_db_s = time.perf_counter() - t0
            db_s = [_fetch_unpack(db, snap.digest, base / "out") for _ in range(repeats)]
            storage.close()
    env = dict(plain_env(), SWEEPER_LOG_LEVEL="WARNING")
    startup = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import trial_runner.main"], cwd=REPO, env=env,
                       check=True)
        startup.append(time.perf_counter() - t0)
    return {"megabytes": megabytes, "archive_bytes": snap.size, "files": snap.files,
            "pack_s": pack_s, "put_db_s": put_db_s, "fs_s": fs_s, "db_s": db_s,
            "runner_startup_s": startup}


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    mb, repeats = sizes.get("snap_mb", 10), sizes.get("snap_repeats", 3)
    log(f"snapshots: fetch, verify and unpack a {mb} MiB code snapshot")
    r = undisturbed(partial(measure, mb, repeats), "code snapshot", log)
    start, fs, db = median(r["runner_startup_s"]), median(r["fs_s"]), median(r["db_s"])
    size = f"{r['archive_bytes'] / 2**20:.1f} MiB, {r['files']} files"
    rows = [
        Row(f"pod start-up: fetch + verify + unpack a code snapshot ({size})",
            f"filesystem store {fs:.2f} s ({fs / start:.2f}x the runner's start-up), database "
            f"{db:.2f} s ({db / start:.2f}x); none (code in the image) 0 s; runner start-up "
            f"{start:.2f} s", "-", "INFO",
            {"fs_s": fs, "db_s": db, "runner_startup_s": start}),
        Row(f"sweeper run: pack the code snapshot ({size})",
            f"pack {r['pack_s']:.2f} s, store in the database {r['put_db_s']:.2f} s", "-",
            "INFO", {"pack_s": r["pack_s"], "put_db_s": r["put_db_s"]}),
    ]
    return rows, r
