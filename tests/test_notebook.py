"""notebooks/compare_trials.ipynb runs headless (nbclient) against a sweep the test runs, and
is committed without outputs."""

from __future__ import annotations

import base64
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.compare_support import isolate, quadratic_spec, run_sweep

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "compare_trials.ipynb"


def test_committed_notebook_has_parameters_and_no_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert "STUDY_NAME" in code[0].source and "STORAGE_URL" in code[0].source
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, "clear the outputs"


def test_notebook_executes_and_draws_the_figures(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = quadratic_spec("nb-sweep", trials=10, method="tpe",
                          sampler={"n_startup_trials": 4})
    spec["trial"]["fixed"] = {"epochs": 4}
    run_sweep(tmp_path, url, spec)

    # The kernel inherits the environment: that is how the parameters cell gets the sweep.
    monkeypatch.setenv("SWEEPER_STUDY", "nb-sweep")
    monkeypatch.setenv("SWEEPER_STORAGE", url)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=120, startup_timeout=60,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

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
