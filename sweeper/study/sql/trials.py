"""Trial writes and reads that Optuna's API makes slow on a runner's hot path: several user
attrs in one transaction, and a trial created by the index protocol made known to the study's
trial cache without reloading every trial."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.distributions import BaseDistribution, distribution_to_json, json_to_distribution
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from sweeper._optuna_compat import (
    add_to_cache,
    cached_rdb_backend,
    rdb_tables,
    storage_of,
    trial_from_frozen,
)
from sweeper.study.retry import with_retry
from sweeper.study.sql import oneshot


def write_rows(backend: RDBStorage, trial_id: int, *,
               user_attrs: Mapping[str, Any] | None = None,
               params: Mapping[str, tuple[Any, BaseDistribution]] | None = None,
               reports: Sequence[tuple[int, float]] = ()) -> None:
    """``IndexStore.write_trial``: a running trial's user attrs, params and new reports in one
    transaction of upserts where the database has them; else Optuna's calls, one by one."""
    if not _can_upsert(backend):
        for name, (value, distribution) in (params or {}).items():
            backend.set_trial_param(trial_id, name, distribution.to_internal_repr(value),
                                    distribution)
        for step, value in reports:
            backend.set_trial_intermediate_value(trial_id, step, value)
        for key, value in (user_attrs or {}).items():
            backend.set_trial_user_attr(trial_id, key, value)
        return
    statements = [*_param_rows(params or {}), *_report_rows(reports),
                  *_attr_rows(user_attrs or {})]
    if statements:
        with_retry(lambda: _write(backend, trial_id, statements), what="write trial")


def finish_ctes(trial_id: int, user_attrs: Mapping[str, Any],
                reports: Sequence[tuple[int, float]]) -> tuple[str, dict[str, Any]]:
    """``user_attrs`` and ``reports`` as the parts of the data-modifying WITH that finishes
    the trial (``RetryingRDBStorage.riding``)."""
    ctes, binds = _ctes(trial_id, [*_report_rows(reports), *_attr_rows(user_attrs)], "r")
    return "".join(f"{cte}, " for cte in ctes), binds


def _can_upsert(backend: RDBStorage) -> bool:
    import sqlite3

    dialect = backend.engine.dialect.name
    return dialect == "postgresql" or (dialect == "sqlite"
                                       and sqlite3.sqlite_version_info >= (3, 24))


