"""Storage URLs, the sweep record, bulk enqueue, and the index protocol's queries and claims.

Shared by the orchestrator and the trial runner, so it imports neither click nor kubernetes.
The index protocol only ever touches the trials of one index (a query on an indexed tag),
never a scan of the study; the two writes that must be exclusive (enqueueing the plan and
creating a new attempt for an index) run in a transaction that holds the study row lock
(PostgreSQL ``SELECT ... FOR UPDATE``, the same lock Optuna takes to number trials) or the
database write lock (SQLite ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper.errors import SpecError, StorageError, StudyNotFoundError
from sweeper.protocol import (
    ATTEMPT_ATTR,
    DEFAULT_STORAGE,
    ENQUEUED_ATTR,
    ENV_STORAGE,
    FAIL_REASON_ATTR,
    FIXED_PARAMS_ATTR,
    HASH_ATTR,
    INDEX_ATTR,
    METRIC_NAMES_ATTR,
    RETRY_OF_ATTR,
    SPEC_ATTR,
)
from sweeper.spec import SweepSpec, parse_spec_dict

logger = logging.getLogger(__name__)

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

T = TypeVar("T")


# --------------------------------------------------------------------------- URLs


def resolve_storage_url(flag: str | None, spec: SweepSpec | None = None,
                        env: Mapping[str, str] | None = None) -> str:
    """``--storage`` flag > ``SWEEPER_STORAGE`` env > spec ``storage:`` > sqlite:///sweeps.db."""
    import os

    env = os.environ if env is None else env
    return flag or env.get(ENV_STORAGE) or (spec.storage if spec else None) \
        or DEFAULT_STORAGE


def driver_url(url: str) -> str:
    """Users write ``postgresql://``; SQLAlchemy 2.1 maps that to psycopg 3, we ship psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix):]
    return url


def redact(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe to print or log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable storage URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def scrub(text: str, url: str) -> str:
    """Remove the password of ``url`` from an error message (drivers sometimes echo it)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    text = text.replace(url, redact(url))
    if password:
        text = text.replace(password, "***")
    return text


# --------------------------------------------------------------------------- retries


def _is_transient(e: BaseException) -> bool:
    """Connection loss, server restart, SQLite busy: worth retrying with backoff."""
    for err in (e, e.__cause__):
        if isinstance(err, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            return True
        if isinstance(err, sa.exc.DBAPIError) and err.connection_invalidated:
            return True
    return False


def with_retry(fn: Callable[..., T], *args: Any, deadline_s: float = 300.0,
               what: str | None = None, **kwargs: Any) -> T:
    """Call ``fn``, retrying transient database errors with capped exponential backoff."""
    start = time.monotonic()
    delay = 0.2
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not _is_transient(e) or time.monotonic() - start > deadline_s:
                raise
            logger.warning("database unavailable during %s (%s); retrying in %.1fs",
                           what or getattr(fn, "__name__", "a query"),
                           type(e.__cause__ or e).__name__, delay)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)


class RetryingRDBStorage(RDBStorage):
    """RDBStorage whose public methods survive a database restart (pool_pre_ping reconnects;
    this retries the call that was in flight). A write whose commit raced the failure can
    show up as already done on retry; the callers treat that as success."""

    retry_deadline_s = 300.0


def _wrap(name: str) -> None:
    original = getattr(RDBStorage, name)

    @functools.wraps(original)
    def method(self: RetryingRDBStorage, *args: Any, **kwargs: Any) -> Any:
        return with_retry(original, self, *args, deadline_s=self.retry_deadline_s, what=name,
                          **kwargs)

    setattr(RetryingRDBStorage, name, method)


