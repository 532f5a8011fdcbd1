"""The runner's hot path on PostgreSQL: each step one statement, sent with autocommit on
(sweeper.study.oneshot). The protocol tests (test_study, test_idempotent_writes, the fault
matrix) run those steps end to end; these pin down the executor and the claim statement."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper.study import oneshot, open_storage, writes
from sweeper.study._bulk import TrialRow, insert_trials
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
