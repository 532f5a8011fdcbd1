"""The pruner and sampler registry: each name builds the right Optuna class with the spec's
options and sweeper's defaults, a bad option is a SpecError naming its field, and the validator
and the trial runner agree because both go through the registry."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from sweeper._optuna_compat import LocalPenaltyGPSampler
from sweeper.errors import SpecError
from sweeper.samplers import AfterEarlierAsks
from sweeper.spec import PRUNERS, registry
from sweeper.spec.seeds import index_seed
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


@pytest.mark.parametrize(("method", "scheduler", "wrapped"), [
    ("tpe", {"type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9}, True),
    ("tpe", None, False),
    ("random", {"type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9},
     False),
])
def test_under_promotion_asha_an_adaptive_sampler_sees_paused_trials(
        method: str, scheduler: dict[str, Any] | None, wrapped: bool) -> None:
    from sweeper.samplers import PausedAsPruned

    spec = make_spec(method=method, **({"scheduler": scheduler} if scheduler else {}))
    sampler = runner.make_sampler(spec, 0)
    if wrapped:
        assert isinstance(sampler, PausedAsPruned)
        assert isinstance(sampler.sampler, optuna.samplers.TPESampler)
    else:
        assert not isinstance(sampler, PausedAsPruned)


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


# --------------------------------------------------------------------------- the new methods

MULTI = [{"metric": "loss", "direction": "minimize"},
         {"metric": "accuracy", "direction": "maximize"}]


@pytest.mark.parametrize(("method", "cls", "objective"), [
    ("gp", LocalPenaltyGPSampler, None),
    ("cmaes", optuna.samplers.CmaEsSampler, None),
    ("qmc", optuna.samplers.RandomSampler, None),  # planned: the sets are enqueued
    ("nsga2", optuna.samplers.NSGAIISampler, MULTI),
    ("nsga3", optuna.samplers.NSGAIIISampler, MULTI),
])
def test_every_method_builds_its_sampler_seeded_per_index(method: str, cls: type,
                                                          objective: Any) -> None:
    over = {"objective": objective} if objective else {}
    spec = make_spec(method=method, **over)
    sampler = runner.make_sampler(spec, 3)
    if method in registry.ASKS_IN_ORDER:  # parallel runners ask one after the other
        assert isinstance(sampler, AfterEarlierAsks)
        sampler = sampler.sampler
    assert type(sampler) is cls
    assert spec.is_adaptive is (method != "qmc")


def test_gp_asks_in_order_only_when_runners_run_side_by_side() -> None:
    assert isinstance(runner.make_sampler(make_spec(method="gp", parallelism=4), 0),
                      AfterEarlierAsks)
    assert type(runner.make_sampler(make_spec(method="gp", parallelism=1), 0)) \
        is LocalPenaltyGPSampler
    assert type(runner.make_sampler(make_spec(method="tpe", parallelism=4), 0)) \
        is optuna.samplers.TPESampler


@pytest.mark.parametrize(("method", "options", "attr", "value"), [
    ("gp", {"n_startup_trials": 3}, "_n_startup_trials", 3),
    ("cmaes", {"popsize": 6, "n_startup_trials": 2}, "_popsize", 6),
    ("nsga2", {"population_size": 8}, "_population_size", 8),
    ("nsga3", {"population_size": 8, "dividing_parameter": 4}, "_population_size", 8),
])
def test_sampler_options_reach_each_method_s_sampler(method: str, options: dict[str, Any],
                                                      attr: str, value: Any) -> None:
    over = {"objective": MULTI} if method.startswith("nsga") else {}
    sampler = runner.make_sampler(make_spec(method=method, sampler=options, **over), 0)
    assert getattr(getattr(sampler, "sampler", sampler), attr) == value


@pytest.mark.parametrize("method", ["gp", "cmaes", "nsga2", "nsga3", "qmc"])
def test_a_misspelt_option_of_any_method_is_a_spec_error(method: str) -> None:
    over = {"objective": MULTI} if method.startswith("nsga") else {}
    with pytest.raises(SpecError) as info:
        make_spec(method=method, sampler={"sede": 3}, **over)
    assert info.value.field == "sampler.sede"
    assert "unknown key 'sede'" in info.value.message


def test_only_options_yaml_can_write_are_offered() -> None:
    """Callables, arrays and samplers cannot come from YAML; the seed is per index."""
    assert registry.option_names("grid") == registry.option_names("random") == set()
    assert registry.option_names("qmc") == {"qmc_type", "scramble"}
    assert "independent_sampler" not in registry.option_names("gp")
    assert "seed" not in registry.option_names("cmaes")
    assert "x0" not in registry.option_names("cmaes")
    assert "constraints_func" not in registry.option_names("nsga2")
    assert {"population_size", "crossover_prob"} <= registry.option_names("nsga2")
    assert registry.option_names("tpe") >= {"n_startup_trials", "multivariate", "group"}


def test_a_method_that_cannot_serve_the_objectives_is_refused_with_the_reason() -> None:
    with pytest.raises(SpecError, match="nsga2 is a multi-objective method") as info:
        make_spec(method="nsga2")
    assert info.value.field == "method"
    with pytest.raises(SpecError, match="nsga3 is a multi-objective method"):
        make_spec(method="nsga3")
    with pytest.raises(SpecError, match="cmaes optimises one objective only"):
        make_spec(method="cmaes", objective=MULTI)
    # Optuna 5's GPSampler serves several objectives, so gp is not refused.
    assert make_spec(method="gp", objective=MULTI).is_multi_objective


def test_gp_runs_a_multi_objective_study_in_optuna() -> None:
    """The fact the previous test relies on: if Optuna drops it, this fails first."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["minimize", "maximize"],
                                sampler=optuna.samplers.GPSampler(seed=0, n_startup_trials=2))
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)),
                   n_trials=4)
    assert len(study.best_trials) >= 1


