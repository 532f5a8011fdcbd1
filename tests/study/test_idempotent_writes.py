"""Every write the protocol makes is idempotent under retry: the commit lands on the server and
the connection dies before the client hears it (the proxy drops the server's reply to that
transaction's COMMIT). The retry must find its own write and report what the first attempt
would have: a claim it won, the attempt it created, the FAIL it wrote, the study it created,
the value it told. Real PostgreSQL through tests/support/faultproxy.py."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy as sa
from optuna.study import StudyDirection
from optuna.trial import TrialState

from sweeper._optuna_compat import trial_id_of
from sweeper.protocol import FAIL_REASON_ATTR, RETRY_OF_ATTR
from sweeper.study import create_or_resume, open_storage
from sweeper.study.record import Sweep
from sweeper.study.sql.storage import RetryingRDBStorage
from sweeper.study.values import NextTake
from tests.support.faultproxy import FaultProxy
from tests.support.helpers import make_spec

pytestmark = pytest.mark.postgres


@pytest.fixture
def storage(proxied_url: str) -> RetryingRDBStorage:
    return open_storage(proxied_url)


@pytest.fixture
def direct(pg_url: str) -> RetryingRDBStorage:
    """The same database past the proxy: what is really stored."""
    return open_storage(pg_url)


@pytest.fixture
def sweep(storage: RetryingRDBStorage) -> Sweep:
    return create_or_resume(storage, make_spec())[0]


def _lose_the_ack(proxy: FaultProxy, statement: str) -> None:
    proxy.arm("cut_reply", statement, step="ack")


def _fired(proxy: FaultProxy) -> None:
    assert proxy.kinds_fired() == ["cut_reply"], "the fault did not fire"


def _count(engine: sa.Engine, sql: str, **params: object) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(sql), params).scalar_one())


def test_claim_finds_its_own_token(sweep: Sweep, proxy: FaultProxy,
                                   direct: RetryingRDBStorage) -> None:
    waiting = sweep.storage.attempts(sweep.study_id, 3)[0]
    _lose_the_ack(proxy, r"UPDATE trials SET state = 'RUNNING'")
    assert sweep.storage.claim(waiting.trial_id) is True
    _fired(proxy)
    assert direct.get_trial(waiting.trial_id).state == TrialState.RUNNING
    assert _count(direct.engine, "SELECT COUNT(*) FROM trial_heartbeats WHERE trial_id = :t",
                  t=waiting.trial_id) == 1
    assert sweep.storage.claim(waiting.trial_id) is False  # anyone else still loses


def test_the_first_look_at_an_index_finds_its_own_claim(sweep: Sweep, proxy: FaultProxy,
                                                        direct: RetryingRDBStorage) -> None:
    """``take``: the index's attempts and the claim of its WAITING trial in one statement;
    the statement landed, its reply was lost, and the retry returns that claim."""
    _lose_the_ack(proxy, r"UPDATE trials SET state = 'RUNNING'")
    got = sweep.storage.take(sweep.study_id, 3)
    _fired(proxy)
    taken = got.claimed
    assert taken is not None and [a.trial_id for a in got.attempts] == [taken.trial_id]
    assert taken.attempt == 0
    assert direct.get_trial(taken.trial_id).state == TrialState.RUNNING
    assert _count(direct.engine, "SELECT COUNT(*) FROM trial_heartbeats WHERE trial_id = :t",
                  t=taken.trial_id) == 1
    again = sweep.storage.take(sweep.study_id, 3)  # anyone else: running, not theirs
    assert again.claimed is None and [a.state for a in again.attempts] == [TrialState.RUNNING]


def test_optunas_claim_in_ask_finds_its_own_token(storage: RetryingRDBStorage,
                                                  proxy: FaultProxy,
                                                  direct: RetryingRDBStorage) -> None:
    study = optuna.create_study(study_name="ask", storage=storage)
    study.enqueue_trial({"x": 1.0})
    _lose_the_ack(proxy, r"UPDATE trials SET state = 'RUNNING'")
    trial = study.ask()
    _fired(proxy)
    assert trial.suggest_float("x", 0, 2) == 1.0  # the enqueued trial, not a new one
    [stored] = direct.get_all_trials(direct.get_study_id_from_name("ask"))
    assert stored.state == TrialState.RUNNING
    assert storage.set_trial_state_values(trial_id_of(stored), TrialState.RUNNING) is False


def test_asks_trial_creation_finds_its_own_token(storage: RetryingRDBStorage,
                                                 proxy: FaultProxy,
                                                 direct: RetryingRDBStorage) -> None:
    study = optuna.create_study(study_name="ask", storage=storage)
    _lose_the_ack(proxy, r"INSERT INTO trials \(")
    trial = study.ask()
    _fired(proxy)
    [stored] = direct.get_all_trials(direct.get_study_id_from_name("ask"))
    assert (stored.number, stored.state) == (trial.number, TrialState.RUNNING)


def test_new_attempt_returns_the_attempt_it_created(sweep: Sweep, proxy: FaultProxy,
                                                    direct: RetryingRDBStorage) -> None:
    first = sweep.storage.attempts(sweep.study_id, 2)[0]
    assert sweep.storage.claim(first.trial_id)
    assert sweep.storage.mark_failed(first.trial_id, "boom")
    failed = sweep.storage.attempts(sweep.study_id, 2)[0]
    _lose_the_ack(proxy, r"INSERT INTO trials \(")
    tid = sweep.storage.new_attempt(sweep.study_id, 2, after=failed, params={"a": 0.5})
    _fired(proxy)
    assert tid is not None
    after = direct.attempts(sweep.study_id, 2)
    assert [(a.trial_id, a.state) for a in after] == [(first.trial_id, TrialState.FAIL),
                                                      (tid, TrialState.RUNNING)]
    assert direct.get_trial(tid).user_attrs[RETRY_OF_ATTR] == failed.number
    # another runner that saw the same FAIL does not get a third attempt
    assert sweep.storage.new_attempt(sweep.study_id, 2, after=failed, params={"a": 0.5}) is None


def test_adaptive_first_attempt_returns_the_attempt_it_created(
        storage: RetryingRDBStorage, proxy: FaultProxy, direct: RetryingRDBStorage) -> None:
    sweep, _ = create_or_resume(storage, make_spec(method="tpe"))
    _lose_the_ack(proxy, r"INSERT INTO trials \(")
    tid = storage.new_attempt(sweep.study_id, 0, after=None, params=None)
    _fired(proxy)
    assert tid is not None
    assert [a.trial_id for a in direct.attempts(sweep.study_id, 0)] == [tid]


def test_mark_failed_knows_the_fail_is_its_own(sweep: Sweep, proxy: FaultProxy,
                                               direct: RetryingRDBStorage) -> None:
    running = sweep.storage.attempts(sweep.study_id, 1)[0]
    assert sweep.storage.claim(running.trial_id)
    _lose_the_ack(proxy, r"^UPDATE trials SET state = 'FAIL'")
    assert sweep.storage.mark_failed(running.trial_id, "heartbeat stale") is True
    _fired(proxy)
    stored = direct.get_trial(running.trial_id)
    assert stored.state == TrialState.FAIL
    assert stored.user_attrs[FAIL_REASON_ATTR] == "heartbeat stale"
    # someone else's FAIL is not ours: a second caller learns it did not fail the trial
    assert sweep.storage.mark_failed(running.trial_id, "again") is False
    assert direct.get_trial(running.trial_id).user_attrs[FAIL_REASON_ATTR] == "heartbeat stale"


@pytest.mark.parametrize("public", [True, False])
def test_tell_finds_its_own_values(storage: RetryingRDBStorage, proxy: FaultProxy,
                                   direct: RetryingRDBStorage, public: bool) -> None:
    study = optuna.create_study(study_name="tell", storage=storage)
    trial = study.ask()
    _lose_the_ack(proxy, r"UPDATE trials SET state='COMPLETE'")
    if public:
        study.tell(trial, 1.5)
    else:
        assert storage.set_trial_state_values(trial_id_of(trial), TrialState.COMPLETE, [1.5])
    _fired(proxy)
    stored = direct.get_trial(trial_id_of(trial))
    assert (stored.state, stored.values) == (TrialState.COMPLETE, [1.5])
    # without an interrupted attempt of its own, a finished trial still refuses a tell
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_state_values(trial_id_of(trial), TrialState.COMPLETE, [1.5])


def test_a_take_riding_with_a_lost_finish_is_found_by_its_token(
        sweep: Sweep, proxy: FaultProxy, direct: RetryingRDBStorage) -> None:
    """The finish that also took the next index landed and its reply was lost: the retry
    finds the finish its own, the take's result is unknown, and the take of that index with
    the same token finds the claim that landed: one claim, one heartbeat, no second one."""
    storage = sweep.storage
    done = storage.take(sweep.study_id, 3).claimed
    assert done is not None
    following = NextTake(sweep.study_id, 4, {"runner": "w1"}, "ahead-4")
    _lose_the_ack(proxy, r"UPDATE trials SET state='COMPLETE'")
    with storage.riding_with_finish(done.trial_id, {}, [], then=following):
        assert storage.set_trial_state_values(done.trial_id, TrialState.COMPLETE, [1.5])
    _fired(proxy)
    assert direct.get_trial(done.trial_id).values == [1.5]
    assert storage.taken_ahead("ahead-4") is None  # the reply with it was lost
    [claimed] = direct.attempts(sweep.study_id, 4)
    assert claimed.state == TrialState.RUNNING
    again = storage.take(sweep.study_id, 4, {"runner": "w1"}, token="ahead-4")
    assert again.claimed is not None and again.claimed.trial_id == claimed.trial_id
    assert _count(direct.engine, "SELECT COUNT(*) FROM trial_heartbeats WHERE trial_id = :t",
                  t=claimed.trial_id) == 1
    other = storage.take(sweep.study_id, 4, {"runner": "w2"})
    assert other.claimed is None and [a.state for a in other.attempts] == [TrialState.RUNNING]


def test_a_tell_that_finds_another_outcome_is_refused(storage: RetryingRDBStorage,
                                                      proxy: FaultProxy,
                                                      direct: RetryingRDBStorage) -> None:
    """The landed check compares what it wrote: a trial the watcher failed while the tell's
    connection was down is not taken for the tell's own commit."""
    study = optuna.create_study(study_name="tell", storage=storage)
    trial = study.ask()
    proxy.arm("cut_request", r"UPDATE trials SET state='COMPLETE'", step="race",
              on_fire=lambda: direct.mark_failed(trial_id_of(trial), "heartbeat stale"))
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_state_values(trial_id_of(trial), TrialState.COMPLETE, [1.5])
    assert proxy.kinds_fired() == ["cut_request"]
    stored = direct.get_trial(trial_id_of(trial))
    assert (stored.state, stored.values) == (TrialState.FAIL, None)


