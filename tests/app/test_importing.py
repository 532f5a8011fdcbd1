"""import_config through the application layer, without click: the spec's text and notes as a
view, written to a file only when asked, nothing written when the config does not convert."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweeper.app.importing import import_config, import_lines
from sweeper.errors import SpecError, SweeperError
from sweeper.spec import parse_spec

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"


def test_a_wandb_config_becomes_a_spec_text_without_writing_anything(tmp_path: Path) -> None:
    view = import_config("wandb", DATA / "wandb" / "quick_random.yaml")
    assert parse_spec(view.text).name == "quick-random"
    assert (view.kind, view.written, view.next_steps) == ("wandb", None, None)
    assert view.notes == () and import_lines(view) == []


def test_a_katib_experiment_is_written_with_its_notes_and_next_steps(tmp_path: Path) -> None:
    out = tmp_path / "spec.yaml"
    view = import_config("katib", DATA / "katib" / "hp-tuning" / "random.yaml", out)
    assert view.written == str(out) and out.read_text() == view.text
    image = yaml.safe_load(view.text)["kubernetes"]["image"]
    lines = import_lines(view)
    assert lines[:-1] == [f"note: {n}" for n in view.notes]
    assert lines[-1].startswith(f"wrote {out} ({len(view.notes)} note")
    assert lines[-1].endswith(f"check it with `sweeper validate {out}`, run it with `sweeper "
                              f"run {out} --backend kubernetes` (the command runs in {image} "
                              "as it is, sweeper's runner beside it)")


def test_a_config_that_does_not_convert_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "spec.yaml"
    with pytest.raises(SpecError, match="not a W&B sweep config"):
        import_config("wandb", DATA / "wandb" / "not_a_sweep.yaml", out)
    assert not out.exists()
    with pytest.raises(SweeperError, match="cannot import 'optuna': one of katib, wandb"):
        import_config("optuna", DATA / "wandb" / "quick_random.yaml")


def test_an_output_that_cannot_be_written_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(SweeperError, match=r"cannot write .*missing/spec\.yaml"):
        import_config("wandb", DATA / "wandb" / "quick_random.yaml",
                      tmp_path / "missing" / "spec.yaml")
