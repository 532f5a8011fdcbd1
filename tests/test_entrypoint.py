"""``module:function`` entrypoints: importable, callable, and callable as ``fn(ctx)``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.entrypoint import load_entrypoint
from sweeper.errors import SpecError

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["one_arg", "one_arg_and_defaults", "star_args", "instance"])
def test_callables_that_take_the_context_are_accepted(name: str) -> None:
    fn = load_entrypoint(f"tests.data.signatures:{name}", source="s.yaml")
    assert fn(object()) == 0.0


@pytest.mark.parametrize("name, shown", [("no_args", "()"), ("two_args", "(ctx: 'Any', other"),
                                         ("keyword_only", "(*, ctx")])
def test_a_wrong_signature_is_a_spec_error_naming_the_field(name: str, shown: str) -> None:
    with pytest.raises(SpecError) as e:
        load_entrypoint(f"tests.data.signatures:{name}", source="s.yaml")
    text = str(e.value)
    assert text.startswith("s.yaml: trial.entrypoint: ")
    assert shown in text and f"def {name}(ctx)" in text and "exactly one argument" in text


def test_validate_refuses_a_wrong_signature_with_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: sig\nmethod: random\ntrials: 2\n"
                    "objective: {metric: loss, direction: minimize}\n"
                    "trial: {entrypoint: 'tests.data.signatures:no_args'}\n"
                    "parameters: {x: {type: float, low: 0, high: 1}}\n")
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 2, result.output
    assert "trial.entrypoint" in result.output and "exactly one argument" in result.output
    assert "Traceback" not in result.output
