"""Reports written behind (trial_runner.reports): on PostgreSQL they wait at most the delay, go
with the finish when it comes first, and are written before a pruning decision and before a
FAIL; elsewhere (SQLite) each is written when it is made."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa

from sweeper._optuna_compat import own_copy, trial_id_of
from sweeper.protocol import HISTORY_ATTR
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec
from trial_runner.context import TrialContext
from trial_runner.reports import ReportWriter
from trial_runner.runner import RunnerSettings, run_index


def _settings(tmp_path: Path, delay: float) -> RunnerSettings:
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=5.0,
                          checkpoint_root=tmp_path / "ckpt", report_delay_s=delay)


def _stored(url: str, trial_id: int) -> optuna.trial.FrozenTrial:
    """The trial as the database has it, read through a storage of its own (no cache)."""
    storage = open_storage(url)
    try:
        return storage.get_trial(trial_id)
    finally:
        storage.engine.dispose()


def _statements(storage: Any) -> list[str]:
    seen: list[str] = []
    sa.event.listen(storage.engine, "before_cursor_execute",
                    lambda conn, cursor, sql, *_: seen.append(" ".join(sql.split())))
    return seen


def _trial(url: str) -> tuple[Any, optuna.Trial]:
    storage = open_storage(url)
    sweep, _ = create_or_resume(storage, make_spec())
    study = sweep.runner_study(optuna.samplers.RandomSampler(seed=0),
                               optuna.pruners.NopPruner())
    return storage, study.ask()


def test_reports_and_sets_go_with_the_finish_in_one_statement(pg_url: str,
                                                              tmp_path: Path) -> None:
    """Three reports, a ctx.set and a dict result's extra metric: on PostgreSQL the only write
    after the claim is the finishing statement, and it wrote all of them, in order (the set
    after a report of the same name wins)."""
    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec())

    def objective(ctx: TrialContext) -> dict[str, float]:
        for step in range(3):
            ctx.report(step, loss=10.0 - step, acc=0.5 + step / 10)
        ctx.set("acc", 0.99)
        return {"loss": 1.0, "extra": 7.0}

    run_index(sweep, 0, objective, _settings(tmp_path, 60.0))  # warm: loads the study
    seen = _statements(storage)
    assert run_index(sweep, 1, objective, _settings(tmp_path, 60.0)).state == "COMPLETE"
    writes = [s for s in seen if "INSERT" in s or "UPDATE" in s]
    assert len(writes) == 2, writes  # the claim, the finish
    assert writes[-1].count("INSERT INTO trial_intermediate_values") == 3
    [a] = storage.attempts(sweep.study_id, 1)
    t = _stored(pg_url, a.trial_id)
    assert t.state == optuna.trial.TrialState.COMPLETE and t.value == 1.0
    assert t.intermediate_values == {0: 10.0, 1: 9.0, 2: 8.0}
    assert t.user_attrs["acc"] == 0.99 and t.user_attrs["extra"] == 7.0
    assert t.user_attrs[HISTORY_ATTR]["loss"] == [[0, 10.0], [1, 9.0], [2, 8.0]]


def test_a_report_is_written_within_the_delay_while_the_trial_runs(pg_url: str) -> None:
    storage, trial = _trial(pg_url)
    writer = ReportWriter(trial, 0.3)
    writer.add(user_attrs={"acc": 0.5}, report=(0, 2.5))
    assert own_copy(trial).intermediate_values == {0: 2.5}  # its own copy shows it at once
    deadline = time.monotonic() + 30
    while _stored(pg_url, trial_id_of(trial)).intermediate_values != {0: 2.5}:
        assert time.monotonic() < deadline, "the report was never written"
        time.sleep(0.1)
    assert _stored(pg_url, trial_id_of(trial)).user_attrs["acc"] == 0.5
    storage.engine.dispose()


def test_a_second_report_of_a_step_keeps_the_first(pg_url: str) -> None:
    storage, trial = _trial(pg_url)
    writer = ReportWriter(trial, 60.0)
    writer.add(report=(0, 2.5))
    with pytest.warns(UserWarning, match="already reported"):
        writer.add(report=(0, 9.0))
    writer.flush()
    assert _stored(pg_url, trial_id_of(trial)).intermediate_values == {0: 2.5}
    storage.engine.dispose()


def test_should_prune_writes_the_reports_first(pg_url: str, tmp_path: Path) -> None:
    """The pruner reads the trial from the storage: with a delay of a minute the report must
    still be there when ctx.should_prune() returns."""
    storage, trial = _trial(pg_url)
    ctx = TrialContext(params={}, index=0, trial_number=trial.number, attempt=0,
                       checkpoint_dir=tmp_path, trial=trial, objective_metrics=("loss",),
                       writer=ReportWriter(trial, 60.0))
    ctx.report(0, loss=3.0)
    assert _stored(pg_url, trial_id_of(trial)).intermediate_values == {}
    assert ctx.should_prune() is False
    assert _stored(pg_url, trial_id_of(trial)).intermediate_values == {0: 3.0}
    storage.engine.dispose()


def test_a_failed_trial_keeps_its_reports(pg_url: str, tmp_path: Path) -> None:
    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec())

    def objective(ctx: TrialContext) -> float:
        ctx.report(0, loss=4.0)
        ctx.report(1, loss=3.0)
        raise RuntimeError("diverged")

    assert run_index(sweep, 0, objective, _settings(tmp_path, 60.0)).state == "FAIL"
    [a] = storage.attempts(sweep.study_id, 0)
    t = _stored(pg_url, a.trial_id)
    assert t.state == optuna.trial.TrialState.FAIL
    assert t.intermediate_values == {0: 4.0, 1: 3.0}


def test_a_write_that_fails_stays_pending(pg_url: str) -> None:
    """The trial was failed behind the runner's back: the flush raises, and what was pending
    is still pending (a later flush says so again) instead of silently dropped."""
    storage, trial = _trial(pg_url)
    writer = ReportWriter(trial, 60.0)
    writer.add(report=(0, 1.0))
    assert storage.mark_failed(trial_id_of(trial), "stale")
    for _ in range(2):
        with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
            writer.flush()
    writer.flush_quietly()  # logged, not raised
    storage.engine.dispose()


def test_a_value_that_is_not_json_raises_when_set(pg_url: str) -> None:
    storage, trial = _trial(pg_url)
    writer = ReportWriter(trial, 60.0)
    with pytest.raises(TypeError):
        writer.add(user_attrs={"model": object()})
    writer.flush_quietly()
    storage.engine.dispose()


def test_sqlite_writes_each_report_when_it_is_made(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    storage, trial = _trial(url)
    writer = ReportWriter(trial, 60.0)
    assert writer.delay_s == 0.0
    writer.add(user_attrs={"acc": 0.5}, report=(0, 2.5))
    stored = _stored(url, trial_id_of(trial))
    assert stored.intermediate_values == {0: 2.5} and stored.user_attrs["acc"] == 0.5
    storage.engine.dispose()
