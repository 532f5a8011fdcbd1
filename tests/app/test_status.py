"""status, best and export through the application layer, without click: each returns its view
model, and the renderings beside it are what the CLI prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper.app.listing import list_record, list_sweeps, list_table
from sweeper.app.options import StorageOptions
from sweeper.app.results import best, best_table, export, write_export
from sweeper.app.status import StatusOptions, status, status_lines, status_record
from sweeper.errors import StudyNotFoundError, SweepFailedError
from sweeper.spec import parse_spec_dict
from sweeper.study import create_or_resume, open_storage
from tests.support.compare import isolate, quadratic_spec, run_sweep


def test_status_reads_every_index_and_renders_table_and_json(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, sqlite_url, quadratic_spec("app-status", trials=3))
    view = status("app-status", StatusOptions(StorageOptions(sqlite_url), kubernetes=False))
    assert (view.name, view.indexes, view.finished_indexes) == ("app-status", 3, 3)
    assert view.trials_by_state == {"COMPLETE": 3} and view.cluster is None
    assert [r.status.index for r in view.rows] == [0, 1, 2]
    assert all(r.state == "COMPLETE" and r.status.values for r in view.rows)
    record = json.loads(json.dumps(status_record(view)))
    assert list(record)[:8] == ["name", "method", "indexes", "finished_indexes",
                                "trials_by_state", "stop", "code", "spending"]
    assert "kubernetes_jobs" not in record and "rungs" not in record
    assert [r["index"] for r in record["per_index"]] == [0, 1, 2]
    assert record["per_index"][0]["values"].keys() == {"loss"}
    lines = status_lines(view)
    assert lines[0].startswith("app-status: 3/3 indexes finished; trials: complete 3")
    assert lines[1].splitlines()[0].split() == ["index", "state", "attempts", "trial", "loss"]


def test_status_renders_the_pod_of_each_index_and_an_open_ended_jobs_slots(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the Kubernetes backend describes (the real cluster's in tests/backends): a pod
    column and ``"pod"`` per index; a slot Job's line and record count slots."""
    import dataclasses

    from sweeper.backends.base import Description, Workload

    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, sqlite_url, quadratic_spec("app-pods", trials=3))
    view = status("app-pods", StatusOptions(StorageOptions(sqlite_url), kubernetes=False))
    slots = Workload("Job", "app-pods", "ns", "Complete", None, 0, 0, 2, 0, (0, 1), (0, 1), (),
                     stride=2)
    seen = dataclasses.replace(view, cluster=Description(
        (slots,), pods=((0, "app-pods-0-aaaaa"), (1, "app-pods-1-bbbbb"),
                        (2, "app-pods-0-aaaaa"))))
    lines = status_lines(seen)
    assert "slots completed 0-1, failed - (of 2); slot j runs indexes j, j+2, ..." in lines[1]
    table = lines[2].splitlines()
    assert table[0].split()[-1] == "pod"
    assert [row.split()[-1] for row in table[2:]] == \
        ["app-pods-0-aaaaa", "app-pods-1-bbbbb", "app-pods-0-aaaaa"]
    record = status_record(seen)
    assert [r["pod"] for r in record["per_index"]] == \
        ["app-pods-0-aaaaa", "app-pods-1-bbbbb", "app-pods-0-aaaaa"]
    (job,) = record["kubernetes_jobs"]
    assert (job["slots"], job["completed_slots"], job["failed_slots"]) == (2, [0, 1], [])
    assert "indexes" not in job and "pod" not in status_record(view)["per_index"][0]


def test_status_of_a_sweep_that_is_not_there_names_it(sqlite_url: str) -> None:
    create_or_resume(open_storage(sqlite_url),
                     parse_spec_dict(quadratic_spec("other", trials=1), source="<test>"))
    with pytest.raises(StudyNotFoundError, match="missing"):
        status("missing", StatusOptions(StorageOptions(sqlite_url), kubernetes=False))


def test_best_and_export_return_the_trials_records(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    storage = StorageOptions(sqlite_url)
    create_or_resume(open_storage(sqlite_url),
                     parse_spec_dict(quadratic_spec("app-best", trials=2), source="<test>"))
    with pytest.raises(SweepFailedError, match="no complete trial yet"):
        best("app-best", storage)
    run_sweep(tmp_path, sqlite_url, quadratic_spec("app-best", trials=2))
    view = best("app-best", storage)
    doc = export("app-best", storage)
    losses = [t["values"]["loss"] for t in doc["trials"]]
    assert view.records[0]["values"]["loss"] == min(losses)
    assert view.document()["study"] == "app-best" and not view.multi_objective
    table = best_table(view).splitlines()
    assert table[0].split() == ["trial", "index", "loss", "x", "opt"] and len(table) == 3
    assert table[2].split()[0] == str(view.records[0]["number"])
    out = tmp_path / "trials.json"
    write_export(doc, "json", out)
    assert [t["number"] for t in json.loads(out.read_text())["trials"]] == [0, 1]
    assert not (tmp_path / ".trials.json.tmp").exists()


def test_list_names_every_sweep_of_the_storage(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, sqlite_url, quadratic_spec("app-list", trials=2))
    view = list_sweeps(StorageOptions(sqlite_url))
    assert [s.name for s in view.sweeps] == ["app-list"] and not view.has_plain_studies
    record = list_record(view)
    assert record[0]["finished_indexes"] == 2 and record[0]["sweeper"] is True
    assert "app-list" in list_table(view).splitlines()[2]


def test_status_costs_the_same_few_statements_for_any_number_of_trials(
        sqlite_url: str) -> None:
    """status reads the index table through the index store (grouped queries), never the
    trials one by one: a sweep of 60 indexes costs what one of 3 costs."""
    import sqlalchemy as sa

    storage = open_storage(sqlite_url)
    for name, trials in (("few", 3), ("many", 60)):
        create_or_resume(storage, parse_spec_dict(quadratic_spec(name, trials=trials),
                                                  source="<test>"))

    def statements(name: str) -> int:
        seen: list[str] = []

        def count(*args: object) -> None:
            seen.append(str(args[2]))

        sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
        try:
            view = status(name, StatusOptions(StorageOptions(sqlite_url), kubernetes=False))
        finally:
            sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)
        assert len(view.rows) == view.indexes and view.trials_by_state == {
            "WAITING": view.indexes}
        return len(seen)

    assert statements("many") == statements("few")


def test_status_shows_no_cluster_for_a_local_sweep_and_a_required_one_fails(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeper.errors import BackendError

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setenv("HOME", str(tmp_path))
    create_or_resume(open_storage(sqlite_url),
                     parse_spec_dict(quadratic_spec("local", trials=1), source="<test>"))
    storage = StorageOptions(sqlite_url)
    assert status("local", StatusOptions(storage)).cluster is None  # never launched there
    with pytest.raises(BackendError) as raised:
        status("local", StatusOptions(storage, kubernetes=True))
    assert raised.value.exit_code == 3
