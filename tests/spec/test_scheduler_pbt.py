"""``scheduler: {type: pbt}``: its options, defaults, record and hash (the bad inputs are in
tests/data/bad_specs/pbt_*.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

from sweeper.errors import SpecError
from sweeper.spec import durable_checkpoints_error, load_stored
from sweeper.spec.pbt_model import PbtOptions
from tests.support.helpers import make_spec

PBT = {"type": "pbt", "max_resource": 20}


def _spec(scheduler: dict[str, Any], **kw: Any) -> Any:
    return make_spec(method="random", trials=4, parallelism=4, scheduler=scheduler, **kw)


def test_defaults_are_ray_tunes_and_the_record_round_trips() -> None:
    spec = _spec(PBT)
    assert spec.scheduler.pbt == PbtOptions(4, 0.25, 0.25, (0.8, 1.2))
    assert spec.scheduler.rung_steps == ()  # nothing of ASHA's rungs
    assert spec.to_dict()["scheduler"] == {
        "type": "pbt", "max_resource": 20, "perturbation_interval": 4,
        "quantile_fraction": 0.25, "resample_probability": 0.25,
        "perturbation_factors": [0.8, 1.2]}
    assert load_stored(spec.to_dict()) == spec
    custom = _spec({**PBT, "perturbation_interval": 5, "quantile_fraction": 0.5,
                    "resample_probability": 0.0, "perturbation_factors": [0.5, 2]})
    assert custom.scheduler.pbt == PbtOptions(5, 0.5, 0.0, (0.5, 2.0))
    assert load_stored(custom.to_dict()) == custom
    assert len({spec.spec_hash, custom.spec_hash, _spec(None).spec_hash}) == 3


def test_an_asha_record_is_as_before() -> None:
    asha = make_spec(scheduler={"type": "asha", "min_resource": 1, "max_resource": 27})
    assert set(asha.to_dict()["scheduler"]) == {"type", "mode", "min_resource", "max_resource",
                                                "reduction_factor"}


@pytest.mark.parametrize("step, decides", [(2, False), (3, True), (4, False), (7, True),
                                           (19, True), (20, False), (23, False)])
def test_an_interval_ends_after_every_perturbation_interval_steps(step: int,
                                                                  decides: bool) -> None:
    # steps are 0-based, 0..3 the first interval; a member completes at max_resource (20)
    assert PbtOptions().decides_at(step, 20) is decides


@pytest.mark.parametrize("over, field", [
    ({"perturbation_interval": 0}, "scheduler.perturbation_interval"),
    ({"perturbation_interval": 21}, "scheduler.perturbation_interval"),
    ({"resample_probability": 1.5}, "scheduler.resample_probability"),
    ({"perturbation_factors": [0.8]}, "scheduler.perturbation_factors"),
    ({"perturbation_factors": [0, 1.2]}, "scheduler.perturbation_factors"),
    ({"max_resource": None}, "scheduler"),
])
def test_bad_options_name_their_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        _spec({**PBT, **over})
    assert e.value.field == field


def test_pbt_needs_durable_checkpoints_on_kubernetes() -> None:
    assert durable_checkpoints_error(_spec(PBT)) is not None
    assert durable_checkpoints_error(_spec(PBT, artifacts={"store": "s3",
                                                           "bucket": "ckpts"})) is None
