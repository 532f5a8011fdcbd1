"""Good specs: defaults, the normalised form (the sweep record) and its hash, durations,
parameter kinds, multi-objective and the kubernetes block. Bad specs live in
test_bad_specs.py; random input in test_spec_fuzz.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper.errors import SpecError
from sweeper.spec import (
    MAX_INDEXES,
    KubernetesSpec,
    Parameter,
    Pruner,
    Resources,
    SweepSpec,
    command_placeholders,
    load_spec,
    parse_duration,
    parse_spec,
    parse_spec_dict,
)
from sweeper.spec.grid import grid_size_of
from tests.support.helpers import QUADRATIC

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(REPO.glob("search_spaces/*.yaml"))

MINIMAL = f"""
name: minimal
method: grid
objective: {{metric: loss, direction: minimize}}
trial: {{entrypoint: "{QUADRATIC}"}}
parameters:
  x: {{type: int, low: 0, high: 3}}
"""


def spec_from(d: dict[str, Any]) -> SweepSpec:
    return parse_spec(yaml.safe_dump(d, sort_keys=False), source="test.yaml")


def base(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = yaml.safe_load(MINIMAL)
    d.update(over)
    return d


# --------------------------------------------------------------------------- defaults


def test_minimal_spec_gets_every_default() -> None:
    s = parse_spec(MINIMAL, source="minimal.yaml")
    assert (s.name, s.method, s.source) == ("minimal", "grid", "minimal.yaml")
    assert [(o.metric, o.direction) for o in s.objectives] == [("loss", "minimize")]
    assert s.trials == 4  # grid: the grid size unless given
    assert (s.parallelism, s.seed, dict(s.sampler)) == (1, 0, {})
    assert s.pruner == Pruner("none", {})
    assert s.storage is None and s.description is None
    assert s.trial.entrypoint == QUADRATIC and s.trial.command is None
    assert (dict(s.trial.fixed), s.trial.retries, s.trial.timeout) == ({}, 1, None)
    assert s.trial.resources == Resources(gpu=0, cpu=None, memory=None)
    assert s.kubernetes == KubernetesSpec()
    assert s.parameters == (Parameter("x", "int", low=0, high=3, step=1),)
    assert not s.is_adaptive and not s.is_multi_objective


def test_load_spec_reads_files_and_names_them(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MINIMAL)
    assert load_spec(path).source == str(path)
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "missing.yaml")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_load(path: Path) -> None:
    s = load_spec(path)
    assert s.trials >= 1 and s.parameters


def test_examples_cover_every_method_and_both_trial_kinds() -> None:
    specs = [load_spec(p) for p in EXAMPLES]
    assert {s.method for s in specs} >= {"grid", "random", "tpe"}
    assert any(s.trial.command for s in specs) and any(s.trial.entrypoint for s in specs)
    for s in specs:
        if s.method == "grid":
            assert s.trials == grid_size_of(s.parameters)
        if s.trial.command:
            names = {p.name for p in s.parameters} | set(s.trial.fixed)
            assert set(command_placeholders(s.trial.command)) <= names | {"index",
                                                                           "trial_number"}


# --------------------------------------------------------------------------- normalised form


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_to_dict_round_trips(path: Path) -> None:
    s = load_spec(path)
    d = s.to_dict()
    stored = json.loads(json.dumps(d))  # what the study's user attrs hold
    again = parse_spec_dict(stored, source="<study x>")
    assert again == s
    assert again.to_dict() == d
    assert again.spec_hash == s.spec_hash
    assert again.source == "<study x>"


def test_to_dict_fills_defaults_and_never_stores_the_storage_url() -> None:
    s = spec_from(base(storage="postgresql://u:hunter2@db/sweeps", trials=2))
    d = s.to_dict()
    assert s.storage == "postgresql://u:hunter2@db/sweeps"
    assert d["storage"] is None and "hunter2" not in json.dumps(d)
    assert d["trial"]["retries"] == 1 and d["parallelism"] == 1 and d["seed"] == 0
    assert d["pruner"] == {"type": "none"}
    assert d["parameters"] == {"x": {"type": "int", "low": 0, "high": 3, "log": False, "step": 1}}


def test_fixed_values_round_trip_even_when_null() -> None:
    s = spec_from(base(trial={"entrypoint": QUADRATIC,
                              "fixed": {"epochs": 2, "warmup": None, "opt": {"beta": None}}}))
    again = parse_spec_dict(s.to_dict())
    assert dict(again.trial.fixed) == {"epochs": 2, "warmup": None, "opt": {"beta": None}}


# --------------------------------------------------------------------------- the hash


def test_spec_hash_is_stable() -> None:
    a = parse_spec(MINIMAL)
    reformatted = ("# a comment\nparameters: {x: {high: 3, low: 0, type: int}}\n"
                   f"trial:\n  entrypoint: {QUADRATIC}\nobjective:\n  direction: minimize\n"
                   "  metric: loss\nmethod: grid\nname: minimal\n")
    assert parse_spec(reformatted).spec_hash == a.spec_hash
    assert spec_from(base(trials=4, seed=0, parallelism=1)).spec_hash == a.spec_hash
    assert len(a.spec_hash) == 16 and a.spec_hash == parse_spec(MINIMAL).spec_hash


@pytest.mark.parametrize("change", [
    {"parallelism": 8},
    {"description": "now with words"},
    {"storage": "sqlite:///elsewhere.db"},
    {"trial": {"entrypoint": QUADRATIC, "retries": 5, "timeout": "2h",
               "resources": {"gpu": 1, "cpu": 4, "memory": "8Gi"}}},
    {"kubernetes": {"image": "registry.example/trial:2", "namespace": "ml",
                    "indexes_per_pod": 2}},
], ids=["parallelism", "description", "storage", "retries-timeout-resources", "kubernetes"])
def test_spec_hash_ignores_how_and_where_it_runs(change: dict[str, Any]) -> None:
    assert spec_from(base(**change)).spec_hash == parse_spec(MINIMAL).spec_hash


@pytest.mark.parametrize("change", [
    {"name": "other"},
    {"trials": 3},
    {"seed": 1},
    {"objective": {"metric": "loss", "direction": "maximize"}},
    {"objective": {"metric": "val_loss", "direction": "minimize"}},
    {"pruner": {"type": "median"}},
    {"parameters": {"x": {"type": "int", "low": 0, "high": 4}}},
    {"parameters": {"x": {"type": "int", "low": 0, "high": 3}, "y": {"values": [1, 2]}}},
    {"parameters": {"x": {"type": "categorical", "choices": [0, 1, 2, 3]}}},
    {"trial": {"entrypoint": QUADRATIC, "fixed": {"epochs": 2}}},
    {"trial": {"entrypoint": "tests.support.helpers:spec_dict"}},
    {"trial": {"command": ["python3", "train.py", "{x}"]}},
], ids=["name", "trials", "seed", "direction", "metric", "pruner", "range", "new-param",
        "param-kind", "fixed", "entrypoint", "command"])
def test_spec_hash_changes_with_what_defines_the_trials(change: dict[str, Any]) -> None:
    assert spec_from(base(**change)).spec_hash != parse_spec(MINIMAL).spec_hash


def test_spec_hash_changes_with_parameter_order() -> None:
    """Grid point i and random set i depend on the YAML parameter order."""
    params = {"a": {"type": "int", "low": 0, "high": 1}, "b": {"values": ["x", "y"]}}
    ab = spec_from(base(parameters=params))
    ba = spec_from(base(parameters=dict(reversed(params.items()))))
    assert [p.name for p in ab.parameters] == ["a", "b"]
    assert ab.spec_hash != ba.spec_hash


def test_tpe_sampler_options_are_in_the_hash() -> None:
    tpe = base(method="tpe", trials=4)
    assert spec_from({**tpe, "sampler": {"n_startup_trials": 3}}).spec_hash != \
        spec_from(tpe).spec_hash


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(("text", "seconds"), [
    (90, 90.0), (1.5, 1.5), ("90", 90.0), ("90s", 90.0), ("500ms", 0.5), ("30m", 1800.0),
    ("2h", 7200.0), ("1h30m", 5400.0), ("2d", 172800.0), ("1.5h", 5400.0), (" 10m ", 600.0),
    ("365d", 365 * 86400.0),
])
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [0, -5, "0s", "-1s", "1x", "10 minutes", "1h 30m", "", "m",
                                  True, None, [1], float("nan"), float("inf"), 10**400, "366d",
                                  "1e400s"])
def test_bad_durations_raise_value_error(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_trial_timeout_is_seconds() -> None:
    s = spec_from(base(trial={"entrypoint": QUADRATIC, "timeout": "1h30m"}))
    assert s.trial.timeout == 5400.0
    assert s.to_dict()["trial"]["timeout"] == 5400.0


# --------------------------------------------------------------------------- parameter kinds


def test_parameter_kinds_and_grid_size() -> None:
    s = spec_from(base(method="grid", parameters={
        "lr": {"type": "float", "values": [0.1, 0.01, 1]},
        "width": {"type": "int", "low": 16, "high": 64, "step": 16},
        "dropout": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1},
        "opt": {"type": "categorical", "choices": ["sgd", "adam", None, True]},
        "tag": {"values": ["a", 2]},
    }))
    lr, width, dropout, opt, tag = s.parameters
    assert lr == Parameter("lr", "float", values=(0.1, 0.01, 1))
    assert width == Parameter("width", "int", low=16, high=64, step=16)
    assert dropout == Parameter("dropout", "float", low=0.0, high=0.5, step=0.1)
    assert isinstance(dropout.step, float) and isinstance(dropout.low, float)
    assert opt.choices == ("sgd", "adam", None, True) and opt.type == "categorical"
    assert tag.type == "categorical" and tag.values == ("a", 2)
    assert all(p.is_finite for p in s.parameters)
    assert s.trials == grid_size_of(s.parameters) == 3 * 4 * 6 * 4 * 2


def test_continuous_parameters_for_random_and_tpe() -> None:
    for method in ("random", "tpe"):
        s = spec_from(base(method=method, trials=20, parameters={
            "lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
            "n": {"type": "int", "low": 1, "high": 1024, "log": True},
            "x": {"type": "float", "low": -1, "high": 1},
        }))
        lr, n, x = s.parameters
        assert lr.log and lr.step is None and not lr.is_finite
        assert n.log and n.step == 1 and n.is_finite
        assert (x.low, x.high) == (-1.0, 1.0) and isinstance(x.low, float)
        assert grid_size_of(s.parameters) == 0  # a continuous dimension: no grid


def test_float_steps_use_decimal_arithmetic_like_optuna() -> None:
    ok = spec_from(base(parameters={"x": {"type": "float", "low": 0.1, "high": 0.7,
                                          "step": 0.2}}))
    assert ok.trials == 4
    with pytest.raises(SpecError, match="does not fit the range"):
        spec_from(base(parameters={"x": {"type": "float", "low": 0.1, "high": 0.8,
                                         "step": 0.2}}))


def test_grid_at_the_limit_is_allowed() -> None:
    s = spec_from(base(parameters={"x": {"type": "int", "low": 1, "high": MAX_INDEXES}}))
    assert s.trials == MAX_INDEXES
    with pytest.raises(SpecError, match="the limit is"):
        spec_from(base(parameters={"x": {"type": "int", "low": 0, "high": MAX_INDEXES}}))


def test_trials_may_be_fewer_than_the_grid() -> None:
    assert spec_from(base(trials=2)).trials == 2


# --------------------------------------------------------------------------- objectives


def test_multi_objective() -> None:
    objectives = [{"metric": "loss", "direction": "minimize"},
                  {"metric": "accuracy", "direction": "maximize"}]
    s = spec_from(base(objective=objectives))
    assert s.is_multi_objective
    assert [(o.metric, o.direction) for o in s.objectives] == [("loss", "minimize"),
                                                             ("accuracy", "maximize")]
    d = s.to_dict()
    assert d["objective"] == objectives
    assert parse_spec_dict(d) == s
    single = spec_from(base(objective=[objectives[0]]))
    assert not single.is_multi_objective
    assert single.spec_hash == parse_spec(MINIMAL).spec_hash  # a list of one is the same


def test_pruner_and_sampler_options() -> None:
    s = spec_from(base(method="tpe", trials=8,
                       sampler={"n_startup_trials": 3, "multivariate": True,
                                "n_ei_candidates": 12},
                       pruner={"type": "hyperband", "min_resource": 1, "max_resource": 9,
                               "reduction_factor": 3}))
    assert dict(s.sampler) == {"n_startup_trials": 3, "multivariate": True, "n_ei_candidates": 12}
    assert s.pruner == Pruner("hyperband", {"min_resource": 1, "max_resource": 9,
                                            "reduction_factor": 3})
    assert spec_from(base(pruner={"type": "percentile", "percentile": 25.0})).pruner.options == \
        {"percentile": 25.0}
    assert spec_from(base(pruner={"type": "successive_halving", "min_resource": "auto"})
                     ).pruner.options == {"min_resource": "auto"}


# --------------------------------------------------------------------------- trial


def test_command_placeholders_and_escapes() -> None:
    s = spec_from(base(trial={
        "command": ["python3", "-c", "print({{'x': 1}})", "--x={x}", "--epochs={epochs}",
                    "--index={index}", "--trial={trial_number}", "{x!r}", "{x:>4}", 3],
        "fixed": {"epochs": 2}}))
    assert s.trial.command is not None and s.trial.command[-1] == "3"
    assert command_placeholders(s.trial.command) == ["x", "epochs", "index", "trial_number",
                                                     "x", "x"]


def test_resources() -> None:
    s = spec_from(base(trial={"entrypoint": QUADRATIC,
                              "resources": {"gpu": 2, "cpu": 0.5, "memory": "512Mi"}}))
    assert s.trial.resources == Resources(gpu=2, cpu="0.5", memory="512Mi")


def test_with_overrides_ignores_none() -> None:
    s = parse_spec(MINIMAL)
    assert s.with_overrides(parallelism=None) == s
    assert s.with_overrides(parallelism=4).parallelism == 4


# --------------------------------------------------------------------------- kubernetes


def test_kubernetes_block() -> None:
    s = spec_from(base(kubernetes={
        "image": "registry.example/sweeper-trial:1.2",
        "image_pull_policy": "Always",
        "namespace": "ml-sweeps",
        "storage_secret": "db-url",
        "storage_secret_key": "URL",
        "service_account": "trainer",
        "node_selector": {"gpu": "h100", "zone": 3},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                         "effect": "NoSchedule"},
                        {"key": "spot", "operator": "Equal", "value": "true",
                         "effect": "NoExecute", "tolerationSeconds": 60}],
        "image_pull_secrets": ["regcred"],
        "env": {"LOG_LEVEL": "debug", "CUDA_LAUNCH_BLOCKING": 1, "FAST": True},
        "indexes_per_pod": 4,
        "active_deadline": "12h",
        "ttl_after_finished": "1d",
    }))
    k = s.kubernetes
    assert (k.image, k.image_pull_policy, k.namespace) == (
        "registry.example/sweeper-trial:1.2", "Always", "ml-sweeps")
    assert (k.storage_secret, k.storage_secret_key, k.service_account) == (
        "db-url", "URL", "trainer")
    assert dict(k.node_selector) == {"gpu": "h100", "zone": "3"}
    assert k.tolerations[1]["tolerationSeconds"] == 60
    assert k.image_pull_secrets == ("regcred",)
    assert dict(k.env) == {"LOG_LEVEL": "debug", "CUDA_LAUNCH_BLOCKING": "1", "FAST": "true"}
    assert (k.indexes_per_pod, k.active_deadline, k.ttl_after_finished) == (4, 43200.0, 86400.0)
    assert parse_spec_dict(s.to_dict()) == s


def test_kubernetes_defaults_in_the_normalised_form() -> None:
    d = parse_spec(MINIMAL).to_dict()["kubernetes"]
    assert d["image_pull_policy"] == "IfNotPresent" and d["indexes_per_pod"] == 1
    assert "active_deadline" not in d  # None is left out
    assert d["ttl_after_finished"] == 86400.0


# --------------------------------------------------------------------------- metrics


@pytest.mark.parametrize("metric", ["Validation-accuracy", "val/loss", "train.loss", "_x1"])
def test_metric_names_may_have_dashes_dots_and_slashes(metric: str) -> None:
    s = spec_from(base(objective={"metric": metric, "direction": "maximize"}))
    assert s.objectives[0].metric == metric
    assert parse_spec_dict(s.to_dict()) == s


def test_trial_metrics_round_trip_and_stay_out_of_the_hash() -> None:
    command = {"command": ["python", "train.py", "{x}"]}
    plain = spec_from(base(trial=command))
    fmt = spec_from(base(trial={**command, "metrics": {"format": r"(?P<name>\w+) (?P<value>\S+)"}}))
    file = spec_from(base(trial={**command, "metrics": {"file": "m-{index}.jsonl"}}))
    assert fmt.trial.metrics.format == r"(?P<name>\w+) (?P<value>\S+)"
    assert file.trial.metrics.file == "m-{index}.jsonl" and file.trial.metrics.format is None
    assert "metrics" not in plain.to_dict()["trial"]
    assert file.to_dict()["trial"]["metrics"] == {"file": "m-{index}.jsonl"}
    for s in (fmt, file):
        assert parse_spec_dict(s.to_dict()) == s
        assert s.spec_hash == plain.spec_hash  # how metrics are read is not what a trial is