def test_study_creation_by_name_finds_its_own_study(storage: RetryingRDBStorage,
                                                    proxy: FaultProxy,
                                                    direct: RetryingRDBStorage) -> None:
    _lose_the_ack(proxy, r"^INSERT INTO studies")
    sid = storage.create_new_study([StudyDirection.MINIMIZE], "named")
    _fired(proxy)
    assert [s.study_name for s in direct.get_all_studies()] == ["named"]
    assert direct.get_study_id_from_name("named") == sid
    with pytest.raises(optuna.exceptions.DuplicatedStudyError):  # another creator still loses
        storage.create_new_study([StudyDirection.MINIMIZE], "named")


def test_unnamed_study_creation_creates_one_study(storage: RetryingRDBStorage,
                                                  proxy: FaultProxy,
                                                  direct: RetryingRDBStorage) -> None:
    _lose_the_ack(proxy, r"^INSERT INTO studies")
    sid = storage.create_new_study([StudyDirection.MINIMIZE])
    _fired(proxy)
    [only] = direct.get_all_studies()
    assert direct.get_study_id_from_name(only.study_name) == sid
    assert only.study_name.startswith("no-name-")


def test_delete_study_of_a_study_gone_after_a_lost_ack(storage: RetryingRDBStorage,
                                                       proxy: FaultProxy,
                                                       direct: RetryingRDBStorage) -> None:
    sid = storage.create_new_study([StudyDirection.MINIMIZE], "doomed")
    _lose_the_ack(proxy, r"^DELETE FROM studies")
    storage.delete_study(sid)
    _fired(proxy)
    assert direct.get_all_studies() == []
    with pytest.raises(KeyError):  # deleting it again, uninterrupted, is still an error
        storage.delete_study(sid)


