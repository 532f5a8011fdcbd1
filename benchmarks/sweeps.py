"""Running a sweep through sweeper's library exactly as ``sweeper run`` does: open the storage,
create (or resume) the study with its plan, list unfinished indexes, and hand them to the local
backend (long-lived worker processes) with the CLI's progress ticker polling the study."""

from __future__ import annotations

import io
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import Disturbed


def spec_dict(name: str, *, method: str, trials: int | None, parallelism: int,
              entrypoint: str, parameters: dict[str, Any], fixed: dict[str, Any] | None = None,
              seed: int = 0, sampler: dict[str, Any] | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name, "method": method, "parallelism": parallelism, "seed": seed,
        "objective": {"metric": "loss", "direction": "minimize"},
        "trial": {"entrypoint": entrypoint, "fixed": dict(fixed or {}), "retries": 0},
        "parameters": parameters,
    }
    if trials is not None:
        d["trials"] = trials
    if sampler:
        d["sampler"] = sampler
    return d


def sleep_spec(name: str, n: int, duration: float, parallelism: int,
               method: str = "random") -> dict[str, Any]:
    """N trials of the built-in fixed-duration ``sleep`` objective over two float parameters."""
    return spec_dict(name, method=method, trials=n, parallelism=parallelism,
                     entrypoint="trial_runner.examples.synthetic:sleep",
                     fixed={"duration": duration},
                     parameters={"x1": {"type": "float", "low": -5.0, "high": 5.0},
                                 "x2": {"type": "float", "low": -5.0, "high": 5.0}})


@dataclass
class SweepRun:
    wall_s: float
    counts: dict[str, int]
    finished: int
    failed: int
    workers_started: int
    #: seconds from the start: backend called, each worker ready, workers being stopped, done
    phases: dict[str, Any]


def run_sweep(url: str, spec: dict[str, Any], log_root: Path | None = None,
              max_starting: int | None = None, proxy: bool | None = False) -> SweepRun:
    """Create the sweep and run it on the local backend; the wall time is measured from the
    call (storage not yet open) until every worker has exited. ``max_starting``: the backend's
    setting (default: one worker starting per core). ``proxy``: the backend's (default: off,
    the direct path; True: the workers go through an in-process storage proxy)."""
    from sweeper.backends.local.backend import LocalBackend
    from sweeper.backends.local.run import LocalRun
    from sweeper.report import Progress
    from sweeper.spec import parse_spec_dict
    from sweeper.study import create_or_resume, indexes_to_run, open_storage

    parsed = parse_spec_dict(spec, source="<benchmark>")
    with tempfile.TemporaryDirectory(prefix="sweeper-bench-", dir=log_root) as tmp:
        t0 = time.perf_counter()
        storage = open_storage(url)
        sweep, created = create_or_resume(storage, parsed)
        todo = indexes_to_run(sweep, created=created)
        progress = Progress(sweep, stream=io.StringIO())
        phases: dict[str, Any] = {"backend_s": time.perf_counter() - t0, "ready_s": []}

        class Timed(LocalRun):
            """The local backend's run, noting when workers become ready and when stopping
            starts (for the figures only; it runs exactly the same code)."""

            def read(self, w: Any, *, reaping: bool = False) -> None:
                was = w.ready
                try:
                    super().read(w, reaping=reaping)
                finally:
                    if w.ready and not was:
                        phases["ready_s"].append(time.perf_counter() - t0)

            def stop_all(self) -> None:
                phases.setdefault("stop_s", time.perf_counter() - t0)
                super().stop_all()

        backend = LocalBackend(Path(tmp) / parsed.name, max_starting=max_starting, proxy=proxy)
        backend.run_type = Timed
        result = backend.run(sweep, todo, storage_url=url, tick=progress.tick)
        phases["workers"] = "forked" if backend.forked else "exec"
        progress.close()
        wall = time.perf_counter() - t0
        phases["end_s"] = wall
        counts = storage.state_counts(sweep.study_id)
        storage.close()
        started = len(list((Path(tmp) / parsed.name).glob("worker-*.log")))
    if result.failed or result.interrupted or counts.get("FAIL"):
        raise Disturbed(f"sweep {parsed.name} did not finish cleanly: {len(result.failed)} "
                        f"failed index(es), trials by state {counts}")
    return SweepRun(wall, counts, len(result.finished), len(result.failed), started, phases)
