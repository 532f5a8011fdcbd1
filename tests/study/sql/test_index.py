"""The index protocol's steps on a database (sweeper/study/sql/index.py), each decision pinned
on SQLite and on PostgreSQL, whose steps are single statements of their own (the claim inside
``take``, the one-statement claim and attempts). One PostgreSQL database serves the module
(each test makes a sweep of its own in it), so that ``make mutate`` can run these cases for
every mutant of the module in seconds."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import FrozenTrial, TrialState

from sweeper.protocol import FAIL_REASON_ATTR, INDEX_ATTR, STOP_ATTR
from sweeper.study import open_storage
from sweeper.study.retry import StorageFailure
from sweeper.study.sql import index
from sweeper.study.sql.store import SqlStore
from sweeper.study.values import NextTake
from tests.conftest import PG_ADMIN_URL
from tests.support.helpers import drop_database, make_spec

STOPPED = {"state": "stopped", "rule": "max_failed_trials", "reason": "3 failed",
           "at": "2026-01-01T00:00:00Z"}


@pytest.fixture(scope="module")
def pg_database(pg_admin: sa.Engine) -> Iterator[str]:
    """One fresh PostgreSQL database for this module's cases."""
    name = f"sweeper_test_{uuid.uuid4().hex[:10]}"
    with pg_admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    drop_database(pg_admin, name)


def _open(url: str) -> SqlStore:
    store = open_storage(url)
    assert isinstance(store, SqlStore)
    return store


