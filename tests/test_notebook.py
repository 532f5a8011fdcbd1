"""notebooks/compare_trials.ipynb runs headless (nbclient) against a sweep the test runs, and
is committed without outputs."""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.support.compare import isolate, quadratic_spec, run_sweep

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "compare_trials.ipynb"
DOCS_PAGE = REPO / "docs" / "compare.md"


def test_committed_notebook_has_parameters_and_no_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert "STUDY_NAME" in code[0].source and "STORAGE_URL" in code[0].source
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, "clear the outputs"


def _readme_command() -> list[str]:
    """The headless command the documentation gives, as argv after ``jupyter``."""
    text = DOCS_PAGE.read_text()
    m = re.search(r"\.venv/bin/jupyter (execute notebooks/compare_trials\.ipynb[^\n`]*)", text)
    assert m, "docs/compare.md's headless notebook command moved; update this test"
    return shlex.split(m.group(1))


def _git_status(*paths: str) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout


def test_readme_command_executes_next_to_the_notebook_and_draws_the_figures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = quadratic_spec("nb-sweep", trials=10, method="tpe",
                          sampler={"n_startup_trials": 4})
    spec["trial"]["fixed"] = {"epochs": 4}
    run_sweep(tmp_path, url, spec)

    argv = _readme_command()
    out_name = argv[argv.index("--output") + 1]
    executed = NOTEBOOK.parent / f"{out_name}.ipynb"
    before = NOTEBOOK.read_bytes()
    status_before = _git_status("notebooks")
    # The kernel inherits the environment: that is how the parameters cell gets the sweep.
    env = {**os.environ, "SWEEPER_STUDY": "nb-sweep", "SWEEPER_STORAGE": url,
           "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    jupyter = Path(sys.executable).with_name("jupyter")
    try:
        proc = subprocess.run([str(jupyter), *argv], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert NOTEBOOK.read_bytes() == before, "the documented command overwrote the notebook"
        assert _git_status("notebooks") == status_before, "the executed copy is not ignored"
        nb = nbformat.read(executed, as_version=4)
    finally:
        executed.unlink(missing_ok=True)

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pngs = [o for o in outputs if "image/png" in o.get("data", {})]
    # history, parallel coordinates, importances, intermediate values, per-step metrics
    assert len(pngs) >= 5
    for i, o in enumerate(pngs):
        data = base64.b64decode(o["data"]["image/png"])
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        (tmp_path / f"figure-{i}.png").write_bytes(data)
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "nb-sweep in sqlite:///" in text and "10 trials, 10 complete" in text
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("value_loss" in t and "attempt" in t and "opt" in t for t in tables)
