"""Machine-readable output: `validate --format json`, `run --format json` (one summary object on
stdout, diagnostics on stderr), and `dashboard` saying at once that it starts and then its URL
as soon as the port listens."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.study import open_storage
from tests.support.helpers import stop_process, write_spec

SWEEPER = Path(sys.executable).parent / "sweeper"


def sweeper(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_validate_json_is_the_normalised_summary(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, name="vj", objective=[
        {"metric": "loss", "direction": "minimize"}, {"metric": "acc", "direction": "maximize"}])
    result = sweeper("validate", str(spec), "--format", "json", "--set", "parallelism=3")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["valid"] is True and doc["file"] == str(spec)
    assert (doc["name"], doc["method"], doc["indexes"], doc["parallelism"]) == \
        ("vj", "grid", 10, 3)
    assert doc["objectives"] == [{"metric": "loss", "direction": "minimize"},
                                 {"metric": "acc", "direction": "maximize"}]
    assert list(doc["parameters"]) == ["a", "b"]
    assert doc["parameters"]["b"] == {"type": "categorical", "choices": ["x", "y"]}
    assert doc["trial"]["entrypoint"] == "trial_runner.examples.synthetic:quadratic"
    assert len(doc["spec_hash"]) == 16
    bad = sweeper("validate", str(spec), "--format", "json", "--set", "seed=-1")
    assert bad.exit_code == 2 and bad.stdout == ""  # errors stay one line on stderr


def test_run_json_is_one_summary_object_on_stdout(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 pg_url: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "half.py").write_text(
        "def train(ctx):\n"
        "    if ctx.index == 4:\n"
        "        raise KeyError('no column lr')\n"
        "    return float(ctx.params['a']) + (0.5 if ctx.params['b'] == 'y' else 0.0)\n")
    spec = write_spec(tmp_path, name="rj", trial={"entrypoint": "half:train", "retries": 0})
    result = sweeper("run", str(spec), "--storage", pg_url, "--format", "json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)  # stdout holds the object and nothing else
    assert doc["sweep"] == "rj" and doc["method"] == "grid" and doc["backend"] == "local"
    assert doc["storage"].startswith("postgresql://sweeper:***@")
    assert "sweeper-test-pw" not in result.output
    assert (doc["indexes"], doc["finished_indexes"]) == (10, 9)
    assert doc["trials_by_state"] == {"COMPLETE": 9, "FAIL": 1}
    assert doc["unfinished_indexes"] == [4]
    (failed,) = doc["failed_indexes"]
    assert failed["index"] == 4 and failed["attempts"] == 1
    assert failed["fail_reason"] == "objective raised KeyError: 'no column lr'"
    assert doc["best"]["values"] == {"loss": 0.0} and doc["best"]["params"]["b"] == "x"
    assert doc["interrupted"] is False and doc["detached"] is False
    assert doc["directions"] == ["minimize"]
    # the failure details and the error line are diagnostics: on stderr
    assert "index 4 failed for good after 1 attempt(s)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: 1 index(es) failed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dashboard_says_it_starts_then_its_url_once_it_listens(tmp_path: Path) -> None:
    port = _free_port()
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    open_storage(url).engine.dispose()  # the dashboard serves a storage; it never creates one
    proc = subprocess.Popen([str(SWEEPER), "dashboard", "--storage", url, "--port", str(port)],
                            cwd=tmp_path, env=dict(os.environ), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first == f"starting optuna-dashboard on http://127.0.0.1:{port} ...\n"
        lines = []
        while not lines or not lines[-1].startswith("optuna-dashboard for "):
            line = proc.stderr.readline()  # Bottle announces itself too
            assert line, "".join(lines)
            lines.append(line)
        assert lines[-1].startswith(f"optuna-dashboard for {url} on "
                                    f"http://127.0.0.1:{port}/dashboard "), lines
        # Printed once the port listened: the server answers now, without waiting.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=30) as r:
            assert r.status == 200
    finally:
        stop_process(proc, 20)
