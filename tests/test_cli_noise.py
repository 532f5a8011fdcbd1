"""What the CLI says stays short and exact: counts in the singular when there is one, a
stopped sweep whose indexes all finished says so (no resume hint for nothing), and a changed
grid is refused pointing at its parameters (the grid's size follows from them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sweeper.cli import cli
from tests.support.helpers import write_spec


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_validate_counts_in_the_singular(tmp_path: Path) -> None:
    path = write_spec(tmp_path, name="single", method="grid",
                      parameters={"x": {"type": "int", "values": [3]}})
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: single: grid, 1 index, 1 parameter, objective ")


def test_a_stop_after_every_index_finished_has_no_resume_hint(
        tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zero.py").write_text("def train(ctx):\n    return 0.0\n")
    path = write_spec(tmp_path, name="all-done", method="grid", parallelism=1,
                      stop={"value": 0.1}, trial={"entrypoint": "zero:train"},
                      parameters={"x": {"type": "int", "values": [0]}})
    result = invoke("run", str(path), "--storage", sqlite_url)
    assert result.exit_code == 0, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("stopped: stop rule value fired at ")
    assert last.endswith("; every index finished"), last


def test_a_changed_grid_points_at_its_parameters(tmp_path: Path, sqlite_url: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zero.py").write_text("def train(ctx):\n    return 0.0\n")
    kw = {"name": "regrid", "method": "grid", "trial": {"entrypoint": "zero:train"}}
    path = write_spec(tmp_path, parameters={"x": {"type": "int", "values": [0, 1]}}, **kw)
    assert invoke("run", str(path), "--storage", sqlite_url).exit_code == 0
    write_spec(tmp_path, parameters={"x": {"type": "int", "values": [0, 1, 2]}}, **kw)
    result = invoke("run", str(path), "--storage", sqlite_url)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: parameters: a different sweep named 'regrid' "
                           "already exists in this storage (parameters differ)"), line
