"""The locked bulk insert (sweeper.study.sql._bulk): on PostgreSQL one statement from arrays, on
SQLite a statement per table; both must leave exactly the rows Optuna and the index protocol
read."""

from __future__ import annotations

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper.protocol import ATTEMPT_ATTR, INDEX_ATTR, RETRY_OF_ATTR
from sweeper.study import open_storage
from sweeper.study.sql._bulk import TrialRow, exclusive, insert_trials


def test_inserted_trials_read_back_as_optuna_and_the_index_protocol_see_them(
        storage_url: str) -> None:
    storage = open_storage(storage_url)
    study = optuna.create_study(study_name="bulk", storage=storage)
    study.enqueue_trial({"x": 1.0})  # one trial before: the numbers go on from it
    sid = study._study_id  # noqa: SLF001
    rows = [TrialRow(index=0, params={"x": 0.5, "c": "a%b'"}, state=TrialState.WAITING),
            TrialRow(index=1, params=None, state=TrialState.WAITING),
            TrialRow(index=7, params={"x": 2}, state=TrialState.RUNNING, attempt=2,
                     retry_of=41)]
    with exclusive(storage.engine, sid) as conn:
        ids = insert_trials(conn, sid, rows)
    assert len(ids) == 3 and ids == sorted(ids)
    trials = [storage.get_trial(tid) for tid in ids]
    assert [t.number for t in trials] == [1, 2, 3]
    assert [t.state for t in trials] == [TrialState.WAITING, TrialState.WAITING,
                                         TrialState.RUNNING]
    assert [t.user_attrs.get(INDEX_ATTR) for t in trials] == [0, 1, 7]
    assert [t.user_attrs.get(ATTEMPT_ATTR) for t in trials] == [0, 0, 2]
    assert [t.user_attrs.get(RETRY_OF_ATTR) for t in trials] == [None, None, 41]
    assert [t.system_attrs.get("fixed_params") for t in trials] == \
        [{"x": 0.5, "c": "a%b'"}, None, {"x": 2}]
    assert trials[0].datetime_start is None and trials[2].datetime_start is not None
    with storage.engine.connect() as conn:
        beats = conn.execute(sa.text("SELECT trial_id FROM trial_heartbeats")).scalars().all()
    assert beats == [ids[2]]  # the RUNNING attempt starts with a heartbeat
    # Optuna's own reading of the study agrees (numbers in id order, enqueued params).
    assert [t.number for t in study.get_trials(deepcopy=False)] == [0, 1, 2, 3]
    assert study.trials[1].system_attrs["fixed_params"]["c"] == "a%b'"
    storage.engine.dispose()


def test_an_empty_insert_writes_nothing(storage_url: str) -> None:
    storage = open_storage(storage_url)
    sid = optuna.create_study(study_name="empty", storage=storage)._study_id  # noqa: SLF001
    with exclusive(storage.engine, sid) as conn:
        assert insert_trials(conn, sid, []) == []
    assert storage.get_all_trials(sid) == []
    storage.engine.dispose()