for _name in (
    "create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
    "get_study_id_from_name", "get_study_name_from_id", "get_study_directions",
    "get_study_user_attrs", "get_study_system_attrs", "get_all_studies", "create_new_trial",
    "set_trial_param", "get_trial_id_from_study_id_trial_number", "get_trial_param",
    "set_trial_state_values", "set_trial_intermediate_value", "set_trial_user_attr",
    "set_trial_system_attr", "get_trial", "get_all_trials", "get_n_trials", "get_best_trial",
    "record_heartbeat", "_get_stale_trial_ids",
):
    _wrap(_name)


# --------------------------------------------------------------------------- opening storage


def open_storage(url: str, *, connect_deadline_s: float = 0.0, pool_size: int = 1,
                 max_overflow: int = 1, prepared: bool = False) -> RetryingRDBStorage:
    """Open (and on first use create) the Optuna schema at ``url``.

    ``connect_deadline_s`` > 0 keeps retrying a database that is not up yet (runners);
    0 fails at once with one clear line (the CLI). Errors never contain the password.
    ``prepared``: the orchestrator already created and checked the schema (trial runners), so
    skip Optuna's table creation and alembic version check (a second connection held at once
    and a tenth of a runner's start-up) and the index DDL (a table lock on PostgreSQL); a
    database without the schema still gets the full treatment.
    """
    real = driver_url(url)
    scheme = real.split("://", 1)[0]
    if scheme.startswith("sqlite"):
        engine_kwargs: dict[str, Any] = {"connect_args": {"timeout": 60}}
    elif scheme.startswith("postgresql"):
        engine_kwargs = {"pool_size": pool_size, "max_overflow": max_overflow,
                         "pool_pre_ping": True, "pool_recycle": 1800,
                         "connect_args": {"connect_timeout": 10,
                                          "application_name": "sweeper"}}
    else:
        raise StorageError(f"unsupported storage URL {redact(url)}: use sqlite:///path.db or "
                           "postgresql://user:password@host/db")

    def connect() -> RetryingRDBStorage:
        if prepared:
            try:
                storage = RetryingRDBStorage(real, engine_kwargs=engine_kwargs,
                                             skip_compatibility_check=True,
                                             skip_table_creation=True)
                if storage.engine.dialect.name == "sqlite":
                    with storage.engine.begin() as conn:
                        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
                return storage
            except Exception:  # no schema yet, or unreachable: the full path says which
                pass
        # Two processes creating the schema of a fresh database at the same moment collide
        # on PostgreSQL's catalog (duplicate type or table); the loser just tries again.
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

    try:
        if connect_deadline_s > 0:
            return with_retry(connect, deadline_s=connect_deadline_s, what="connect")
        return connect()
    except StorageError:
        raise
    except Exception as e:
        cause = e.__cause__ or e
        detail = str(getattr(cause, "orig", None) or cause).strip().splitlines()
        reason = detail[0] if detail else type(cause).__name__
        raise StorageError(scrub(f"cannot open storage {redact(url)}: {reason}", url)) from None


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


