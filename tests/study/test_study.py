"""The sweep record, bulk enqueue and the index protocol's storage operations, on both storages."""

from __future__ import annotations

import threading

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper.errors import SpecError
from sweeper.protocol import INDEX_ATTR
from sweeper.space import grid_point
from sweeper.study import create_or_resume, load_sweep, open_storage
from tests.support.helpers import make_spec, race_new_attempts


def test_grid_is_enqueued_up_front_one_waiting_trial_per_index(storage_url: str) -> None:
    storage = open_storage(storage_url)
    spec = make_spec()
    sweep, created = create_or_resume(storage, spec)
    assert created
    trials = sweep.study().get_trials()
    assert len(trials) == spec.trials == 10
    assert all(t.state == TrialState.WAITING for t in trials)
    by_index = {t.user_attrs[INDEX_ATTR]: t for t in trials}
    assert sorted(by_index) == list(range(10))
    for i, t in by_index.items():
        assert t.system_attrs["fixed_params"] == grid_point(spec, i)
    assert [t.number for t in trials] == list(range(10))
    # the stored record reads back as the same spec
    assert load_sweep(storage, spec.name).spec == spec


def test_enqueue_is_bulk_not_one_round_trip_per_trial(storage_url: str) -> None:
    storage = open_storage(storage_url)
    spec = make_spec(method="random", trials=2000)
    statements: list[str] = []
    sa.event.listen(storage.engine, "before_cursor_execute",
                    lambda *a: statements.append(a[2]))
    create_or_resume(storage, spec)
    assert storage.state_counts(storage.get_study_id_from_name(spec.name)) == {"WAITING": 2000}
    inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT")]
    # trials, user attrs, system attrs, study attrs: a handful of statements (executemany
    # batches), never thousands
    assert len(statements) < 60, len(statements)
    assert len(inserts) < 40


def test_resume_same_spec_adds_nothing_and_changed_spec_is_refused(storage_url: str) -> None:
    storage = open_storage(storage_url)
    spec = make_spec()
    create_or_resume(storage, spec)
    sweep, created = create_or_resume(storage, spec.with_overrides(parallelism=8))
    assert not created
    assert len(sweep.study().get_trials()) == 10
    changed = make_spec(parameters={"a": {"type": "float", "low": 0.0, "high": 2.0, "step": 0.5},
                                    "b": {"type": "categorical", "choices": ["x", "y"]}})
    with pytest.raises(SpecError, match="parameters"):
        create_or_resume(storage, changed)
    assert len(sweep.study().get_trials()) == 10


def test_concurrent_launches_enqueue_once(storage_url: str) -> None:
    spec = make_spec(method="random", trials=50)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def launch() -> None:
        try:
            barrier.wait(timeout=30)
            create_or_resume(open_storage(storage_url), spec)
        except BaseException as e:  # noqa: BLE001 - collected and asserted empty below
            errors.append(e)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    storage = open_storage(storage_url)
    trials = optuna.load_study(study_name=spec.name, storage=storage).get_trials()
    assert len(trials) == 50
    assert sorted(t.user_attrs[INDEX_ATTR] for t in trials) == list(range(50))


def test_claim_is_atomic(storage_url: str) -> None:
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())
    waiting = storage.attempts(sweep.study_id, 3)[0]
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def race() -> None:
        own = open_storage(storage_url)
        barrier.wait()
        results.append(own.claim(waiting.trial_id))

    threads = [threading.Thread(target=race) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]


def test_new_attempt_is_exclusive_and_linked(storage_url: str) -> None:
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())
    first = storage.attempts(sweep.study_id, 4)[0]
    assert storage.set_trial_state_values(first.trial_id, TrialState.RUNNING)
    assert storage.mark_failed(first.trial_id, "boom")
    failed = storage.attempts(sweep.study_id, 4)[0]
    created = race_new_attempts(storage_url, sweep, 4, after=failed)
    winners = [c for c in created if c is not None]
    assert len(winners) == 1
    atts = storage.attempts(sweep.study_id, 4)
    assert [a.state for a in atts] == [TrialState.FAIL, TrialState.RUNNING]
    assert atts[1].attempt == 1 and atts[1].heartbeat_age_s is not None
    new = storage.get_trial(winners[0])
    assert new.user_attrs["sweeper:retry_of"] == failed.number
    assert new.system_attrs["fixed_params"] == grid_point(sweep.spec, 4)
    assert storage.get_trial(failed.trial_id).user_attrs["sweeper:fail_reason"] == "boom"


