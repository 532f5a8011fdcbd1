"""The runner's hot path on PostgreSQL: each step one statement, sent with autocommit on
(sweeper.study.sql.oneshot). The protocol tests (test_study, test_idempotent_writes, the fault
matrix) run those steps end to end; these pin down the executor and the claim statement."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper.study import open_storage
from sweeper.study.sql import oneshot, writes
from sweeper.study.sql._bulk import TrialRow, insert_trials
from tests.support.helpers import make_spec


def test_a_statement_alone_commits_itself_and_leaves_transactions_as_they_were(
        pg_url: str) -> None:
    storage = open_storage(pg_url)
    engine = storage.engine
    other = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE oneshot_probe (x integer)")
        rows, count = oneshot.run(engine, sa.text(
            "INSERT INTO oneshot_probe VALUES (:x) RETURNING x * 2"), {"x": 21})
        assert (rows, count) == ([(42,)], 1)
        with other.connect() as conn:  # committed without a COMMIT: autocommit
            assert conn.exec_driver_sql("SELECT x FROM oneshot_probe").all() == [(21,)]
        # The pooled connection is back in transaction mode: a rolled-back write vanishes.
        with engine.connect() as conn:
            conn.exec_driver_sql("INSERT INTO oneshot_probe VALUES (7)")
            conn.rollback()
        with other.connect() as conn:
            assert conn.exec_driver_sql("SELECT x FROM oneshot_probe").all() == [(21,)]
        assert oneshot.alone(engine)
        assert not oneshot.alone(open_storage("sqlite:///:memory:").engine)
    finally:
        other.dispose()
        storage.engine.dispose()


def test_the_claim_statement_wins_once_and_a_retry_finds_its_token(pg_url: str) -> None:
    from sweeper.study import create_or_resume

    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec(name="oneshot"))
    writes.ensure_table(storage.engine)
    with storage.engine.begin() as conn:
        (tid,) = insert_trials(conn, sweep.study_id, [TrialRow(index=99, params=None,
                                                             state=TrialState.WAITING)])
    now = datetime(2026, 1, 2, 3, 4, 5)
    engine = storage.engine
    assert writes.claim_alone(engine, tid, "a" * 32, start=now, heartbeat=True) == \
        (True, "WAITING")
    assert writes.claim_alone(engine, tid, "b" * 32, start=now, heartbeat=True) == \
        (False, "RUNNING")  # another caller: lost
    assert writes.claim_alone(engine, tid, "a" * 32, start=now, heartbeat=True) == \
        (True, "RUNNING")  # the winner's retry (its acknowledgement lost): its token is there
    assert writes.claim_alone(engine, tid + 1000, "c" * 32, start=now, heartbeat=True) == \
        (False, None)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT state, datetime_start FROM trials "
                                    "WHERE trial_id = :t"), {"t": tid}).one() == \
            ("RUNNING", now)
        assert conn.execute(sa.text("SELECT COUNT(*) FROM trial_heartbeats "
                                    "WHERE trial_id = :t"), {"t": tid}).scalar_one() == 1
        assert conn.execute(sa.text("SELECT token FROM sweeper_writes WHERE trial_id = :t"),
                            {"t": tid}).scalars().all() == ["a" * 32]
    engine.dispose()


def test_the_first_look_claims_only_what_the_runner_would_claim(pg_url: str) -> None:
    """``take`` claims an index's WAITING trial only when it is the latest attempt and none
    finished; otherwise it only reports the attempts (the runner then decides as before)."""
    from sweeper.study import create_or_resume
    from sweeper.study.sql.trials import open_trial

    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec(name="take"))
    got = storage.take(sweep.study_id, 0)
    assert got.claimed is not None and got.claimed.state == TrialState.WAITING  # as it was
    assert [a.trial_id for a in got.attempts] == [got.claimed.trial_id]
    tid = got.claimed.trial_id
    assert storage.get_trial(tid).state == TrialState.RUNNING
    assert open_trial(sweep.study(), tid).number == got.claimed.number
    again = storage.take(sweep.study_id, 0)
    assert again.claimed is None
    assert [a.state for a in again.attempts] == [TrialState.RUNNING]
    # A WAITING trial after a finished attempt is not claimed: the index is done.
    storage.set_trial_state_values(tid, TrialState.COMPLETE, [1.0])
    with storage.engine.begin() as conn:
        (late,) = insert_trials(conn, sweep.study_id, [TrialRow(index=0, params=None,
                                                                state=TrialState.WAITING)])
    done = storage.take(sweep.study_id, 0)
    assert done.claimed is None
    assert [a.state for a in done.attempts] == [TrialState.COMPLETE, TrialState.WAITING]
    assert storage.get_trial(late).state == TrialState.WAITING
    # A WAITING trial that is not the latest attempt is not claimed either.
    with storage.engine.begin() as conn:
        insert_trials(conn, sweep.study_id, [TrialRow(index=1, params=None,
                                                      state=TrialState.FAIL)])
    older = storage.take(sweep.study_id, 1)
    assert older.claimed is None
    assert [a.state for a in older.attempts] == [TrialState.WAITING, TrialState.FAIL]
    # SQLite: the attempts only; the runner claims in a statement of its own.
    lite = open_storage("sqlite:///:memory:")
    lite_sweep, _ = create_or_resume(lite, make_spec(name="take"))
    looked = lite.take(lite_sweep.study_id, 0)
    assert looked.claimed is None and [a.state for a in looked.attempts] == [TrialState.WAITING]
    storage.engine.dispose()


def test_a_trial_the_first_look_claimed_opens_from_its_read_as_from_a_query(
        pg_url: str) -> None:
    """``take`` reads the trial it claims in the same statement; the trial built from that
    read (no query) is the one Optuna reads from the database afterwards: number, state,
    start, params with their distributions (a categorical's external value too), user
    attributes with the ones the claim set winning over stored ones, system attributes."""
    from sweeper.study import create_or_resume
    from sweeper.study.sql.trials import open_claimed

    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec(name="opened"))
    tid = storage.attempts(sweep.study_id, 2)[0].trial_id
    storage.set_trial_user_attr(tid, "stamp", "before the claim")
    got = storage.take(sweep.study_id, 2, user_attrs={"stamp": "the claim's", "n": [1, 2]})
    assert got.claimed is not None and got.stored is not None and got.started is not None
    trial = open_claimed(sweep.study(), tid, got.claimed.number, got.started, got.stored)
    mine, stored = trial._cached_frozen_trial, storage.get_trial(tid)  # noqa: SLF001
    assert (mine.number, mine.state, mine.datetime_start) == \
        (stored.number, TrialState.RUNNING, stored.datetime_start)
    assert mine.params == stored.params and mine.params["b"] in ("x", "y")
    assert mine.distributions == stored.distributions
    assert mine.user_attrs == stored.user_attrs
    assert mine.user_attrs["stamp"] == "the claim's" and mine.user_attrs["n"] == [1, 2]
    assert mine.system_attrs == stored.system_attrs and mine.system_attrs["fixed_params"]
    assert trial.params == stored.params  # what the objective reads
    # Nothing claimed (the index is running now): nothing read either.
    again = storage.take(sweep.study_id, 2)
    assert again.claimed is None and again.stored is None
    storage.engine.dispose()


def test_the_driver_path_fails_and_reports_as_connection_execute_would(pg_url: str) -> None:
    """oneshot runs on the driver's cursor: its errors still come wrapped in SQLAlchemy's
    classes (what the retry layer classifies), a statement whose backend was killed leaves no
    broken connection in the pool, and the engine's cursor listeners see each statement."""
    from sweeper.study.retry import classify

    storage = open_storage(pg_url)
    engine = storage.engine
    seen: list[tuple[str, dict[str, object]]] = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda conn, cursor, sql, binds, *_: seen.append((sql, binds)))
    try:
        # ':name' binds in the driver's style; a literal percent sign and a ::cast survive.
        rows, count = oneshot.run(engine, "SELECT :a || '%' || 'x'::text, 5 % 3", {"a": "50"})
        assert (rows, count) == ([("50%x", 2)], 1)
        assert seen[-1][1] == {"a": "50"} and "%(a)s" in seen[-1][0]
        assert oneshot.run(engine, sa.text("SELECT 1 WHERE false"), {}) == ([], 0)
        try:
            oneshot.run(engine, "SELECT * FROM no_such_table_here", {})
        except sa.exc.ProgrammingError as e:
            assert classify(e) == "permanent" and not e.connection_invalidated
            assert "no_such_table_here" in str(e)
        else:
            raise AssertionError("a missing table must raise")
        (pid,), _ = oneshot.run(engine, "SELECT pg_backend_pid()", {})
        other = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://"))
        with other.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:p, 5000)"), {"p": pid[0]})
        other.dispose()
        try:
            oneshot.run(engine, "SELECT 1", {})
        except sa.exc.OperationalError as e:
            assert e.connection_invalidated and classify(e) == "transient"
        else:
            raise AssertionError("a statement on a terminated backend must fail")
        (fresh,), _ = oneshot.run(engine, "SELECT pg_backend_pid()", {})  # a new connection
        assert fresh[0] != pid[0]
    finally:
        engine.dispose()