@pytest.fixture(params=["sqlite", "pg"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlStore]:
    """The index store on SQLite, then on PostgreSQL."""
    url = (f"sqlite:///{tmp_path}/sweeps.db" if request.param == "sqlite"
           else str(request.getfixturevalue("pg_database")))
    s = _open(url)
    yield s
    s.close()


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[SqlStore]:
    s = _open(pg_database)
    yield s
    s.close()


def _sweep(store: SqlStore) -> int:
    """A new grid sweep of 10 indexes (one WAITING trial each): its study id."""
    return store.create_or_resume(make_spec(name=f"ix-{uuid.uuid4().hex[:8]}")).study_id


def _running(store: SqlStore, study_id: int, index: int) -> int:
    """Claim ``index``'s first attempt: its trial id."""
    tid = store.attempts(study_id, index)[0].trial_id
    assert store.claim(tid)
    return tid


def _failed(store: SqlStore, study_id: int, index: int) -> int:
    tid = _running(store, study_id, index)
    assert store.mark_failed(tid, "boom")
    return tid


# ---- attempts


def test_attempts_are_the_index_oldest_first_with_ages_of_running_ones(store: SqlStore) -> None:
    sid = _sweep(store)
    other = _sweep(store)  # the same index in another sweep is not this sweep's
    first = _failed(store, sid, 4)
    after = store.attempts(sid, 4)[0]
    second = store.new_attempt(sid, 4, after=after, params=None)
    atts = store.attempts(sid, 4)
    assert [(a.trial_id, a.state, a.attempt) for a in atts] == [
        (first, TrialState.FAIL, 0), (second, TrialState.RUNNING, 1)]
    assert atts[0].number < atts[1].number
    assert atts[0].heartbeat_age_s is None  # only a RUNNING trial has an age
    age = atts[1].heartbeat_age_s
    assert age is not None and 0 <= age < 3600
    waiting = store.attempts(sid, 5)
    assert [(a.state, a.attempt, a.heartbeat_age_s) for a in waiting] == [
        (TrialState.WAITING, 0, None)]
    assert store.attempts(sid, 10) == []  # past the sweep: no attempt
    assert [a.state for a in store.attempts(other, 4)] == [TrialState.WAITING]


def test_a_claimed_trial_has_a_heartbeat_and_its_age_comes_from_it(store: SqlStore) -> None:
    sid = _sweep(store)
    tid = _running(store, sid, 0)
    [att] = store.attempts(sid, 0)
    assert att.trial_id == tid and att.state == TrialState.RUNNING
    assert att.heartbeat_age_s is not None and 0 <= att.heartbeat_age_s < 3600
    assert store.fail_stale_trials(sid, 3600) == []
    assert store.fail_stale_trials(sid, -1) == [tid]  # it had a heartbeat to be stale


# ---- claim


def test_a_claim_is_won_once_and_a_retry_finds_its_own_win(store: SqlStore) -> None:
    sid = _sweep(store)
    tid = store.attempts(sid, 2)[0].trial_id
    before = datetime.now(timezone.utc).replace(tzinfo=None)
    assert store.claim(tid, token="first-call")
    started = store.get_trial(tid).datetime_start  # the claim starts the trial
    assert started is not None and before <= started <= datetime.now(timezone.utc).replace(
        tzinfo=None)
    assert not store.claim(tid, token="second-call")
    assert store.claim(tid, token="first-call")  # its acknowledgement was lost: it won
    assert not store.claim(tid)
    assert store.get_trial(tid).state == TrialState.RUNNING


def test_a_claim_without_a_token_of_its_own_still_records_one(store: SqlStore) -> None:
    sid = _sweep(store)
    first, second = (store.attempts(sid, i)[0].trial_id for i in (0, 1))
    assert store.claim(first) and store.claim(second)  # two calls, two distinct tokens
    assert not store.claim(first) and not store.claim(second)


# ---- take


def test_take_on_sqlite_looks_and_claims_nothing(tmp_path: Path) -> None:
    store = _open(f"sqlite:///{tmp_path}/sweeps.db")
    sid = _sweep(store)
    taken = store.take(sid, 3, {"runner": "w1"}, token="t")
    assert [(a.state, a.attempt) for a in taken.attempts] == [(TrialState.WAITING, 0)]
    assert (taken.claimed, taken.stored, taken.started, taken.stop_read) == (
        None, None, None, False)
    assert store.get_trial(taken.attempts[0].trial_id).state == TrialState.WAITING
    store.close()


def test_take_claims_a_fresh_index_in_its_one_statement(pg_store: SqlStore) -> None:
    sid = _sweep(pg_store)
    taken = pg_store.take(sid, 3, {"runner": "w1", "attempt_of": 3})
    [before] = taken.attempts  # as it was before the claim
    assert (before.state, before.attempt, before.heartbeat_age_s) == (TrialState.WAITING, 0, None)
    assert taken.claimed == before
    assert taken.stop_read and taken.stop is None
    trial = pg_store.get_trial(before.trial_id)
    assert trial.state == TrialState.RUNNING
    assert trial.user_attrs["runner"] == "w1" and trial.user_attrs["attempt_of"] == 3
    assert taken.started is not None and taken.started == trial.datetime_start
    assert taken.stored is not None
    stored = {(kind, key): (value, num) for kind, key, value, num in taken.stored}
    assert stored[("u", INDEX_ATTR)] == ("3", None)
    assert stored[("u", "runner")] == ('"w1"', None)
    assert stored[("u", "attempt_of")] == ("3", None)
    assert json.loads(stored[("s", "fixed_params")][0]) == trial.system_attrs["fixed_params"]
    assert {key for kind, key in stored if kind == "p"} == {"a", "b"}
    assert stored[("p", "a")][1] == trial.params["a"]
    # the attributes this call set come last: they win over what the trial held before
    assert [(k, key) for k, key, _, _ in taken.stored[-2:]] == [("u", "runner"),
                                                                ("u", "attempt_of")]
    [now] = pg_store.attempts(sid, 3)
    assert now.state == TrialState.RUNNING and now.heartbeat_age_s is not None
    assert pg_store.fail_stale_trials(sid, -1) == [before.trial_id]  # its first heartbeat


def test_take_without_attributes_claims_with_what_the_trial_held(pg_store: SqlStore) -> None:
    sid = _sweep(pg_store)
    taken = pg_store.take(sid, 1)
    assert taken.claimed is not None and taken.stored is not None
    assert ("u", INDEX_ATTR, "1", None) in taken.stored
    trial = pg_store.get_trial(taken.claimed.trial_id)
    assert {key for kind, key, _, _ in taken.stored if kind == "u"} == set(trial.user_attrs)


def test_take_again_claims_nothing_and_its_retry_finds_its_claim(pg_store: SqlStore) -> None:
    sid = _sweep(pg_store)
    first = pg_store.take(sid, 6, {"runner": "w1"}, token="call-1")
    assert first.claimed is not None
    other = pg_store.take(sid, 6, {"runner": "w2"}, token="call-2")
    assert other.claimed is None and other.stored is None and other.started is None
    assert [a.state for a in other.attempts] == [TrialState.RUNNING]
    assert other.attempts[0].heartbeat_age_s is not None
    retry = pg_store.take(sid, 6, {"runner": "w1"}, token="call-1")  # the reply was lost
    assert retry.claimed == retry.attempts[0] and retry.claimed.state == TrialState.RUNNING
    assert retry.claimed.trial_id == first.claimed.trial_id
    assert retry.stored is None and retry.started is None  # opened with a query then
    assert pg_store.get_trial(first.claimed.trial_id).user_attrs["runner"] == "w1"


def test_take_claims_no_finished_index(pg_store: SqlStore) -> None:
    sid = _sweep(pg_store)
    done = _running(pg_store, sid, 7)
    assert pg_store.set_trial_state_values(done, TrialState.COMPLETE, [0.5])
    taken = pg_store.take(sid, 7)
    assert taken.claimed is None and [a.state for a in taken.attempts] == [TrialState.COMPLETE]
    failed = _failed(pg_store, sid, 8)
    taken = pg_store.take(sid, 8)
    assert taken.claimed is None
    assert [(a.trial_id, a.state) for a in taken.attempts] == [(failed, TrialState.FAIL)]


def test_take_claims_nothing_once_the_sweep_stopped_and_reads_the_stop(
        pg_store: SqlStore) -> None:
    sid = _sweep(pg_store)
    pg_store.set_study_user_attr(sid, STOP_ATTR, STOPPED)
    taken = pg_store.take(sid, 2, {"runner": "w1"})
    assert taken.claimed is None and taken.stored is None
    assert taken.stop_read and taken.stop == STOPPED
    assert [a.state for a in taken.attempts] == [TrialState.WAITING]
    assert pg_store.attempts(sid, 2)[0].state == TrialState.WAITING
    beyond = pg_store.take(sid, 10)  # no attempt: one row of NULLs carries the stop
    assert beyond.attempts == [] and beyond.claimed is None
    assert beyond.stop_read and beyond.stop == STOPPED
    pg_store.set_study_user_attr(sid, STOP_ATTR, {**STOPPED, "state": "ignored"})
    went_on = pg_store.take(sid, 2)
    assert went_on.claimed is not None and went_on.stop == {**STOPPED, "state": "ignored"}


def test_a_take_rides_with_a_finish_in_its_statement(pg_store: SqlStore) -> None:
    """The take of the next index inside the statement that finishes a trial: it claims as
    a take of its own would, with the finish's reports, and its result is there once."""
    sid = _sweep(pg_store)
    done = pg_store.take(sid, 4).claimed
    assert done is not None
    following = NextTake(sid, 5, {"runner": "w1"}, "ahead-5")
    with pg_store.riding_with_finish(done.trial_id, {"extra": 1}, [(0, 2.0)],
                                     then=following) as rides:
        assert rides
        assert pg_store.set_trial_state_values(done.trial_id, TrialState.COMPLETE, [0.5])
    finished = pg_store.get_trial(done.trial_id)
    assert (finished.state, finished.values) == (TrialState.COMPLETE, [0.5])
    assert finished.user_attrs["extra"] == 1 and finished.intermediate_values == {0: 2.0}
    taken = pg_store.taken_ahead("ahead-5")
    assert taken is not None and taken.claimed is not None and taken.stored is not None
    assert [a.trial_id for a in taken.attempts] == [taken.claimed.trial_id]
    assert ("u", "runner", '"w1"', None) in taken.stored and taken.stop_read
    trial = pg_store.get_trial(taken.claimed.trial_id)
    assert trial.state == TrialState.RUNNING and trial.user_attrs["runner"] == "w1"
    assert taken.started == trial.datetime_start
    assert pg_store.attempts(sid, 5)[0].heartbeat_age_s is not None
    assert pg_store.taken_ahead("ahead-5") is None  # once
    retry = pg_store.take(sid, 5, {"runner": "w1"}, token="ahead-5")  # its own claim
    assert retry.claimed is not None and retry.claimed.trial_id == taken.claimed.trial_id


@pytest.mark.parametrize("finish", ["fail", "lost"])
def test_a_take_rides_only_with_a_finish_that_matched_and_completed(
        pg_store: SqlStore, finish: str) -> None:
    """A FAIL takes nothing ahead (the brake may stop the sweep on it), nor does a finish
    of a trial someone else finished first: the next index stays WAITING."""
    sid = _sweep(pg_store)
    done = pg_store.take(sid, 6).claimed
    assert done is not None
    if finish == "lost":
        assert pg_store.mark_failed(done.trial_id, "heartbeat stale")
    following = NextTake(sid, 7, {}, f"ahead-{finish}")
    with pg_store.riding_with_finish(done.trial_id, {}, [], then=following):
        if finish == "fail":
            assert pg_store.set_trial_state_values(done.trial_id, TrialState.FAIL)
        else:
            with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
                pg_store.set_trial_state_values(done.trial_id, TrialState.COMPLETE, [1.0])
    assert pg_store.taken_ahead(f"ahead-{finish}") is None
    assert [a.state for a in pg_store.attempts(sid, 7)] == [TrialState.WAITING]


# ---- new attempts


def test_a_new_attempt_follows_only_the_latest_finished_attempt(store: SqlStore) -> None:
    sid = _sweep(store)
    running = _running(store, sid, 4)
    [latest] = store.attempts(sid, 4)
    assert store.new_attempt(sid, 4, after=latest, params=None) is None  # still running
    assert store.new_attempt(sid, 4, after=None, params=None) is None  # not the latest
    assert store.mark_failed(running, "boom")
    [failed] = store.attempts(sid, 4)
    created = store.new_attempt(sid, 4, after=failed, params={"a": 0.5, "b": "y"})
    assert created is not None
    atts = store.attempts(sid, 4)
    assert [(a.trial_id, a.state, a.attempt) for a in atts] == [
        (running, TrialState.FAIL, 0), (created, TrialState.RUNNING, 1)]
    assert store.get_trial(created).system_attrs["fixed_params"] == {"a": 0.5, "b": "y"}
    # the failed attempt is no longer the latest: a runner that saw it looks again
    assert store.new_attempt(sid, 4, after=failed, params=None) is None
    assert len(store.attempts(sid, 4)) == 2


def test_a_retried_new_attempt_returns_the_trial_it_created(store: SqlStore) -> None:
    sid = _sweep(store)
    _failed(store, sid, 9)
    [failed] = store.attempts(sid, 9)
    created = store.new_attempt(sid, 9, after=failed, params=None, token="create-1")
    assert created is not None
    # the acknowledgement was lost: the same call again finds its own trial, creates none
    assert store.new_attempt(sid, 9, after=failed, params=None, token="create-1") == created
    assert store.new_attempt(sid, 9, after=failed, params=None, token="create-2") is None
    assert [a.trial_id for a in store.attempts(sid, 9)][1:] == [created]


def test_a_new_attempt_waits_for_the_study_lock(pg_store: SqlStore, pg_database: str) -> None:
    """PostgreSQL: the attempt is created under the study's row lock, so two runners never
    both create one (SQLite's BEGIN IMMEDIATE locks the whole file). The lock held here
    conflicts with that one, not with the foreign-key checks of the inserts: a creation that
    locked no study row would go through."""
    sid = _sweep(pg_store)
    _failed(pg_store, sid, 3)
    [failed] = pg_store.attempts(sid, 3)
    created: list[int | None] = []
    holder = sa.create_engine(pg_database.replace("postgresql://", "postgresql+psycopg2://", 1))
    waiting = sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                      " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
    with holder.connect() as conn:
        conn.execute(sa.text("SELECT 1 FROM studies WHERE study_id = :s FOR NO KEY UPDATE"),
                     {"s": sid})
        worker = threading.Thread(target=lambda: created.append(
            pg_store.new_attempt(sid, 3, after=failed, params=None)))
        worker.start()
        blocked, give_up = False, time.monotonic() + 120
        # until it waits for the lock, or (taking none) finishes
        while not blocked and worker.is_alive() and time.monotonic() < give_up:
            worker.join(0.05)
            blocked = conn.execute(waiting).scalar_one() > 0
        assert blocked and worker.is_alive() and created == []
        conn.rollback()
    worker.join(120)
    holder.dispose()
    assert created and created[0] is not None


# ---- failing


def test_mark_failed_fails_an_unfinished_trial_once_with_its_reason(store: SqlStore) -> None:
    sid = _sweep(store)
    tid = _running(store, sid, 1)
    reason = "exit 3: " + "x" * 2100
    assert store.mark_failed(tid, reason, token="fail-1")
    trial = store.get_trial(tid)
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs[FAIL_REASON_ATTR] == reason[:2000]
    assert store.mark_failed(tid, reason, token="fail-1")  # a retry finds its own FAIL
    assert not store.mark_failed(tid, "again", token="fail-2")
    assert not store.mark_failed(tid, "again")
    assert store.get_trial(tid).user_attrs[FAIL_REASON_ATTR] == reason[:2000]
    done = _running(store, sid, 2)
    assert store.set_trial_state_values(done, TrialState.COMPLETE, [1.0])
    assert not store.mark_failed(done, "late")
    assert store.get_trial(done).state == TrialState.COMPLETE


def test_the_watcher_fails_only_running_trials_with_a_stale_heartbeat(
        store: SqlStore, caplog: pytest.LogCaptureFixture) -> None:
    sid = _sweep(store)
    other = _sweep(store)
    stale = _running(store, sid, 0)
    done = _running(store, sid, 1)  # a heartbeat too, but finished
    assert store.set_trial_state_values(done, TrialState.COMPLETE, [1.0])
    elsewhere = _running(store, other, 0)
    number = store.get_trial(stale).number
    assert store.fail_stale_trials(sid, 3600) == []  # fresh
    assert store.get_trial(stale).state == TrialState.RUNNING
    with caplog.at_level(logging.WARNING, logger="sweeper.study.sql.index"):
        assert store.fail_stale_trials(sid, -1) == [stale]
    trial = store.get_trial(stale)
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs[FAIL_REASON_ATTR] == \
        "heartbeat older than -1s: runner presumed dead"
    assert f"trial #{number}: heartbeat stale for -1s; marked FAIL" in caplog.messages
    assert store.get_trial(done).state == TrialState.COMPLETE
    assert store.get_trial(elsewhere).state == TrialState.RUNNING
    assert store.fail_stale_trials(sid, -1) == []  # nothing left running


def test_a_running_trial_without_a_heartbeat_is_aged_from_its_start(store: SqlStore) -> None:
    """A RUNNING trial that no runner of sweeper claimed (Optuna's own ``optimize``, say) has
    no heartbeat row: its age is counted from its start."""
    sid = _sweep(store)
    start = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=10)
    store.create_new_trial(sid, FrozenTrial(
        number=0, state=TrialState.RUNNING, value=None, datetime_start=start,
        datetime_complete=None, params={}, distributions={}, user_attrs={INDEX_ATTR: 20},
        system_attrs={}, intermediate_values={}, trial_id=0))
    [old] = store.attempts(sid, 20)
    assert old.state == TrialState.RUNNING
    assert old.heartbeat_age_s is not None and 600 <= old.heartbeat_age_s < 3600
    assert store.fail_stale_trials(sid, -1) == []  # the watcher goes by heartbeats alone


