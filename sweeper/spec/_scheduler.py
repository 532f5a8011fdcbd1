"""The ``scheduler:`` section: promotion ASHA (a trial pauses at a rung with its checkpoint
and is resumed when it ranks in the top 1/eta there), and where its checkpoints must live."""

from __future__ import annotations

from typing import Any

from sweeper.errors import SpecError
from sweeper.spec._primitives import Checks
from sweeper.spec._yaml import Path_
from sweeper.spec.model import (
    SCHEDULER_MODES,
    SCHEDULER_TYPES,
    Objective,
    Pruner,
    SchedulerSpec,
    SweepSpec,
)

SCHEDULER_KEYS = ("type", "mode", "min_resource", "max_resource", "reduction_factor")

_STOPPING = ("mode {mode!r}: a scheduler pauses and promotes trials (mode: promotion); for "
             "ASHA that stops trials instead, use pruner: {{type: successive_halving}} (or "
             "hyperband) without a scheduler")


def scheduler_spec(v: Checks, value: Any, path: Path_, pruner: Pruner,
                   objectives: tuple[Objective, ...], nodes: int = 1) -> SchedulerSpec:
    if value is None:
        return SchedulerSpec()
    m = v.mapping(value, path, SCHEDULER_KEYS)
    kind = v.choice(v.require(m, "type", path), (*path, "type"), SCHEDULER_TYPES)
    mode = m.get("mode", "promotion")
    if mode not in SCHEDULER_MODES:
        if not isinstance(mode, str):
            raise v.err((*path, "mode"), f"must be one of {', '.join(SCHEDULER_MODES)}")
        raise v.err((*path, "mode"), _STOPPING.format(mode=mode))
    if pruner.type != "none":
        raise v.err(path, f"a scheduler decides which trials go on; leave out pruner "
                          f"(type {pruner.type}) or the scheduler")
    if len(objectives) > 1:
        raise v.err(path, "a scheduler ranks trials by one objective; a multi-objective sweep "
                          "cannot use one")
    if nodes > 1:
        raise v.err(path, "a multi-node trial (trial.nodes > 1) cannot be paused and promoted "
                          "yet; leave out the scheduler or run one node per trial")
    low = v.integer(v.require(m, "min_resource", path), (*path, "min_resource"), 1)
    high = v.integer(v.require(m, "max_resource", path), (*path, "max_resource"), 1)
    if low >= high:
        raise v.err((*path, "min_resource"), f"must be below max_resource ({high}), got {low}")
    eta = v.integer(m.get("reduction_factor", 3), (*path, "reduction_factor"), 2)
    return SchedulerSpec(type=kind, mode=mode, min_resource=low, max_resource=high,
                         reduction_factor=eta)


def durable_checkpoints_error(spec: SweepSpec) -> SpecError | None:
    """Why a paused trial of this sweep could not be resumed by another pod, on Kubernetes
    (None: it could, or the sweep pauses nothing). A pod's own scratch directory is gone when
    the pod exits; only an S3 artifact store or ``kubernetes.checkpoint_volume`` outlives it.
    The local backend's checkpoint directory is durable on its machine."""
    if not spec.scheduler.enabled or spec.artifacts.store == "s3" \
            or spec.kubernetes.checkpoint_volume:
        return None
    return SpecError("a scheduler pauses trials and resumes them in another pod from their "
                     "checkpoint, which must outlive the pod: set artifacts.store: s3 or "
                     "kubernetes.checkpoint_volume", source=spec.source, field="scheduler")
