"""Opening the study storage: the retrying RDBStorage sweeper hands to Optuna, engine settings
per database, and the schema additions the index protocol needs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Container, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import optuna
import sqlalchemy as sa
from optuna.distributions import BaseDistribution
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import StorageError
from sweeper.protocol import INDEX_ATTR
from sweeper.study._optuna_compat import FrozenStudy, RDBStoragePrivateRetries
from sweeper.study.retry import with_retry
from sweeper.study.urls import driver_url, redact, scrub

if TYPE_CHECKING:
    from sweeper.proxy.client import StudyStorage

T = TypeVar("T")

#: What opening a storage raises, each turned into one line without the password: database
#: and driver errors (SQLAlchemy wraps the driver's), a driver that is not installed, Optuna's
#: own errors and its schema-version check (RuntimeError), a malformed URL or file path.
OPEN_ERRORS = (sa.exc.SQLAlchemyError, optuna.exceptions.OptunaError, ImportError, RuntimeError,
               ValueError, LookupError, OSError)


class RetryingRDBStorage(RDBStoragePrivateRetries):
    """RDBStorage whose methods survive a database restart (pool_pre_ping reconnects; this
    retries the call that was in flight). A write whose commit raced the failure can show up
    as already done on retry; the callers treat that as success.

    Every method below is RDBStorage's own, called through :meth:`_retry`; the signatures are
    Optuna 5.0's (a contract test compares them with the installed RDBStorage)."""

    retry_deadline_s = 300.0

    def _retry(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return with_retry(fn, *args, deadline_s=self.retry_deadline_s, what=name, **kwargs)

    # ---- studies

    def create_new_study(self, directions: Sequence[StudyDirection],
                         study_name: str | None = None) -> int:
        return self._retry("create_new_study", super().create_new_study, directions, study_name)

    def delete_study(self, study_id: int) -> None:
        return self._retry("delete_study", super().delete_study, study_id)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        return self._retry("set_study_user_attr", super().set_study_user_attr, study_id, key,
                           value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        return self._retry("set_study_system_attr", super().set_study_system_attr, study_id,
                           key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._retry("get_study_id_from_name", super().get_study_id_from_name,
                           study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._retry("get_study_name_from_id", super().get_study_name_from_id, study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._retry("get_study_directions", super().get_study_directions, study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._retry("get_study_user_attrs", super().get_study_user_attrs, study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._retry("get_study_system_attrs", super().get_study_system_attrs, study_id)

    def get_all_studies(self) -> list[FrozenStudy]:
        return self._retry("get_all_studies", super().get_all_studies)

    # ---- trials

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return self._retry("create_new_trial", super().create_new_trial, study_id,
                           template_trial)

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        return self._retry("set_trial_param", super().set_trial_param, trial_id, param_name,
                           param_value_internal, distribution)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._retry("get_trial_id_from_study_id_trial_number",
                           super().get_trial_id_from_study_id_trial_number, study_id,
                           trial_number)

    def get_trial_param(self, trial_id: int, param_name: str) -> float:
        return self._retry("get_trial_param", super().get_trial_param, trial_id, param_name)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        return self._retry("set_trial_state_values", super().set_trial_state_values, trial_id,
                           state, values)

    def set_trial_intermediate_value(self, trial_id: int, step: int,
                                     intermediate_value: float) -> None:
        return self._retry("set_trial_intermediate_value",
                           super().set_trial_intermediate_value, trial_id, step,
                           intermediate_value)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        return self._retry("set_trial_user_attr", super().set_trial_user_attr, trial_id, key,
                           value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        return self._retry("set_trial_system_attr", super().set_trial_system_attr, trial_id,
                           key, value)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._retry("get_trial", super().get_trial, trial_id)

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._retry("get_all_trials", super().get_all_trials, study_id, deepcopy, states)

    def get_n_trials(self, study_id: int,
                     state: tuple[TrialState, ...] | TrialState | None = None) -> int:
        return self._retry("get_n_trials", super().get_n_trials, study_id, state)

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        return self._retry("get_best_trial", super().get_best_trial, study_id)

    def record_heartbeat(self, trial_id: int) -> None:
        return self._retry("record_heartbeat", super().record_heartbeat, trial_id)


def open_storage(url: str, *, connect_deadline_s: float = 0.0, pool_size: int = 1,
                 max_overflow: int = 1, prepared: bool = False) -> StudyStorage:
    """Open (and on first use create) the Optuna schema at ``url``.

    ``connect_deadline_s`` > 0 keeps retrying a database that is not up yet (runners);
    0 fails at once with one clear line (the CLI). Errors never contain the password.
    ``prepared``: the orchestrator already created and checked the schema (trial runners), so
    skip Optuna's table creation and alembic version check (a second connection held at once
    and a tenth of a runner's start-up) and the index DDL (a table lock on PostgreSQL); a
    database without the schema still gets the full treatment.
    ``grpc://host:port`` is ``sweeper proxy`` (:mod:`sweeper.proxy.client`).
    """
    if url.startswith("grpc://"):
        from sweeper.proxy.client import open_proxy_storage

        return open_proxy_storage(url, connect_deadline_s=connect_deadline_s)
    real = driver_url(url)
    engine_kwargs = _engine_kwargs(url, real, pool_size, max_overflow)

    def connect() -> RetryingRDBStorage:
        if prepared:
            storage = _open_prepared(real, engine_kwargs)
            if storage is not None:
                return storage
        return _open_and_prepare(real, engine_kwargs)

    try:
        if connect_deadline_s > 0:
            return with_retry(connect, deadline_s=connect_deadline_s, what="connect")
        return connect()
    except StorageError:
        raise
    except OPEN_ERRORS as e:
        cause = e.__cause__ or e
        detail = str(getattr(cause, "orig", None) or cause).strip().splitlines()
        reason = detail[0] if detail else type(cause).__name__
        raise StorageError(scrub(f"cannot open storage {redact(url)}: {reason}", url)) from None


def engine_options(url: str, *, pool_size: int = 1, max_overflow: int = 1) -> dict[str, Any]:
    """The SQLAlchemy engine options :func:`open_storage` uses for ``url`` (SQLite busy
    timeout; PostgreSQL pool size, pre-ping, connect timeout)."""
    return _engine_kwargs(url, driver_url(url), pool_size, max_overflow)


def _engine_kwargs(url: str, real: str, pool_size: int, max_overflow: int) -> dict[str, Any]:
    scheme = real.split("://", 1)[0]
    if scheme.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    if scheme.startswith("postgresql"):
        return {"pool_size": pool_size, "max_overflow": max_overflow, "pool_pre_ping": True,
                "pool_recycle": 1800,
                "connect_args": {"connect_timeout": 10, "application_name": "sweeper"}}
    raise StorageError(f"unsupported storage URL {redact(url)}: use sqlite:///path.db or "
                       "postgresql://user:password@host/db")


def _open_prepared(real: str, engine_kwargs: dict[str, Any]) -> RetryingRDBStorage | None:
    """The schema exists already: no table creation, version check or index DDL. None when
    that fails (no schema yet, or unreachable): the full path then says which."""
    try:
        storage = RetryingRDBStorage(real, engine_kwargs=engine_kwargs,
                                     skip_compatibility_check=True, skip_table_creation=True)
        if storage.engine.dialect.name == "sqlite":
            with storage.engine.begin() as conn:
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        return storage
    except OPEN_ERRORS:  # whatever it was, the full path tries again and says why
        return None


def _open_and_prepare(real: str, engine_kwargs: dict[str, Any]) -> RetryingRDBStorage:
    # Two processes creating the schema of a fresh database at the same moment collide on
    # PostgreSQL's catalog (duplicate type or table); the loser just tries again.
    for attempt in range(5):
        try:
            storage = RetryingRDBStorage(real, engine_kwargs=engine_kwargs)
            _prepare(storage)
            return storage
        except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
            text = str(e.__cause__ or e).lower()
            if attempt == 4 or not any(w in text for w in ("already exists", "duplicate",
                                                           "unique constraint")):
                raise
            time.sleep(0.2 + random.random() * 0.5)
    raise AssertionError("unreachable")


def _prepare(storage: RDBStorage) -> None:
    """SQLite: WAL so readers never block the writer. Both: a partial index that makes
    'trials of index i' a lookup instead of a scan (only rows tagged sweeper:index enter it)."""
    engine = storage.engine
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        conn.exec_driver_sql(
            "CREATE INDEX IF NOT EXISTS ix_sweeper_index ON trial_user_attributes "
            f"(value_json, trial_id) WHERE key = '{INDEX_ATTR}'")
