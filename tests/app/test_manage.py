"""Logs, cancel and delete through the application layer, without click: each returns its
view model, and the backend is picked from what the sweep's launch recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeper.app.backends import BackendOptions, holders, where_it_ran
from sweeper.app.manage import (
    DeleteOptions,
    LogRequest,
    cancel,
    delete,
    logs,
    plan_deletion,
    resume_hint,
)
from sweeper.app.options import ClusterOptions, StorageOptions
from sweeper.backends.base import SweepRef
from sweeper.errors import OptionError, StudyNotFoundError, SweeperError
from sweeper.study import create_or_resume, load_sweep, open_storage
from tests.support.compare import isolate, quadratic_spec, run_sweep
from tests.support.helpers import make_spec


def test_logs_of_a_local_sweep_come_from_its_recorded_log_directory(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, sqlite_url, quadratic_spec("app-logs", trials=2))
    storage = StorageOptions(sqlite_url)
    view = logs("app-logs", LogRequest(index=1), storage)
    assert len(view.notes) == 1 and view.notes[0].startswith("file ")
    assert "(index 1, attempt 0, trial #" in view.notes[0]
    assert view.text  # the runner's output
    tail = logs("app-logs", LogRequest(index=1, tail=1), storage)
    assert tail.text.count("\n") <= 1
    with pytest.raises(OptionError, match=r"sweep app-logs has indexes 0\.\.1"):
        logs("app-logs", LogRequest(index=2), storage)
    with pytest.raises(OptionError, match="--follow follows the latest attempt"):
        logs("app-logs", LogRequest(index=0, attempt=0, follow=True), storage)
    with pytest.raises(SweeperError, match="holds no attempt 5 of index 0"):
        logs("app-logs", LogRequest(index=0, attempt=5), storage)


def test_a_local_sweep_is_cancelled_where_it_runs(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, sqlite_url, quadratic_spec("app-cancel", trials=2))
    sweep = load_sweep(open_storage(sqlite_url), "app-cancel")
    assert where_it_ran(SweepRef(sweep.name, sweep), BackendOptions()).name == "local"
    view = cancel("app-cancel", StorageOptions(sqlite_url))
    assert view.unfinished == () and resume_hint(view) is None
    assert view.failed_trials == () and "Ctrl-C" in view.lines[0]


def test_delete_plans_then_removes_the_study_its_artifacts_and_local_directories(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, sqlite_url, quadratic_spec("app-del", trials=2))
    storage = StorageOptions(sqlite_url)
    plan = plan_deletion("app-del", storage, DeleteOptions(on_cluster=False))
    assert plan.question.startswith("delete sweep app-del: 2 trial(s) in sqlite:///")
    assert "; 2 artifact(s) in " in plan.question
    assert [b.name for b, _ in plan.held] == ["local"]
    local = dict(plan.held[0][1].items)
    assert set(local) == {"logs", "checkpoints"}
    report = delete(plan)
    assert report.lines[0].startswith("deleted sweep app-del (2 trial(s)) from ")
    assert report.lines[1].startswith("removed 2 artifact file(s) from ")
    assert f"removed the local logs {local['logs']}" in report.lines
    assert not Path(local["logs"]).exists()
    with pytest.raises(StudyNotFoundError, match="no sweep named 'app-del'"):
        plan_deletion("app-del", storage)


def test_delete_options_that_do_not_go_together(sqlite_url: str) -> None:
    create_or_resume(open_storage(sqlite_url), make_spec(name="app-opts"))
    storage = StorageOptions(sqlite_url)
    with pytest.raises(OptionError, match="--volume-dir goes with --purge-artifacts"):
        plan_deletion("app-opts", storage, DeleteOptions(volume_dir=Path(".")))
    with pytest.raises(OptionError, match=r"has no kubernetes\.checkpoint_volume"):
        plan_deletion("app-opts", storage, DeleteOptions(purge_artifacts=True,
                                                         volume_dir=Path(".")))


def test_the_cluster_holds_a_sweep_only_when_asked_or_launched_there(
        sqlite_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url), make_spec(name="app-where"))
    nowhere = ClusterOptions(kubeconfig=str(tmp_path / "missing"))
    assert [b.name for b in holders(sweep, None, nowhere)] == ["local"]
    assert [b.name for b in holders(sweep, False, nowhere)] == ["local"]
    assert [b.name for b in holders(sweep, True, nowhere)] == ["local", "kubernetes"]