def write_user_attrs(backend: RDBStorage, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Upsert ``attrs`` of an unfinished trial in one transaction (UpdateFinishedTrialError
    if it finished; KeyError if there is no such trial)."""
    if not attrs:
        return
    if not _can_upsert(backend):
        for key, value in attrs.items():
            backend.set_trial_user_attr(trial_id, key, value)
        return
    statements = _attr_rows(attrs)
    with_retry(lambda: _write(backend, trial_id, statements), what="set user attrs")


#: The guard of every write to a trial: it exists and is unfinished (Optuna's check, done by
#: the statement itself instead of a SELECT before it).
_LIVE = "EXISTS (SELECT 1 FROM trials WHERE trial_id = :t AND state IN ('RUNNING', 'WAITING'))"


@dataclass(frozen=True)
class _Rows:
    """One guarded upsert of ``rows`` (without the trial id) into ``table``."""

    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    conflict: str

    def statement(self, trial_id: int, prefix: str = "v") -> tuple[str, dict[str, Any]]:
        """``INSERT .. SELECT`` the rows only while the trial is unfinished: one statement,
        no SELECT of the state first. A single row is a plain SELECT of its values (a string
        there takes the column's type, enums included); several are a VALUES list (whose
        columns PostgreSQL and SQLite both name column1, column2, ...). Its values are bound
        as ``PREFIX{row}_{column}``."""
        binds: dict[str, Any] = {"t": trial_id}
        tuples = []
        for i, row in enumerate(self.rows):
            names = []
            for j, value in enumerate(row):
                binds[f"{prefix}{i}_{j}"] = value
                names.append(f":{prefix}{i}_{j}")
            tuples.append(names)
        if len(tuples) == 1:
            source = ", ".join(tuples[0]) + " WHERE "
        else:
            cols = ", ".join(f"column{j + 1}" for j in range(len(self.columns)))
            values = ", ".join("(" + ", ".join(names) + ")" for names in tuples)
            source = f"{cols} FROM (VALUES {values}) AS v WHERE "
        sql = (f"INSERT INTO {self.table} (trial_id, {', '.join(self.columns)}) "
               f"SELECT :t, {source}{_LIVE} {self.conflict}")
        return sql, binds


def _write(backend: RDBStorage, trial_id: int, writes: list[_Rows]) -> None:
    """One transaction of guarded upserts (on PostgreSQL one statement, see
    :mod:`sweeper.study.sql.oneshot`). Where a statement wrote fewer rows than it had (a retry
    finding its rows, or a trial finished or missing), the trial's state says which:
    KeyError if there is no such trial, UpdateFinishedTrialError if it finished."""
    if oneshot.alone(backend.engine):
        sql, binds = _together(trial_id, writes)
        (counts,), _ = oneshot.run(backend.engine, sql, binds)
        if any(n < len(w.rows) for n, w in zip(counts, writes, strict=True)):
            rows, _ = oneshot.run(backend.engine, _STATE, {"t": trial_id})
            _check_updatable(backend, trial_id, rows[0][0] if rows else None)
        return
    with backend.engine.begin() as conn:
        short = False
        for w in writes:
            stmt, binds = w.statement(trial_id)
            short |= conn.execute(sa.text(stmt), binds).rowcount < len(w.rows)
        if short:
            _check_updatable(backend, trial_id,
                             conn.execute(_STATE, {"t": trial_id}).scalar_one_or_none())


_STATE = sa.text("SELECT state FROM trials WHERE trial_id = :t")


def _check_updatable(backend: RDBStorage, trial_id: int, state: Any) -> None:
    """KeyError if there is no such trial, UpdateFinishedTrialError if it finished."""
    if state is None:
        raise KeyError(f"No trial with trial id {trial_id} exists.")
    backend.check_trial_is_updatable(trial_id, _state(state))


def _together(trial_id: int, writes: list[_Rows]) -> tuple[str, dict[str, Any]]:
    """The upserts as one statement (PostgreSQL's data-modifying WITH), which returns how
    many rows each wrote."""
    parts, binds = _ctes(trial_id, writes, "w", returning=" RETURNING 1")
    counts = ", ".join(f"(SELECT COUNT(*) FROM w{k})" for k in range(len(writes)))
    return f"WITH {', '.join(parts)} SELECT {counts}", binds


def _ctes(trial_id: int, writes: list[_Rows], name: str, returning: str = ""
          ) -> tuple[list[str], dict[str, Any]]:
    """The upserts as the parts of a data-modifying WITH, ``NAMEk AS (...)``, each bound by
    its own ``NAMEkr...`` values."""
    parts: list[str] = []
    binds: dict[str, Any] = {}
    for k, w in enumerate(writes):
        sql, more = w.statement(trial_id, prefix=f"{name}{k}r")
        binds.update(more)
        parts.append(f"{name}{k} AS ({sql}{returning})")
    return parts, binds


def _attr_rows(attrs: Mapping[str, Any]) -> list[_Rows]:
    """The rows Optuna writes (value_json = json.dumps(value)), as one upsert."""
    if not attrs:
        return []
    return [_Rows("trial_user_attributes", ("key", "value_json"),
                  tuple((k, json.dumps(v)) for k, v in attrs.items()),
                  "ON CONFLICT (trial_id, key) DO UPDATE SET value_json = excluded.value_json")]


def _param_rows(params: Mapping[str, tuple[Any, BaseDistribution]]) -> list[_Rows]:
    """Optuna's rows for suggested params; a param stored already keeps its value (as a second
    ``suggest_*`` of the same name returns the first)."""
    if not params:
        return []
    return [_Rows("trial_params", ("param_name", "param_value", "distribution_json"),
                  tuple((name, float(d.to_internal_repr(v)), distribution_to_json(d))
                        for name, (v, d) in params.items()),
                  "ON CONFLICT (trial_id, param_name) DO NOTHING")]


def _report_rows(reports: Sequence[tuple[int, float]]) -> list[_Rows]:
    """Optuna's rows for finite intermediate values, an upsert each (a single row's string
    takes the enum column's type; a VALUES list's would be text); a step reported already
    keeps its value (``Trial.report`` ignores a second report of a step)."""
    return [_Rows("trial_intermediate_values",
                  ("step", "intermediate_value", "intermediate_value_type"),
                  ((step, float(value), "FINITE"),), "ON CONFLICT (trial_id, step) DO NOTHING")
            for step, value in reports]


def attach_trial(study: optuna.Study, trial_id: int) -> int:
    """Make a trial created outside Optuna's API (bulk insert, claim) known to the study's
    in-process storage cache, which Optuna otherwise only fills by loading every trial.
    Returns the trial's number."""
    backend = cached_rdb_backend(study)
    if backend is None:
        return storage_of(study).get_trial(trial_id).number
    trials = rdb_tables().trials

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
    add_to_cache(study, frozen)
    return number