def test_index_lookup_can_use_the_partial_index(pg_url: str) -> None:
    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec(method="random", trials=3000))
    with storage.engine.connect() as conn:
        conn.execute(sa.text("ANALYZE"))
        conn.execute(sa.text("SET enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(sa.text(
            "EXPLAIN SELECT t.trial_id FROM trial_user_attributes ua JOIN trials t "
            "ON t.trial_id = ua.trial_id WHERE ua.key = 'sweeper:index' "
            "AND ua.value_json = '1234' AND t.study_id = :s"), {"s": sweep.study_id}))
    assert "ix_sweeper_index" in plan
    assert len(storage.attempts(sweep.study_id, 1234)) == 1


def test_open_trial_reads_what_optuna_trial_reads(storage_url: str) -> None:
    """The runner's one-query trial equals optuna.Trial(study, id) for a claimed trial, and
    falls back to Optuna's own read for anything else."""
    from sweeper.study.sql.trials import attach_trial, open_trial

    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())
    [a] = storage.attempts(sweep.study_id, 5)
    assert storage.claim(a.trial_id)
    study = sweep.study()
    number = attach_trial(study, a.trial_id)
    mine = open_trial(study, a.trial_id, number)
    theirs = optuna.Trial(study, a.trial_id)
    for key in ("number", "state", "params", "distributions", "user_attrs", "system_attrs",
                "intermediate_values", "values"):
        assert getattr(mine._cached_frozen_trial, key) == \
            getattr(theirs._cached_frozen_trial, key), key  # noqa: SLF001
    assert mine._cached_frozen_trial.datetime_start == \
        theirs._cached_frozen_trial.datetime_start  # noqa: SLF001
    # A planned trial's params are stored with it when it is enqueued: the runner has none
    # to write, and suggest_* returns them without a write.
    assert mine.params == grid_point(sweep.spec, 5)
    assert mine.suggest_float("a", 0.0, 1.0, step=0.25) == grid_point(sweep.spec, 5)["a"]
    mine.report(0.5, 1)  # now it has a report: Optuna's path
    again = open_trial(study, a.trial_id, number)
    assert again.params == mine.params
    assert again._cached_frozen_trial.intermediate_values == {1: 0.5}  # noqa: SLF001


def _claimed_trial(storage_url: str, index: int = 5) -> tuple[object, optuna.Trial]:
    """A planned index's second attempt (a retry: its fixed params, no params stored yet, as
    the enqueue stores them for a first attempt) as the runner opens it: read and attached to
    the cache in one query."""
    from sweeper.study.sql.trials import open_trial

    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())
    [a] = storage.attempts(sweep.study_id, index)
    assert storage.claim(a.trial_id)
    storage.mark_failed(a.trial_id, "a test")
    fixed = storage.get_trial(a.trial_id).system_attrs["fixed_params"]
    tid = storage.new_attempt(sweep.study_id, index, after=a, params=fixed)
    assert tid is not None
    trial = open_trial(sweep.study(), tid)
    assert trial.number == sweep.spec.trials and trial.params == {}
    return storage, trial


