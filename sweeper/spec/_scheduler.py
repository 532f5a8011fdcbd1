"""The ``scheduler:`` section: promotion ASHA (a trial pauses at a rung with its checkpoint
and is resumed when it ranks in the top 1/eta there), Population Based Training (``pbt``),
and where their checkpoints must live."""

from __future__ import annotations

from typing import Any

from sweeper.errors import SpecError
from sweeper.spec.checks import Checks
from sweeper.spec.model import (
    SCHEDULER_MODES,
    SCHEDULER_TYPES,
    Objective,
    Pruner,
    SchedulerSpec,
    SweepSpec,
)
from sweeper.spec.pbt_model import PBT_KEYS, PbtOptions
from sweeper.spec.yamldoc import Path_

ASHA_KEYS = ("type", "mode", "min_resource", "max_resource", "reduction_factor")
SCHEDULER_KEYS = (*ASHA_KEYS, *PBT_KEYS)

_STOPPING = ("mode {mode!r}: a scheduler pauses and promotes trials (mode: promotion); for "
             "ASHA that stops trials instead, use pruner: {{type: successive_halving}} (or "
             "hyperband) without a scheduler")


def scheduler_spec(v: Checks, value: Any, path: Path_, pruner: Pruner,
                   objectives: tuple[Objective, ...], nodes: int = 1, *,
                   population: tuple[int, int] | None = None) -> SchedulerSpec:
    """``population``: (trials, parallelism), which PBT trains at the same time."""
    if value is None:
        return SchedulerSpec()
    m = v.mapping(value, path, SCHEDULER_KEYS)
    kind = v.choice(v.require(m, "type", path), (*path, "type"), SCHEDULER_TYPES)
    own = ASHA_KEYS if kind == "asha" else ("type", "max_resource", *PBT_KEYS)
    for key in m:
        if key not in own:
            raise v.err((*path, key), f"not a key of type {kind} (its keys: {', '.join(own)})")
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
    if kind == "pbt":
        return _pbt(v, m, path, population)
    low = v.integer(v.require(m, "min_resource", path), (*path, "min_resource"), 1)
    high = v.integer(v.require(m, "max_resource", path), (*path, "max_resource"), 1)
    if low >= high:
        raise v.err((*path, "min_resource"), f"must be below max_resource ({high}), got {low}")
    eta = v.integer(m.get("reduction_factor", 3), (*path, "reduction_factor"), 2)
    return SchedulerSpec(type=kind, mode=mode, min_resource=low, max_resource=high,
                         reduction_factor=eta)


def _pbt(v: Checks, m: dict[str, Any], path: Path_, population: tuple[int, int] | None
         ) -> SchedulerSpec:
    trials, parallelism = population or (0, 0)
    if parallelism < trials:
        raise v.err(path, f"PBT trains its population (the sweep's {trials} trials) at the "
                          f"same time: set parallelism to at least {trials}, got {parallelism}")
    high = v.integer(v.require(m, "max_resource", path), (*path, "max_resource"), 1)
    interval = v.integer(m.get("perturbation_interval", 4), (*path, "perturbation_interval"), 1)
    if interval > high:
        raise v.err((*path, "perturbation_interval"),
                    f"must be at most max_resource ({high}), got {interval}")
    quantile = _fraction(v, m, "quantile_fraction", 0.25, path, high=0.5)
    resample = _fraction(v, m, "resample_probability", 0.25, path, high=1.0)
    factors_path = (*path, "perturbation_factors")
    raw = m.get("perturbation_factors", [0.8, 1.2])
    if not isinstance(raw, list) or len(raw) != 2:
        raise v.err(factors_path, "expected two numbers, e.g. [0.8, 1.2]")
    factors = (float(v.number(raw[0], factors_path)), float(v.number(raw[1], factors_path)))
    if min(factors) <= 0:
        raise v.err(factors_path, f"must be positive, got {raw}")
    return SchedulerSpec(type="pbt", max_resource=high, pbt=PbtOptions(
        perturbation_interval=interval, quantile_fraction=quantile,
        resample_probability=resample, perturbation_factors=factors))


def _fraction(v: Checks, m: dict[str, Any], key: str, default: float, path: Path_, *,
              high: float) -> float:
    value = float(v.number(m.get(key, default), (*path, key)))
    if not 0.0 <= value <= high:
        raise v.err((*path, key), f"must be between 0 and {high}, got {value}")
    return value


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