def test_sweep_creation_and_bulk_enqueue(storage: RetryingRDBStorage, proxy: FaultProxy,
                                         direct: RetryingRDBStorage) -> None:
    proxy.arm("cut_reply", r"^INSERT INTO studies", step="ack")
    proxy.arm("cut_reply", r"'sweeper:enqueued'", step="ack")
    sweep, created = create_or_resume(storage, make_spec())
    assert proxy.kinds_fired() == ["cut_reply", "cut_reply"]
    assert created
    assert _count(direct.engine, "SELECT COUNT(*) FROM studies") == 1
    assert _count(direct.engine, "SELECT COUNT(*) FROM trials WHERE study_id = :s",
                  s=sweep.study_id) == sweep.spec.trials


def test_param_intermediate_value_and_attrs_written_once(
        storage: RetryingRDBStorage, proxy: FaultProxy, direct: RetryingRDBStorage) -> None:
    study = optuna.create_study(study_name="writes", storage=storage)
    trial = study.ask()
    for pattern in (r"INSERT INTO trial_params", r"INSERT INTO trial_intermediate_values",
                    r"INSERT INTO trial_user_attributes", r"INSERT INTO trial_heartbeats"):
        proxy.arm("cut_reply", pattern, step="ack")
    x = trial.suggest_float("x", 0, 1)
    trial.report(0.5, step=3)
    trial.set_user_attr("note", "hi")
    storage.record_heartbeat(trial_id_of(trial))
    assert proxy.kinds_fired() == ["cut_reply"] * 4
    stored = direct.get_trial(trial_id_of(trial))
    assert stored.params == {"x": x}
    assert stored.intermediate_values == {3: 0.5}
    assert stored.user_attrs == {"note": "hi"}
    for table in ("trial_params", "trial_intermediate_values", "trial_user_attributes",
                  "trial_heartbeats"):
        assert _count(direct.engine, f"SELECT COUNT(*) FROM {table}") == 1, table


