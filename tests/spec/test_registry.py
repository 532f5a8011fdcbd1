"""The pruner and sampler registry: each name builds the right Optuna class with the spec's
options and sweeper's defaults, a bad option is a SpecError naming its field, and the validator
and the trial runner agree because both go through the registry."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from sweeper.errors import SpecError
from sweeper.space import index_seed
from sweeper.spec import PRUNERS, registry
from tests.support.helpers import make_spec
from trial_runner import runner


def test_pruner_names_are_pinned() -> None:
    # Their order is part of the "must be one of ..." message that tests/data/bad_specs pins.
    assert PRUNERS == ("none", "median", "percentile", "hyperband", "successive_halving")


@pytest.mark.parametrize(("options", "cls", "attr", "value"), [
    ({"type": "none"}, optuna.pruners.NopPruner, None, None),
    ({"type": "median", "n_startup_trials": 3, "n_warmup_steps": 2},
     optuna.pruners.MedianPruner, "_n_startup_trials", 3),
    ({"type": "percentile", "percentile": 25.0, "n_warmup_steps": 2},
     optuna.pruners.PercentilePruner, "_percentile", 25.0),
    ({"type": "hyperband", "min_resource": 2, "max_resource": 30, "reduction_factor": 3},
     optuna.pruners.HyperbandPruner, "_max_resource", 30),
    ({"type": "successive_halving", "min_resource": 2, "reduction_factor": 4},
     optuna.pruners.SuccessiveHalvingPruner, "_reduction_factor", 4),
], ids=lambda x: x["type"] if isinstance(x, dict) else None)
def test_each_pruner_name_builds_its_class_with_the_options(options: dict[str, Any], cls: type,
                                                            attr: str | None, value: Any) -> None:
    spec = make_spec(pruner=options)
    assert registry.pruner_class(options["type"]) is cls
    pruner = registry.make_pruner(spec)
    assert type(pruner) is cls
    if attr is not None:
        assert getattr(pruner, attr) == value
    assert type(runner.make_pruner(spec)) is cls


def test_every_pruner_name_has_a_class() -> None:
    for name in PRUNERS:
        assert issubclass(registry.pruner_class(name), optuna.pruners.BasePruner)


@pytest.mark.parametrize(("method", "cls"), [("grid", optuna.samplers.RandomSampler),
                                             ("random", optuna.samplers.RandomSampler),
                                             ("tpe", optuna.samplers.TPESampler)])
def test_each_method_samples_with_its_class(method: str, cls: type) -> None:
    spec = make_spec(method=method)
    assert registry.sampler_class(method) is cls
    assert type(registry.make_sampler(spec, 0)) is cls


def test_tpe_gets_sweepers_defaults_the_specs_options_and_a_seed_per_index(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def record(**kwargs: Any) -> optuna.samplers.BaseSampler:
        calls.append(kwargs)
        return optuna.samplers.RandomSampler(seed=kwargs["seed"])

    spec = make_spec(method="tpe", sampler={"n_startup_trials": 3, "multivariate": False})
    monkeypatch.setattr(registry, "sampler_class", lambda method: record)
    runner.make_sampler(spec, 5)
    assert calls == [{"seed": index_seed(spec.seed, 5), "constant_liar": True,
                      "multivariate": False, "n_startup_trials": 3}]


def test_tpe_defaults_reach_the_real_sampler() -> None:
    sampler = runner.make_sampler(make_spec(method="tpe"), 0)
    assert isinstance(sampler, optuna.samplers.TPESampler)
    # Optuna exposes no getter for these; the default of constant_liar differs between 4 and 5.
    assert sampler._constant_liar is True  # noqa: SLF001
    assert sampler._multivariate is True  # noqa: SLF001


@pytest.mark.parametrize("ptype", PRUNERS)
def test_an_unknown_pruner_option_names_the_field(ptype: str) -> None:
    with pytest.raises(SpecError) as info:
        make_spec(pruner={"type": ptype, "n_startup_trails": 3})
    assert info.value.field == "pruner.n_startup_trails"
    if ptype != "none":
        assert "unknown key 'n_startup_trails'" in info.value.message


def test_an_unknown_sampler_option_names_the_field() -> None:
    with pytest.raises(SpecError) as info:
        make_spec(method="tpe", sampler={"n_startup_trails": 3})
    assert info.value.field == "sampler.n_startup_trails"
    assert "did you mean 'n_startup_trials'?" in info.value.message


def test_a_wrongly_typed_option_names_the_field() -> None:
    with pytest.raises(SpecError) as info:
        make_spec(pruner={"type": "median", "n_warmup_steps": "two"})
    assert info.value.field == "pruner.n_warmup_steps"
    assert info.value.message == "expected an integer, got string 'two'"


def test_validator_and_runner_share_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Swap the median pruner's class: what the validator accepts and what the runner builds
    both change, because neither has a map of its own."""

    class StrictMedian(optuna.pruners.MedianPruner):
        def __init__(self, n_startup_trials: int = 3) -> None:
            if n_startup_trials > 3:
                raise ValueError("at most 3 startup trials")
            super().__init__(n_startup_trials=n_startup_trials)

    monkeypatch.setattr(registry, "pruner_class", lambda ptype: StrictMedian)
    assert type(runner.make_pruner(make_spec(pruner={"type": "median"}))) is StrictMedian
    with pytest.raises(SpecError, match="invalid median pruner options: at most 3 startup"):
        make_spec(pruner={"type": "median", "n_startup_trials": 4})
    with pytest.raises(SpecError) as info:  # a MedianPruner option StrictMedian lacks
        make_spec(pruner={"type": "median", "n_warmup_steps": 1})
    assert info.value.field == "pruner.n_warmup_steps"
    assert runner.make_pruner is registry.make_pruner
    assert runner.make_sampler is registry.make_sampler
