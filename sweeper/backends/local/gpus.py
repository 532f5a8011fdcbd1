"""GPU slots for local workers: which GPUs this machine shows, one ``CUDA_VISIBLE_DEVICES``
value per worker, and the refusal to run a GPU sweep silently on the CPU."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence

from sweeper.errors import BackendError, SpecError
from sweeper.spec import SweepSpec

logger = logging.getLogger(__name__)


def detect_gpus(env: dict[str, str] | None = None) -> list[str]:
    """GPU ids to hand out: ``CUDA_VISIBLE_DEVICES`` if set, else what nvidia-smi lists."""
    env = dict(os.environ) if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [g.strip() for g in visible.split(",") if g.strip()]
        # CUDA stops at the first invalid id: "0,-1,1" exposes GPU 0 only.
        return ids[:ids.index("-1")] if "-1" in ids else ids
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def check_gpus(spec: SweepSpec, *, allow_cpu: bool,
               env: dict[str, str] | None = None) -> str | None:
    """Refuse a spec that asks for GPUs on a machine that shows none (a silent CPU run of a GPU
    sweep wastes hours); with ``allow_cpu`` it runs on the CPU and this returns the warning."""
    want = spec.trial.resources.gpu
    if want <= 0 or detect_gpus(env):
        return None
    if not allow_cpu:
        raise SpecError(f"asks for {want} GPU(s) per trial, but no GPU is visible here "
                        "(CUDA_VISIBLE_DEVICES, nvidia-smi); pass --allow-cpu to run on the "
                        "CPU anyway, or set trial.resources.gpu: 0", source=spec.source,
                        field="trial.resources.gpu")
    return (f"{spec.source or spec.name}: trial.resources.gpu is {want} but no GPU is "
            "visible; running on the CPU (--allow-cpu)")


def gpu_slots(gpus: Sequence[str], per_trial: float, parallelism: int) -> list[str | None]:
    """One CUDA_VISIBLE_DEVICES value per worker slot (None: leave it alone, no GPUs).
    ``per_trial`` GPUs per worker; a fraction 1/k packs k workers onto each GPU."""
    if not gpus:
        return [None] * parallelism
    if 0 < per_trial < 1:
        share = round(1 / per_trial)
        groups = [g for g in gpus for _ in range(share)]  # GPU 0, 0, 1, 1, ... for 0.5
    else:
        per = max(1, int(per_trial))
        groups = [",".join(gpus[i:i + per]) for i in range(0, len(gpus) - per + 1, per)]
        if not groups:
            raise BackendError(f"each trial asks for {per} GPUs but only {len(gpus)} are "
                               "visible")
    if parallelism > len(groups):
        logger.warning("parallelism %d > %d GPU slots: workers share GPUs", parallelism,
                       len(groups))
    return [groups[k % len(groups)] for k in range(parallelism)]
