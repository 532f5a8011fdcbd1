"""Launching through the application layer, without click: ``launch`` and ``resume`` return
what ran, ``conclude`` what the launch says last and its exit code, the summaries what
``run`` prints."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sweeper.app.launch import conclude, launch, resume, summary_record, summary_text
from sweeper.app.options import LaunchOptions, StorageOptions
from sweeper.errors import OptionError, SpecError, SweepFailedError
from sweeper.study import load_sweep, open_storage
from tests.support.compare import isolate, quadratic_spec


def _spec_file(tmp_path: Path, name: str, **over: object) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(quadratic_spec(name, trials=3, **over), sort_keys=False))
    return str(path)


def test_launch_runs_every_index_and_resume_runs_none_again(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    said: list[str] = []
    options = LaunchOptions(storage=StorageOptions(sqlite_url, 0.0))
    done = launch(_spec_file(tmp_path, "app-run"), options, said.append)
    assert done.started and done.todo == (0, 1, 2) and done.backend.name == "local"
    assert done.result is not None and sorted(done.result.finished) == [0, 1, 2]
    assert [s.state for s in done.table] == ["COMPLETE"] * 3
    assert any(line.startswith("sweep app-run: random, 3 indexes, parallelism 2, backend local")
               for line in said)
    assert conclude(done, said.append) == 0
    assert "this launch: 3 of 3 indexes finished" in said
    record = summary_record(done)
    assert record["finished_indexes"] == 3 and record["unfinished_indexes"] == []
    assert record["best"] is not None and record["backend"] == "local"
    assert "best trials of app-run:" in summary_text(done)

    again = resume("app-run", LaunchOptions(storage=StorageOptions(sqlite_url, 0.0)), said.append)
    assert again.todo == () and again.result is None
    assert "resuming: 3 of 3 indexes already finished" in said
    assert load_sweep(open_storage(sqlite_url), "app-run").spec.trials == 3


def test_a_failing_index_is_a_sweep_failed_error_naming_it(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    spec = _spec_file(tmp_path, "app-fail", trial={
        "command": ["python", "-c", "import sys; print('boom'); sys.exit(3)"], "retries": 0})
    said: list[str] = []
    done = launch(spec, LaunchOptions(storage=StorageOptions(sqlite_url, 0.0)), said.append)
    with pytest.raises(SweepFailedError, match=r"3 index\(es\) failed for good: 0-2; see "
                                               r"`sweeper status app-fail`"):
        conclude(done, said.append)
    assert any("sweeper logs app-fail --index 0" in line for line in said)


def test_bad_options_stop_before_anything_is_written(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    spec = _spec_file(tmp_path, "app-bad")
    with pytest.raises(OptionError, match="--proxy is for the local backend"):
        launch(spec, LaunchOptions(storage=StorageOptions(sqlite_url), backend="kubernetes",
                                   proxy=True), print)
    with pytest.raises(SpecError):
        launch(spec, LaunchOptions(storage=StorageOptions(sqlite_url),
                                   overrides=("trials=-1",)), print)
    assert not (tmp_path / "sweeps.db").exists()