def test_the_closer_of_a_stale_attempt_counts_it_once_when_its_ack_is_lost(
        sweep: Sweep, proxy: FaultProxy, direct: RetryingRDBStorage) -> None:
    """The FAIL that closes a dead runner's segment landed, its reply was lost: the retry
    finds its own FAIL and writes no second usage; a later closer writes none either, nor
    can the runner, were it only frozen: the trial is finished (its write is refused)."""
    from datetime import datetime, timedelta, timezone

    from sweeper.accounting import OpenSegment
    from sweeper.protocol import SEGMENT_ATTR, usage_key
    from sweeper.study.ledger import sweep_ledger

    running = sweep.storage.attempts(sweep.study_id, 4)[0]
    assert sweep.storage.claim(running.trial_id)
    started = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=30)
    sweep.storage.set_trial_user_attrs(running.trial_id, {
        SEGMENT_ATTR: OpenSegment("dead", 1.0, 1.0, 0, started).encode()})
    _lose_the_ack(proxy, r"UPDATE trials SET state = 'FAIL'")
    assert sweep.storage.mark_failed(running.trial_id, "heartbeat stale") is True
    _fired(proxy)
    assert sweep.storage.mark_failed(running.trial_id, "heartbeat older") is False
    assert _count(direct.engine, "SELECT COUNT(*) FROM trial_user_attributes WHERE "
                  "trial_id = :t AND key = :k", t=running.trial_id, k=usage_key("dead")) == 1
    book = sweep_ledger(sweep)
    assert book.totals.failed.segments == 1 and 25 < book.totals.failed.wall_hours * 3600 < 60
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        sweep.storage.set_trial_user_attrs(running.trial_id, {usage_key("dead"): {
            "wall_s": 31.0, "gpus": 1.0, "cpus": 1.0, "steps": 0, "ending": "failed"}})
    assert sweep_ledger(sweep).totals == book.totals
