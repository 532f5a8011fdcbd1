"""docs/python.md ("Use sweeper from Python") works as written: its Python blocks run in order,
in one namespace, against the sweep of docs/getting-started.md (its train.py and sweep.yaml,
taken from that page, run through the CLI under a HOME of the test's own)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.compare import invoke

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
WANDB = REPO / "tests" / "data" / "importers" / "wandb"


def _blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", page.read_text(), re.M | re.S)


def _tour(home: Path) -> Path:
    """~/tour/train.py and ~/tour/sweep.yaml as docs/getting-started.md gives them."""
    tour = home / "tour"
    tour.mkdir()
    for block in _blocks(DOCS / "getting-started.md", "python") + \
            _blocks(DOCS / "getting-started.md", "yaml"):
        first = block.splitlines()[0]
        if first.startswith("# ~/tour/"):
            (tour / first.removeprefix("# ~/tour/")).write_text(block)
    assert (tour / "train.py").is_file() and (tour / "sweep.yaml").is_file()
    return tour / "sweep.yaml"


def test_every_python_block_of_the_page_runs(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SWEEPER_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    spec = _tour(home)
    ran = invoke("run", str(spec), "--set", "trials=6", "--log-dir", str(tmp_path / "logs"))
    assert ran.exit_code == 0, ran.output
    shutil.copy(WANDB / "quick_random.yaml", work / "sweep.yaml")  # the import example's file

    blocks = _blocks(DOCS / "python.md", "python")
    assert len(blocks) >= 6
    namespace: dict[str, Any] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, "docs/python.md", "exec"), namespace)
    printed = out.getvalue()

    assert namespace["view"].name == "tour" and namespace["view"].indexes == 6
    assert namespace["same"] == namespace["view"]  # by spec file and by name: one sweep
    assert namespace["record"]["per_index"][0]["index"] == 0
    assert [s.name for s in namespace["listed"].sweeps] == ["tour"]
    assert len(namespace["df"]) == sum(namespace["view"].trials_by_state.values())
    assert namespace["winner"]["values"]["loss"] == namespace["done"]["values.loss"].min()
    assert namespace["document"]["study"] == "tour"
    assert "no sweep named 'tuor'" in printed and "did you mean 'tour'?" in printed
    assert (work / "sweep.sweeper.yaml").read_text() == namespace["imported"].text
    assert "tour: " in printed and "indexes finished" in printed
