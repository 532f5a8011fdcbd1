"""``--set KEY=VALUE``: the pure override of the parsed mapping, and its errors through the
loader (one line naming --set and the field)."""

from __future__ import annotations

import pytest
import yaml

from sweeper.errors import SpecError
from sweeper.spec import parse_spec
from sweeper.spec.overrides import Override, apply_overrides, parse_override, parse_overrides
from tests.support.helpers import spec_dict


@pytest.mark.parametrize(("text", "path", "value"), [
    ("trial.fixed.epochs=1", ("trial", "fixed", "epochs"), 1),
    ("parallelism=4", ("parallelism",), 4),
    ("seed='7'", ("seed",), "7"),  # quoted: a string, as in YAML
    ("name=smoke-test", ("name",), "smoke-test"),
    ("trial.timeout=30m", ("trial", "timeout"), "30m"),
    ("description=", ("description",), None),
    ("trial.command.2={lr}", ("trial", "command", 2), {"lr": None}),  # YAML flow mapping
    ("parameters.lr={type: float, low: 0.1, high: 1}", ("parameters", "lr"),
     {"type": "float", "low": 0.1, "high": 1}),
    ("objective.metric=a=b", ("objective", "metric"), "a=b"),  # the first = splits
    ("pruner.n_warmup_steps=[1, 2]", ("pruner", "n_warmup_steps"), [1, 2]),
])
def test_parse_override(text: str, path: tuple[str | int, ...], value: object) -> None:
    o = parse_override(text)
    assert (o.path, o.value, o.text) == (path, value, text)


@pytest.mark.parametrize(("text", "message"), [
    ("epochs", "expected KEY=VALUE"),
    ("=1", "expected KEY=VALUE"),
    ("trial..epochs=1", "dotted path"),
    ("trial.fixed.epochs=[1", "--set trial.fixed.epochs: not a YAML value"),
    ("seed=!!python/object:os.system x", "--set seed: not a YAML value: YAML tag"),
    ("x=&a [*a]", "--set x: not a YAML value"),
])
def test_bad_overrides_are_one_line(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_override(text, source="s.yaml")
    assert message in str(info.value) and str(info.value).startswith("s.yaml:")
    assert "\n" not in str(info.value)


def test_apply_is_pure_creates_missing_mappings_and_later_ones_win() -> None:
    data = {"name": "a", "trial": {"fixed": {"epochs": 5}, "command": ["python", "t.py"]}}
    before = yaml.safe_dump(data)
    out = apply_overrides(data, parse_overrides([
        "trial.fixed.epochs=1", "pruner.type=median", "trial.command.1=u.py",
        "parallelism=2", "parallelism=3"]))
    assert yaml.safe_dump(data) == before  # the input is left alone
    assert out == {"name": "a", "parallelism": 3, "pruner": {"type": "median"},
                   "trial": {"fixed": {"epochs": 1}, "command": ["python", "u.py"]}}
    value = {"k": [1]}
    out = apply_overrides({}, [Override(("x",), value, "x={k: [1]}")])
    value["k"].append(2)
    assert out == {"x": {"k": [1]}}  # a copy of the value, too
    assert apply_overrides(["not", "a", "mapping"], parse_overrides(["a=1"])) == \
        ["not", "a", "mapping"]


@pytest.mark.parametrize(("text", "message"), [
    ("name.first=x", "--set name.first: name is str 'e', not a mapping"),
    ("trial.command.5=x", "--set trial.command.5: trial.command is a list of 2; pick an item "
                          "by its position 0..1"),
    ("trial.command.x=y", "--set trial.command.x: trial.command is a list of 2; pick an item "
                          "by its position 0..1"),
])
def test_apply_into_something_else_is_one_line(text: str, message: str) -> None:
    data = {"name": "e", "trial": {"command": ["python", "t.py"]}}
    with pytest.raises(SpecError) as info:
        apply_overrides(data, [parse_override(text)], source="s.yaml")
    assert str(info.value) == f"s.yaml: {message}"


def _spec_text() -> str:
    return yaml.safe_dump(spec_dict(name="ov", method="random"), sort_keys=False)


def test_overrides_are_validated_like_the_file() -> None:
    spec = parse_spec(_spec_text(), "ov.yaml", overrides=["trial.fixed.epochs=1", "trials=3",
                                                           "parameters.n.high=4"])
    assert spec.trial.fixed["epochs"] == 1 and spec.trials == 3
    assert spec.parameter("n").high == 4
    plain = parse_spec(_spec_text(), "ov.yaml")
    assert spec.spec_hash != plain.spec_hash  # what is stored is the overridden spec
    assert spec.to_dict()["trial"]["fixed"]["epochs"] == 1


@pytest.mark.parametrize(("overrides", "message"), [
    (["parallelism=0"], "ov.yaml: --set parallelism: must be >= 1, got 0"),
    (["paralellism=2"], "ov.yaml: --set paralellism: unknown key 'paralellism'; did you mean "
                        "'parallelism'?"),
    (["parameters.a.low=2"], "ov.yaml: --set parameters.a.low: "),
    (["trial.retries=many"], "ov.yaml: --set trial.retries: "),
])
def test_a_bad_override_names_set_and_the_field(overrides: list[str], message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_spec_text(), "ov.yaml", overrides=overrides)
    assert str(info.value).startswith(message), str(info.value)


def test_an_error_elsewhere_still_names_the_file_line() -> None:
    text = _spec_text().replace("parallelism: 2", "parallelism: -1")
    with pytest.raises(SpecError) as info:
        parse_spec(text, "ov.yaml", overrides=["seed=3"])
    assert str(info.value).startswith("ov.yaml:6: parallelism:"), str(info.value)