# ---- what a step that fails for good says


@pytest.mark.parametrize("step", ["find index", "claim", "create attempt", "mark failed",
                                  "find stale trials"])
def test_a_step_that_fails_for_good_names_itself(tmp_path: Path, step: str) -> None:
    path = tmp_path / "sweeps.db"
    store = _open(f"sqlite:///{path}")
    sid = _sweep(store)
    tid = _running(store, sid, 0)  # the step's token table is ready: the step itself fails
    store.engine.dispose()
    path.unlink()  # the next connection opens an empty database: no such table
    calls = {"find index": lambda: store.attempts(sid, 1),
             "claim": lambda: store.claim(tid),
             "create attempt": lambda: store.new_attempt(sid, 0, after=None, params=None),
             "mark failed": lambda: store.mark_failed(tid, "boom"),
             "find stale trials": lambda: index.fail_stale_trials(store, sid, 60)}
    with pytest.raises(StorageFailure, match=f"^database error during {step}: no such table"):
        calls[step]()
    store.close()


def test_take_that_fails_for_good_names_the_claim(pg_store: SqlStore) -> None:
    sid = _sweep(pg_store)
    _running(pg_store, sid, 0)  # the token table is ready: take's own statement fails
    admin = sa.create_engine(pg_store.engine.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text("ALTER TABLE sweeper_writes RENAME TO sweeper_writes_away"))
        try:
            with pytest.raises(StorageFailure,
                               match=r'^database error during claim: relation "sweeper_writes"'):
                pg_store.take(sid, 1)
        finally:
            conn.execute(sa.text("ALTER TABLE sweeper_writes_away RENAME TO sweeper_writes"))
    admin.dispose()