@pytest.mark.parametrize(("parameters", "expect"), [
    ({"a": {"type": "float", "low": 0.0, "high": 1.0},
      "b": {"type": "categorical", "choices": ["x", "y"]}},
     ["cmaes samples b independently at random", "cmaes needs two or more float/int "
      "parameters; with only 'a'"]),
    ({"a": {"type": "float", "low": 0.0, "high": 1.0},
      "n": {"type": "int", "values": [1, 2, 4]},
      "c": {"type": "float", "low": 0.0, "high": 1.0}},
     ["cmaes samples n independently at random"]),
    ({"a": {"type": "float", "low": 0.0, "high": 1.0},
      "c": {"type": "int", "low": 0, "high": 3}}, []),
])
def test_cmaes_warns_where_optuna_would_fall_back_to_random(parameters: dict[str, Any],
                                                            expect: list[str]) -> None:
    spec = make_spec(method="cmaes", parameters=parameters)
    assert len(spec.warnings) == len(expect)
    for warning, text in zip(spec.warnings, expect, strict=True):
        assert text in warning
        assert warning.startswith("<spec>:") and "\n" not in warning


def test_nsga_warns_when_the_trials_do_not_fill_one_generation() -> None:
    spec = make_spec(method="nsga2", objective=MULTI, trials=20)
    assert len(spec.warnings) == 1
    assert "20 trials do not fill one nsga2 generation (population_size 50)" in spec.warnings[0]
    assert not make_spec(method="nsga2", objective=MULTI, trials=20,
                         sampler={"population_size": 5}).warnings


def test_validate_prints_each_warning_as_one_line_on_stderr(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from sweeper.cli import cli
    from tests.support.helpers import write_spec

    path = write_spec(tmp_path, method="cmaes", parameters={
        "a": {"type": "float", "low": 0.0, "high": 1.0},
        "b": {"type": "float", "low": 0.0, "high": 1.0},
        "opt": {"type": "categorical", "choices": ["sgd", "adam"]}})
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0
    assert result.stdout.startswith("ok: t-sweep: cmaes")
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"warning: {path}:2: method: cmaes samples opt independently")


def test_a_grid_cut_short_by_trials_says_which_parameters_it_starves() -> None:
    full = make_spec()  # a: 5 values, b: 2 -> 10 points
    assert not full.warnings
    short = make_spec(trials=4)
    assert len(short.warnings) == 1
    assert "4 trials < the grid's 10 points: the grid runs its first 4 points in order (last " \
           "parameter fastest), so a takes 2 of its 5 values; use method random or qmc" \
           in short.warnings[0]


CONDITIONAL = {"opt": {"type": "categorical", "choices": ["a", "b"]},
               "x": {"type": "float", "low": 0.0, "high": 1.0, "when": {"opt": "a"}}}


_METHOD_CASES = {
    "grid": {}, "random": {}, "qmc": {}, "tpe": {}, "tpe-conditional": {"parameters": CONDITIONAL},
    "gp": {"sampler": {"deterministic_objective": True}},
    "cmaes": {"sampler": {"with_margin": True}},
    "nsga2": {"objective": MULTI}, "nsga3": {"objective": MULTI}}


@pytest.mark.parametrize(("case", "ptype"), [
    (case, ptype) for case in _METHOD_CASES for ptype in PRUNERS
    if not case.startswith("nsga") or ptype == "none"])  # a pruner needs one objective
def test_runners_build_sampler_and_pruner_without_experimental_warnings(case: str,
                                                                        ptype: str) -> None:
    """NSGAIIISampler, TPE's group=True and some options are experimental in Optuna: sweeper
    uses them on purpose, so neither the terminal of `sweeper run` nor a log shows Optuna's
    ExperimentalWarning (issue 25, point 9)."""
    import warnings

    pruner = {"type": ptype, **({"percentile": 25.0} if ptype == "percentile" else {})}
    spec = make_spec(method=case.split("-")[0], pruner=pruner, **_METHOD_CASES[case])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        runner.make_sampler(spec, 1)
        runner.make_pruner(spec)
    assert not [w for w in seen if issubclass(w.category, optuna.exceptions.ExperimentalWarning)]


def test_gp_samples_with_sweepers_gpsampler_and_takes_gpsamplers_options() -> None:
    assert issubclass(registry.sampler_class("gp"), optuna.samplers.GPSampler)
    assert registry.options_class("gp") is optuna.samplers.GPSampler
    sampler = registry.build_sampler("gp", {"n_startup_trials": 4,
                                            "warn_independent_sampling": False}, 7)
    assert type(sampler) is LocalPenaltyGPSampler
    assert (sampler._n_startup_trials, sampler._warn_independent_sampling) == (4, False)  # noqa: SLF001