def test_write_trial_is_one_transaction_that_suggest_and_report_then_reuse(
        storage_url: str) -> None:
    """A planned trial's params, a report and user attrs: one commit; the stored trial is what
    Optuna's own calls would have written; suggest_* then returns the value without a write."""
    from optuna.distributions import FloatDistribution

    from sweeper._optuna_compat import fixed_params_of
    from sweeper.study.trials import write_trial

    storage, trial = _claimed_trial(storage_url)
    a = fixed_params_of(trial)["a"]
    dist = FloatDistribution(0.0, 1.0, step=0.25)
    commits: list[int] = []
    statements: list[str] = []
    sa.event.listen(storage.engine, "commit", lambda conn: commits.append(1))
    sa.event.listen(storage.engine, "before_cursor_execute",
                    lambda conn, cursor, sql, *_: statements.append(sql.split()[0]))
    write_trial(trial, user_attrs={"loss": 0.5, "history": {"loss": [[0, 0.5]]}},
                params={"a": (a, dist)}, report=(0, 0.5))
    if storage.engine.dialect.name == "postgresql":  # one statement, committing by itself
        assert (statements, commits) == (["WITH"], [])
    else:
        assert len(commits) == 1
    stored = storage.get_trial(trial._trial_id)  # noqa: SLF001
    assert stored.params == {"a": a} and stored.distributions == {"a": dist}
    assert stored.intermediate_values == {0: 0.5}
    assert stored.user_attrs["loss"] == 0.5
    assert stored.user_attrs["history"] == {"loss": [[0, 0.5]]}
    commits.clear()
    statements.clear()
    assert trial.suggest_float("a", 0.0, 1.0, step=0.25) == a
    assert trial.params == {"a": a} and trial.user_attrs["loss"] == 0.5
    assert commits == [] and statements == []
    with pytest.warns(UserWarning, match="already reported"):
        write_trial(trial, report=(0, 9.0))  # as Trial.report: the first value stays
    assert storage.get_trial(trial._trial_id).intermediate_values == {0: 0.5}  # noqa: SLF001


def test_write_trial_checks_the_trial_in_its_upserts_not_in_a_select_first(
        storage_url: str) -> None:
    """One guarded upsert per table on the hot path; the state is read only when a statement
    wrote fewer rows than it had (here: the retry of the same write, which must pass)."""
    from optuna.distributions import FloatDistribution

    from sweeper.study.trials import write_trial

    storage, trial = _claimed_trial(storage_url)
    statements: list[str] = []
    sa.event.listen(storage.engine, "before_cursor_execute",
                    lambda conn, cursor, sql, *_: statements.append(sql.split()[0]))
    dist = FloatDistribution(0.0, 1.0)
    write_trial(trial, user_attrs={"x": 1, "y": 2}, params={"b": (0.5, dist), "c": (0.25, dist)},
                report=(1, 2.0))
    # PostgreSQL: the three upserts are one statement, WITH ... (sweeper.study.sql.oneshot).
    upsert = "WITH" if storage.engine.dialect.name == "postgresql" else "INSERT"
    assert statements == ([upsert] if upsert == "WITH" else [upsert] * 3)
    statements.clear()
    tid = trial._trial_id  # noqa: SLF001
    from sweeper.study.sql.trials import _param_rows, _write

    backend = storage  # the retried write of the same params: rows exist, trial unfinished
    _write(backend, tid, _param_rows({"b": (0.5, dist)}))
    assert statements == [upsert, "SELECT"]
    stored = storage.get_trial(tid)
    assert stored.params == {"b": 0.5, "c": 0.25} and stored.intermediate_values == {1: 2.0}
    assert (stored.user_attrs["x"], stored.user_attrs["y"]) == (1, 2)
    with pytest.raises(KeyError):
        _write(backend, tid + 1000, _param_rows({"b": (0.5, dist)}))


def test_write_trial_on_a_finished_trial_writes_nothing(storage_url: str) -> None:
    from optuna.distributions import FloatDistribution

    from sweeper.study.trials import write_trial

    storage, trial = _claimed_trial(storage_url)
    tid = trial._trial_id  # noqa: SLF001
    assert storage.mark_failed(tid, "gone")
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        write_trial(trial, user_attrs={"x": 1}, params={"b": (0.5, FloatDistribution(0, 1))},
                    report=(1, 2.0))
    stored = storage.get_trial(tid)
    assert stored.params == {} and stored.intermediate_values == {}
    assert "x" not in stored.user_attrs
