"""The retrying storage sweeper hands to Optuna: which methods retry, with what signatures,
and that a transient error is retried while a permanent one is not."""

from __future__ import annotations

import inspect
import re

import optuna
import pytest
import sqlalchemy as sa
from optuna.storages import RDBStorage

from sweeper._optuna_compat import RDBStoragePrivateRetries
from sweeper.study import open_storage
from sweeper.study.sql import SqlStore
from sweeper.study.sql.storage import RetryingRDBStorage

#: The RDBStorage methods sweeper's storage overrides to retry (public ones in storage.py,
#: Optuna's private trial-path ones and the token-carrying creations in _optuna_compat.py).
RETRIED = {
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
    "get_study_id_from_name", "get_study_name_from_id", "get_study_directions",
    "get_study_user_attrs", "get_study_system_attrs", "get_all_studies",
    "get_trial_id_from_study_id_trial_number", "get_trial_param", "set_trial_state_values",
    "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr",
    "get_trial", "get_trial_user_attrs", "get_trial_system_attrs", "record_heartbeat",
    "_create_new_trial", "_set_trial_param", "_get_trials", "_get_best_trial_id",
    "_get_stale_trial_ids",
}
#: Methods that never touch the database themselves: they call retried ones.
DELEGATING = {"create_new_trial", "set_trial_param", "get_all_trials", "get_best_trial",
              "get_n_trials"}


def _overridden() -> set[str]:
    return {name for cls in (RetryingRDBStorage, RDBStoragePrivateRetries)
            for name, value in vars(cls).items()
            if inspect.isfunction(value) and hasattr(RDBStorage, name)
            and name not in ("_retry", "__init__")}


def _talks_to_the_database(fn: object) -> bool:
    src = inspect.getsource(fn)  # type: ignore[arg-type]
    return "_create_scoped_session(" in src or "self.engine" in src


def test_the_retried_methods_are_the_listed_ones() -> None:
    assert _overridden() == RETRIED


def test_every_rdbstorage_method_that_talks_to_the_database_is_retried() -> None:
    """When an Optuna release adds a database call, this names it (then wrap it)."""
    unwrapped = []
    for name, fn in inspect.getmembers(RDBStorage, inspect.isfunction):
        if name.startswith("__") or name in RETRIED or not _talks_to_the_database(fn):
            continue
        if "session" in inspect.signature(fn).parameters:
            continue  # a helper that runs inside the caller's (retried) transaction
        unwrapped.append(name)
    assert unwrapped == []


@pytest.mark.parametrize("name", sorted(DELEGATING))
def test_the_delegating_methods_only_call_retried_ones(name: str) -> None:
    fn = getattr(RDBStorage, name)
    assert not _talks_to_the_database(fn)
    assert name not in _overridden()
    called = set(re.findall(r"self\.(\w+)\(", inspect.getsource(fn)))
    assert called and called <= RETRIED | DELEGATING | {"get_study_directions"}, called


@pytest.mark.parametrize("name", sorted(RETRIED))
def test_each_override_has_rdbstorages_signature(name: str) -> None:
    """Optuna's tests and callers pass these by keyword: names, kinds and defaults must match."""
    mine = inspect.signature(getattr(RetryingRDBStorage, name)).parameters
    theirs = inspect.signature(getattr(RDBStorage, name)).parameters
    assert [(p.name, p.kind, p.default) for p in mine.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.values()]


def test_a_transient_error_is_retried_and_a_permanent_one_is_not(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = open_storage(sqlite_url)
    sid = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "s")
    monkeypatch.setattr("sweeper.study.retry.time.sleep", lambda s: None)
    import psycopg2

    lost = psycopg2.OperationalError("server closed the connection unexpectedly")
    failures = iter([sa.exc.OperationalError("SELECT", {}, lost)])
    real = RDBStorage.get_study_name_from_id

    def flaky(self: RDBStorage, study_id: int) -> str:
        for e in failures:
            raise e
        return real(self, study_id)

    monkeypatch.setattr(RDBStorage, "get_study_name_from_id", flaky)
    assert storage.get_study_name_from_id(sid) == "s"  # one failure, then the real call
    calls = []

    def missing(self: RDBStorage, study_id: int) -> str:
        calls.append(study_id)
        raise KeyError(study_id)

    monkeypatch.setattr(RDBStorage, "get_study_name_from_id", missing)
    with pytest.raises(KeyError):
        storage.get_study_name_from_id(sid + 1)
    assert calls == [sid + 1]


def test_the_storage_pickles_as_optuna_expects(sqlite_url: str) -> None:
    """Optuna pickles storages into worker processes; the subclass must survive it."""
    import pickle

    storage = open_storage(sqlite_url)
    restored = pickle.loads(pickle.dumps(storage))
    assert type(restored) is SqlStore
    assert restored.get_all_studies() == []


def _backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(pg_admin: sa.Engine, pid: int) -> None:
    with pg_admin.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})


@pytest.mark.postgres
def test_an_idle_connection_is_pinged_and_replaced_a_busy_one_is_not(
        pg_url: str, pg_admin: sa.Engine) -> None:
    """A connection idle past the limit is checked before use: one the server closed meanwhile
    is replaced without the caller seeing an error. One in steady use is not pinged (the
    round trip per statement this saves): its statement fails, and the storage's retry runs
    it again on a new connection."""
    import time

    from sweeper.study.sql.storage import ping_when_idle
    from sweeper.study.urls import driver_url

    idle = sa.create_engine(driver_url(pg_url), pool_size=1, max_overflow=0)
    ping_when_idle(idle, idle_s=0.05)
    first = _backend_pid(idle)
    _terminate(pg_admin, first)
    time.sleep(0.2)
    assert _backend_pid(idle) != first  # no error: the ping found it dead
    idle.dispose()

    busy = sa.create_engine(driver_url(pg_url), pool_size=1, max_overflow=0)
    ping_when_idle(busy, idle_s=60.0)
    _terminate(pg_admin, _backend_pid(busy))
    with pytest.raises(sa.exc.OperationalError):
        _backend_pid(busy)  # not pinged: the statement meets the closed connection
    busy.dispose()

    storage = open_storage(pg_url)
    optuna.create_study(study_name="ping", storage=storage)
    _terminate(pg_admin, _backend_pid(storage.engine))
    assert storage.get_study_id_from_name("ping") >= 0  # retried on a new connection
