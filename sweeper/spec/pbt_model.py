"""The options of ``scheduler: {type: pbt}`` (Population Based Training), apart from
:class:`sweeper.spec.model.SchedulerSpec` so that module stays small. Defaults are Ray Tune's
``PopulationBasedTraining``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PBT_KEYS = ("perturbation_interval", "quantile_fraction", "resample_probability",
            "perturbation_factors")


@dataclass(frozen=True)
class PbtOptions:
    """Every ``perturbation_interval`` steps a member in the bottom ``quantile_fraction`` copies
    the checkpoint of one in the top and perturbs its params (times one of
    ``perturbation_factors``; resampled with ``resample_probability``)."""

    perturbation_interval: int = 4
    quantile_fraction: float = 0.25
    resample_probability: float = 0.25
    perturbation_factors: tuple[float, float] = (0.8, 1.2)

    def to_dict(self) -> dict[str, Any]:
        return {"perturbation_interval": self.perturbation_interval,
                "quantile_fraction": self.quantile_fraction,
                "resample_probability": self.resample_probability,
                "perturbation_factors": list(self.perturbation_factors)}

    def decides_at(self, step: int, max_resource: int) -> bool:
        """Whether a report of ``step`` (0-based) ends an interval: after steps
        ``0..interval-1``, ``..2*interval-1`` and so on, below ``max_resource``."""
        return step < max_resource and (step + 1) % self.perturbation_interval == 0