#: The trial, its attributes and its params (a planned trial's are stored when it is
#: enqueued, see sweeper.study.sql._bulk), and how many reports and values it has.
_OPEN_SQL = """
SELECT t.state, t.datetime_start, a.kind, a.key, a.value_json,
  (SELECT COUNT(*) FROM trial_intermediate_values i WHERE i.trial_id = t.trial_id)
  + (SELECT COUNT(*) FROM trial_values v WHERE v.trial_id = t.trial_id), t.number, a.num
FROM trials t LEFT JOIN (
  SELECT 'u' AS kind, trial_id, key, value_json, CAST(NULL AS DOUBLE PRECISION) AS num
  FROM trial_user_attributes WHERE trial_id = :t
  UNION ALL
  SELECT 's', trial_id, key, value_json, NULL FROM trial_system_attributes WHERE trial_id = :t
  UNION ALL
  SELECT 'p', trial_id, param_name, distribution_json, param_value FROM trial_params
  WHERE trial_id = :t
) a ON a.trial_id = t.trial_id
WHERE t.trial_id = :t"""
_OPEN = sa.text(_OPEN_SQL)


def open_trial(study: optuna.Study, trial_id: int, number: int | None = None) -> optuna.Trial:
    """``optuna.Trial(study, trial_id)`` for a trial the index protocol has just claimed or
    created (RUNNING, no values or reports yet; a planned trial's params), read in one query
    instead of the six of Optuna's ``get_trial``. Without ``number`` (the trial not attached
    yet), the same query attaches it to the study's cache (what :func:`attach_trial` does).
    Anything else takes Optuna's own path."""
    backend = cached_rdb_backend(study)
    if backend is None:
        if number is None:
            attach_trial(study, trial_id)
        return optuna.Trial(study, trial_id)

    def rows() -> list[Any]:
        if oneshot.alone(backend.engine):
            return oneshot.run(backend.engine, _OPEN, {"t": trial_id})[0]
        with backend.engine.connect() as conn:
            return list(conn.execute(_OPEN, {"t": trial_id}).all())

    got = with_retry(rows, what="open trial")
    if not got:
        raise KeyError(f"No trial with trial id {trial_id} exists.")
    state = _state(got[0][0])
    if state != TrialState.RUNNING or got[0][5]:
        if number is None:
            attach_trial(study, trial_id)
        return optuna.Trial(study, trial_id)
    return _opened(study, trial_id, int(got[0][6]), got[0][1],
                   [(kind, key, value_json, num) for _, _, kind, key, value_json, _, _, num in got],
                   attach=number is None)


def open_claimed(study: optuna.Study, trial_id: int, number: int, started: datetime,
                 stored: Sequence[tuple[str | None, str, str, float | None]]) -> optuna.Trial:
    """:func:`open_trial` for a trial :func:`sweeper.study.sql.index.take` has just claimed, built
    from what its statement read and wrote (``stored``: ``Taken.stored``, ``started``: the
    start time it wrote) instead of reading it again: no query. Attaches it to the study's
    cache."""
    if cached_rdb_backend(study) is None:
        return open_trial(study, trial_id)
    return _opened(study, trial_id, number, started, stored, attach=True)


def _opened(study: optuna.Study, trial_id: int, number: int, started: datetime | str,
            stored: Sequence[tuple[str | None, str, str, float | None]], *,
            attach: bool) -> optuna.Trial:
    """A RUNNING trial with nothing reported yet, from its (kind, key, value_json, internal
    value) rows: "u" user attribute, "s" system attribute, "p" param (its distribution's JSON
    and internal value); a later row with the same key wins."""
    attrs: dict[str, dict[str, Any]] = {"u": {}, "s": {}}
    params: dict[str, Any] = {}
    dists: dict[str, BaseDistribution] = {}
    for kind, key, value_json, num in stored:
        if kind == "p":
            assert num is not None  # trial_params.param_value is NOT NULL
            dists[key] = _distribution(value_json)
            params[key] = dists[key].to_external_repr(num)
        elif kind is not None:
            attrs[kind][key] = json.loads(value_json)
    frozen = FrozenTrial(number=number, state=TrialState.RUNNING, value=None,
                         datetime_start=datetime.fromisoformat(started)
                         if isinstance(started, str) else started,
                         datetime_complete=None, params=params, distributions=dists,
                         user_attrs=attrs["u"], system_attrs=attrs["s"],
                         intermediate_values={}, trial_id=trial_id)
    if attach:
        add_to_cache(study, frozen)
    return trial_from_frozen(study, frozen)


@functools.lru_cache(maxsize=256)
def _distribution(text: str) -> BaseDistribution:
    """A stored distribution (the same few JSON texts in every trial of a sweep)."""
    return json_to_distribution(text)


def _state(value: Any) -> TrialState:
    return value if isinstance(value, TrialState) else TrialState[value] \
        if isinstance(value, str) else TrialState(value)