@contextmanager
def _exclusive(engine: sa.Engine, study_id: int) -> Iterator[sa.Connection]:
    """A transaction that holds the study lock until commit (see the module docstring)."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.execute(sa.text("SELECT study_id FROM studies WHERE study_id = :s FOR UPDATE"),
                         {"s": study_id})
        try:
            yield conn
        except BaseException:
            conn.rollback()
            raise
        conn.commit()


# --------------------------------------------------------------------------- the sweep record


@dataclass(frozen=True)
class Sweep:
    """A sweep as stored: the study plus its normalised spec."""

    storage: RetryingRDBStorage
    study_id: int
    spec: SweepSpec
    #: One Study per thread for runner_study(), keyed by thread id.
    _runner_studies: dict[int, optuna.Study] = field(default_factory=dict, compare=False,
                                                     repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    def study(self, sampler: optuna.samplers.BaseSampler | None = None,
              pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study:
        return optuna.load_study(study_name=self.name, storage=self.storage, sampler=sampler,
                                 pruner=pruner)

    def runner_study(self, sampler: optuna.samplers.BaseSampler,
                     pruner: optuna.pruners.BasePruner) -> optuna.Study:
        """The study for the next index this thread runs, with that index's sampler and pruner.
        A worker that runs many indexes keeps one Study, so its trial cache reads only what
        changed (a fresh Study per index made TPE and pruners reload every trial of the study
        per index) and the study is not looked up again."""
        key = threading.get_ident()
        study = self._runner_studies.get(key)
        if study is None:
            study = self._runner_studies[key] = self.study(sampler=sampler, pruner=pruner)
        else:
            study.sampler, study.pruner = sampler, pruner
            study._thread_local.cached_all_trials = None  # re-read once per trial, as ask() does
        return study


def create_or_resume(storage: RetryingRDBStorage, spec: SweepSpec) -> tuple[Sweep, bool]:
    """Create the study and enqueue its plan, or resume it if this exact spec already ran.

    Returns (sweep, created). A different spec under the same name raises SpecError before
    anything is written. Safe against concurrent launches: one WAITING trial per index.
    """
    directions = [o.direction for o in spec.objectives]
    try:
        study_id = storage.get_study_id_from_name(spec.name)
        created = False
    except KeyError:
        try:
            study_id = storage.create_new_study(
                [optuna.study.StudyDirection.MINIMIZE if d == "minimize"
                 else optuna.study.StudyDirection.MAXIMIZE for d in directions], spec.name)
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            study_id = storage.get_study_id_from_name(spec.name)
            created = False

    record = spec.to_dict()

    def record_and_enqueue() -> None:
        with _exclusive(storage.engine, study_id) as conn:
            _record_and_enqueue(conn, study_id, spec, record, created)

    with_retry(record_and_enqueue, what="enqueue")
    # Objective names for optuna-dashboard and Optuna's plots ("loss", not "Objective 0").
    storage.set_study_system_attr(study_id, METRIC_NAMES_ATTR,
                                  [o.metric for o in spec.objectives])
    return Sweep(storage, study_id, spec), created


def _record_and_enqueue(conn: sa.Connection, study_id: int, spec: SweepSpec,
                        record: dict[str, Any], created: bool) -> None:
    from sweeper.space import planned_sets

    attrs = _study_user_attrs(conn, study_id)
    if HASH_ATTR in attrs:
        if attrs[HASH_ATTR] != spec.spec_hash:
            raise _changed_spec_error(spec, attrs.get(SPEC_ATTR))
    elif not created:
        n = conn.execute(sa.text("SELECT COUNT(*) FROM trials WHERE study_id = :s"),
                         {"s": study_id}).scalar_one()
        if n:
            raise SpecError(f"study {spec.name!r} already exists in this storage and was "
                            "not created by sweeper; pick another name", source=spec.source,
                            field="name")
    _set_study_attr(conn, study_id, SPEC_ATTR, record)
    _set_study_attr(conn, study_id, HASH_ATTR, spec.spec_hash)
    if not attrs.get(ENQUEUED_ATTR):
        _bulk_insert_trials(conn, study_id, [
            _TrialRow(index=i, params=params, state=TrialState.WAITING)
            for i, params in planned_sets(spec)])
        _set_study_attr(conn, study_id, ENQUEUED_ATTR, True)


def _changed_spec_error(spec: SweepSpec, stored: Any) -> SpecError:
    changed = []
    if isinstance(stored, dict):
        mine = spec.to_dict()
        changed = [k for k in ("method", "objective", "trials", "seed", "sampler", "pruner",
                               "parameters")
                   # json.dumps keeps key order: parameter order defines grid point i
                   if json.dumps(mine.get(k)) != json.dumps(stored.get(k))]
        if {k: mine["trial"].get(k) for k in ("entrypoint", "command", "fixed")} != \
                {k: stored.get("trial", {}).get(k) for k in ("entrypoint", "command", "fixed")}:
            changed.append("trial")
    what = f" ({', '.join(changed)} differ)" if changed else ""
    return SpecError(f"a different sweep named {spec.name!r} already exists in this storage"
                     f"{what}; rename the sweep or delete the old study", source=spec.source,
                     field=changed[0] if changed else "name")


def load_sweep(storage: RetryingRDBStorage, name: str) -> Sweep:
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        raise StudyNotFoundError(f"no sweep named {name!r} in this storage") from None
    attrs = storage.get_study_user_attrs(study_id)
    if SPEC_ATTR not in attrs:
        raise StudyNotFoundError(f"study {name!r} exists but was not created by sweeper")
    spec = parse_spec_dict(attrs[SPEC_ATTR], source=f"<study {name}>")
    return Sweep(storage, study_id, spec)


def _study_user_attrs(conn: sa.Connection, study_id: int) -> dict[str, Any]:
    rows = conn.execute(sa.text("SELECT key, value_json FROM study_user_attributes "
                                "WHERE study_id = :s"), {"s": study_id})
    return {k: json.loads(v) for k, v in rows}


def _set_study_attr(conn: sa.Connection, study_id: int, key: str, value: Any) -> None:
    blob = json.dumps(value)
    updated = conn.execute(sa.text("UPDATE study_user_attributes SET value_json = :v "
                                   "WHERE study_id = :s AND key = :k"),
                           {"v": blob, "s": study_id, "k": key}).rowcount
    if not updated:
        conn.execute(sa.text("INSERT INTO study_user_attributes (study_id, key, value_json) "
                             "VALUES (:s, :k, :v)"), {"s": study_id, "k": key, "v": blob})


# --------------------------------------------------------------------------- bulk trial insert


@dataclass(frozen=True)
class _TrialRow:
    index: int
    params: dict[str, Any] | None
    state: TrialState
    attempt: int = 0
    retry_of: int | None = None


def _bulk_insert_trials(conn: sa.Connection, study_id: int, rows: list[_TrialRow]) -> list[int]:
    """Insert trials in a handful of statements (not one round trip per trial). Must run
    inside :func:`_exclusive`, which makes the trial numbers we assign safe."""
    if not rows:
        return []
    from optuna.storages._rdb import models

    first = conn.execute(sa.text("SELECT COUNT(*) FROM trials WHERE study_id = :s"),
                         {"s": study_id}).scalar_one()
    now = _utcnow()
    conn.execute(models.TrialModel.__table__.insert(), [
        {"number": first + k, "study_id": study_id, "state": r.state,
         "datetime_start": now if r.state == TrialState.RUNNING else None}
        for k, r in enumerate(rows)])
    ids = [tid for (tid,) in conn.execute(sa.text(
        "SELECT trial_id FROM trials WHERE study_id = :s AND number >= :n ORDER BY number"),
        {"s": study_id, "n": first})]
    if len(ids) != len(rows):
        raise StorageError("trial numbering changed during a locked insert")
    user_attrs, system_attrs = [], []
    for tid, r in zip(ids, rows, strict=True):
        user_attrs.append({"trial_id": tid, "key": INDEX_ATTR, "value_json": json.dumps(r.index)})
        user_attrs.append({"trial_id": tid, "key": ATTEMPT_ATTR,
                           "value_json": json.dumps(r.attempt)})
        if r.retry_of is not None:
            user_attrs.append({"trial_id": tid, "key": RETRY_OF_ATTR,
                               "value_json": json.dumps(r.retry_of)})
        if r.params is not None:
            system_attrs.append({"trial_id": tid, "key": FIXED_PARAMS_ATTR,
                                 "value_json": json.dumps(r.params)})
    conn.execute(models.TrialUserAttributeModel.__table__.insert(), user_attrs)
    if system_attrs:
        conn.execute(models.TrialSystemAttributeModel.__table__.insert(), system_attrs)
    running = [tid for tid, r in zip(ids, rows, strict=True) if r.state == TrialState.RUNNING]
    if running:
        conn.execute(models.TrialHeartbeatModel.__table__.insert(),
                     [{"trial_id": tid} for tid in running])
    return ids


# --------------------------------------------------------------------------- the index protocol


@dataclass(frozen=True)
class Attempt:
    """One trial of one index."""

    trial_id: int
    number: int
    state: TrialState
    attempt: int
    heartbeat_age_s: float | None  # seconds since the last heartbeat (RUNNING trials)


_ATTEMPTS_SQL = f"""
SELECT t.trial_id, t.number, t.state, t.datetime_start, hb.heartbeat
FROM trial_user_attributes ua
JOIN trials t ON t.trial_id = ua.trial_id
LEFT JOIN trial_heartbeats hb ON hb.trial_id = t.trial_id
WHERE ua.key = '{INDEX_ATTR}' AND ua.value_json = :v AND t.study_id = :s
ORDER BY t.number
"""


def _utcnow() -> datetime:
    """Naive UTC, as Optuna's RDB schema stores trial datetimes."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _as_datetime(value: datetime | str) -> datetime:
    """Naive datetime from a raw-SQL row (SQLite hands back text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=None)


def _db_now(conn: sa.Connection) -> datetime:
    return _as_datetime(conn.execute(sa.select(sa.func.now())).scalar_one())


def _attempts(conn: sa.Connection, study_id: int, index: int) -> list[Attempt]:
    rows = conn.execute(sa.text(_ATTEMPTS_SQL), {"v": json.dumps(index), "s": study_id}).all()
    if not rows:
        return []
    now: datetime | None = None  # the database clock, read only when a heartbeat needs it
    out = []
    for k, (tid, number, state, started, heartbeat) in enumerate(rows):
        st = TrialState[state] if isinstance(state, str) else TrialState(state)
        age = None
        if st == TrialState.RUNNING:
            if heartbeat is not None:
                now = now or _db_now(conn)
                age = (now - _as_datetime(heartbeat)).total_seconds()
            elif started is not None:
                age = (_utcnow() - _as_datetime(started)).total_seconds()
        out.append(Attempt(tid, number, st, k, age))
    return out


def attempts(storage: RDBStorage, study_id: int, index: int) -> list[Attempt]:
    """Every trial tagged ``index``, oldest first: one indexed query."""
    def query() -> list[Attempt]:
        with storage.engine.connect() as conn:
            return _attempts(conn, study_id, index)

    return with_retry(query, what="find index")


def claim(storage: RDBStorage, trial_id: int) -> bool:
    """WAITING -> RUNNING for exactly one caller: a conditional UPDATE, atomic on PostgreSQL
    and SQLite alike (Optuna's read-then-write claim is not, on SQLite). Records the first
    heartbeat in the same transaction."""
    def update() -> bool:
        with storage.engine.begin() as conn:
            won = conn.execute(sa.text(
                "UPDATE trials SET state = 'RUNNING', datetime_start = :now "
                "WHERE trial_id = :t AND state = 'WAITING'"),
                {"t": trial_id, "now": _utcnow()}).rowcount == 1
            if won:
                from optuna.storages._rdb import models

                conn.execute(models.TrialHeartbeatModel.__table__.insert(),
                             [{"trial_id": trial_id}])
            return won

    return with_retry(update, what="claim")


def new_attempt(storage: RDBStorage, study_id: int, index: int, *, after: Attempt | None,
                params: dict[str, Any] | None) -> int | None:
    """Create the next attempt of ``index`` as RUNNING (owned by the caller), linked to
    ``after``. Returns its trial id, or None when another runner got there first (the latest
    attempt is no longer ``after``): the caller looks again."""
    def create() -> int | None:
        with _exclusive(storage.engine, study_id) as conn:
            current = _attempts(conn, study_id, index)
            latest = current[-1] if current else None
            if (latest.trial_id if latest else None) != (after.trial_id if after else None):
                return None
            if latest is not None and not latest.state.is_finished():
                return None
            row = _TrialRow(index=index, params=params, state=TrialState.RUNNING,
                            attempt=len(current),
                            retry_of=after.number if after is not None else None)
            return _bulk_insert_trials(conn, study_id, [row])[0]

    return with_retry(create, what="create attempt")


# --------------------------------------------------------------------------- summaries


def state_counts(storage: RDBStorage, study_id: int) -> dict[str, int]:
    """Trials by state, counted in the database (cheap enough to poll every second)."""
    def query() -> dict[str, int]:
        with storage.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT state, COUNT(*) FROM trials WHERE study_id = :s "
                                        "GROUP BY state"), {"s": study_id})
            return {(s if isinstance(s, str) else TrialState(s).name): n for s, n in rows}

    return with_retry(query, what="count trials")


@dataclass(frozen=True)
class IndexStatus:
    index: int
    state: str  # state of the latest attempt, or "PENDING" when nothing exists yet (adaptive)
    attempts: int
    trial_number: int | None
    values: tuple[float, ...] | None


def index_table(storage: RDBStorage, sweep_spec: SweepSpec, study_id: int) -> list[IndexStatus]:
    """Per index: latest attempt's state, number of attempts, its values. Two queries."""
    def query() -> list[IndexStatus]:
        with storage.engine.connect() as conn:
            rows = conn.execute(sa.text(f"""
                SELECT ua.value_json, t.trial_id, t.number, t.state
                FROM trial_user_attributes ua JOIN trials t ON t.trial_id = ua.trial_id
                WHERE ua.key = '{INDEX_ATTR}' AND t.study_id = :s ORDER BY t.number"""),
                {"s": study_id}).all()
            values: dict[int, dict[int, float]] = {}
            for tid, objective, value in conn.execute(sa.text(
                    "SELECT v.trial_id, v.objective, v.value FROM trial_values v "
                    "JOIN trials t ON t.trial_id = v.trial_id WHERE t.study_id = :s"),
                    {"s": study_id}):
                values.setdefault(tid, {})[objective] = value
        latest: dict[int, tuple[int, int, str]] = {}
        counts: dict[int, int] = {}
        for idx_json, tid, number, state in rows:
            idx = int(json.loads(idx_json))
            counts[idx] = counts.get(idx, 0) + 1
            latest[idx] = (tid, number, state if isinstance(state, str)
                           else TrialState(state).name)
        out = []
        for i in range(sweep_spec.trials):
            if i not in latest:
                out.append(IndexStatus(i, "PENDING", 0, None, None))
                continue
            tid, number, state = latest[i]
            vals = values.get(tid)
            out.append(IndexStatus(i, state, counts[i], number,
                                   tuple(vals[k] for k in sorted(vals)) if vals else None))
        return out

    return with_retry(query, what="index table")


def unfinished_indexes(table: Iterable[IndexStatus]) -> list[int]:
    return [s.index for s in table if s.state not in ("COMPLETE", "PRUNED")]


def fail_stale_trials(storage: RDBStorage, study_id: int, grace_s: float) -> list[int]:
    """Mark RUNNING trials whose heartbeat is older than ``grace_s`` FAIL (the watcher's sweep
    for runners that froze or vanished). Returns the ids of the trials it failed."""
    def stale() -> list[tuple[int, int]]:
        with storage.engine.connect() as conn:
            now = _db_now(conn)
            rows = conn.execute(sa.text(
                "SELECT t.trial_id, t.number, hb.heartbeat FROM trials t JOIN trial_heartbeats hb "
                "ON hb.trial_id = t.trial_id WHERE t.study_id = :s AND t.state = 'RUNNING'"),
                {"s": study_id}).all()
        return [(tid, number) for tid, number, hb in rows
                if (now - _as_datetime(hb)).total_seconds() > grace_s]

    failed = []
    for tid, number in with_retry(stale, what="find stale trials"):
        if mark_failed(storage, tid, f"heartbeat older than {grace_s:.0f}s: runner presumed dead"):
            logger.warning("trial #%d: heartbeat stale for %.0fs; marked FAIL", number, grace_s)
            failed.append(tid)
    return failed


def mark_failed(storage: RDBStorage, trial_id: int, reason: str) -> bool:
    """RUNNING -> FAIL with the reason stored on the trial. False if it had already finished."""
    try:
        storage.set_trial_user_attr(trial_id, FAIL_REASON_ATTR, reason[:2000])
        return storage.set_trial_state_values(trial_id, TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False


def set_trial_user_attrs(trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """``trial.set_user_attr`` for several keys in one transaction (Optuna commits each key
    separately: one commit, an fsync on PostgreSQL, per metric per report)."""
    import sqlite3

    backend = getattr(trial.storage, "_backend", trial.storage)
    dialect = backend.engine.dialect.name if isinstance(backend, RDBStorage) else ""
    if len(attrs) < 2 or not (dialect == "postgresql" or (
            dialect == "sqlite" and sqlite3.sqlite_version_info >= (3, 24))):
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return
    from optuna.storages._rdb.models import TrialModel, TrialUserAttributeModel
    from sqlalchemy.dialects import postgresql, sqlite

    insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
    assert isinstance(backend, RDBStorage)
    trial_id = trial._trial_id
    # The same rows Optuna writes (value_json = json.dumps(value)), as one upsert statement.
    stmt = insert(TrialUserAttributeModel.__table__).values(
        [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()])
    stmt = stmt.on_conflict_do_update(index_elements=["trial_id", "key"],
                                      set_={"value_json": stmt.excluded.value_json})
    trials = TrialModel.__table__

    def write() -> None:
        with backend.engine.begin() as conn:
            state = conn.execute(sa.select(trials.c.state).where(
                trials.c.trial_id == trial_id)).scalar_one_or_none()
            if state is None:
                raise KeyError(f"No trial with trial id {trial_id} exists.")
            backend.check_trial_is_updatable(trial_id, state)  # finished: UpdateFinishedTrialError
            conn.execute(stmt)

    with_retry(write, what="set user attrs")
    for key, value in attrs.items():
        trial._cached_frozen_trial.user_attrs[key] = value


def attach_trial(study: optuna.Study, trial_id: int) -> int:
    """Make a trial created outside Optuna's API (bulk insert, claim) known to the study's
    in-process storage cache, which Optuna otherwise only fills by loading every trial.
    Returns the trial's number."""
    from optuna.storages._cached_storage import _CachedStorage, _StudyInfo
    from optuna.storages._rdb.models import TrialModel
    from optuna.trial import FrozenTrial

    cache = study._storage
    if not isinstance(cache, _CachedStorage):
        return cache.get_trial(trial_id).number
    backend = cache._backend
    trials = TrialModel.__table__

    def row() -> tuple[int, TrialState]:
        with backend.engine.connect() as conn:
            number, state = conn.execute(sa.select(trials.c.number, trials.c.state).where(
                trials.c.trial_id == trial_id)).one()
        return int(number), state

    number, state = with_retry(row, what="attach trial")
    if state.is_finished():
        frozen = backend.get_trial(trial_id)
    else:
        # The cache never serves an unfinished trial from memory (every access, and every
        # refresh of the study's trials, reads it from the database), so registering its id,
        # number and state is enough: one small query instead of Optuna's six for a full trial.
        frozen = FrozenTrial(number=number, state=state, value=None, datetime_start=None,
                             datetime_complete=None, params={}, distributions={},
                             user_attrs={}, system_attrs={}, intermediate_values={},
                             trial_id=trial_id)
    with cache._lock:
        info = cache._studies.setdefault(study._study_id, _StudyInfo())
        cache._add_trials_to_cache(study._study_id, [frozen])
        if not frozen.state.is_finished():
            info.unfinished_trial_ids.add(trial_id)
    return number
