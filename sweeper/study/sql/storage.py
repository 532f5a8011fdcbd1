"""Opening the study storage: the retrying RDBStorage sweeper hands to Optuna, engine settings
per database, and the schema additions the index protocol needs."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

import optuna
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper._optuna_compat import RDBStoragePrivateRetries, rdb_tables
from sweeper.study.retry import NOT_DONE, retried, with_retry
from sweeper.study.sql import oneshot, writes
from sweeper.study.sql.index import take_riding
from sweeper.study.values import NextTake, Taken

T = TypeVar("T")
logger = logging.getLogger(__name__)

class RetryingRDBStorage(RDBStoragePrivateRetries):
    """RDBStorage whose every database call survives a database restart (idle connections
    are pinged, :func:`ping_when_idle`; :meth:`_retry` retries the call that was in flight),
    and whose writes know what "already done" looks like when the acknowledgement of a commit
    was lost.

    The public methods below and the private ones of :class:`RDBStoragePrivateRetries` are
    every RDBStorage method that talks to the database; the rest only call these
    (``create_new_trial``, ``set_trial_param``, ``get_all_trials``, ``get_best_trial``,
    ``get_n_trials``). The signatures are Optuna 5.0's (contract tests compare them)."""

    retry_deadline_s = 300.0

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        if self.engine.dialect.name == "postgresql":
            ping_when_idle(self.engine)
        #: Writes that go in the statement finishing their trial (:meth:`riding`).
        self._riders: dict[int, tuple[str, dict[str, Any], NextTake | None]] = {}
        #: What the takes that rode with finishes found, by their tokens (:meth:`taken_ahead`).
        self._taken_ahead: dict[str, Taken] = {}

    @contextlib.contextmanager
    def riding(self, trial_id: int, ctes: str, binds: dict[str, Any],
               then: NextTake | None = None) -> Iterator[bool]:
        """While in the block, a finish of ``trial_id`` also runs ``ctes`` (``name AS
        (INSERT ...), `` each, bound by ``binds``: the trial's last reports) in its statement:
        one round trip instead of two. Yields False where the finish is not one statement
        (the caller writes them itself first). ``then``: a take that rides too, where the
        finish is COMPLETE or PRUNED and matched (:meth:`taken_ahead` has what it found)."""
        if not oneshot.alone(self.engine):
            yield False
            return
        self._riders[trial_id] = (ctes, binds, then)
        try:
            yield True
        finally:
            self._riders.pop(trial_id, None)

    def taken_ahead(self, token: str) -> Taken | None:
        """What the take with ``token`` that rode with a finish found (once); None where it
        did not ride, or its result was lost (a retry found the finish landed)."""
        return self._taken_ahead.pop(token, None)

    def _retry(self, name: str, fn: Callable[..., T], *args: Any,
               landed: Callable[[], Any] | None = None, **kwargs: Any) -> T:
        return with_retry(fn, *args, deadline_s=self.retry_deadline_s, what=name, url=self.url,
                          landed=landed, **kwargs)

    # ---- the write tokens of the creations (RDBStoragePrivateRetries' hooks)

    not_landed = NOT_DONE

    def _new_token(self) -> str | None:
        writes.ensure_table(self.engine)
        return writes.new_token()

    def _token_row(self, token: str, *, study_id: int, trial_id: int | None = None) -> Any:
        return writes.record(token, study_id=study_id, trial_id=trial_id)

    def _found_token(self, token: str) -> tuple[int | None, int | None] | None:
        with self.engine.connect() as conn:
            return writes.find(conn, token)

    # ---- studies (create_new_study: RDBStoragePrivateRetries, with its token)

    def delete_study(self, study_id: int) -> None:
        def landed() -> Any:  # gone: the interrupted delete went through
            try:
                RDBStorage.get_study_name_from_id(self, study_id)
            except KeyError:
                return None
            return NOT_DONE

        return self._retry("delete_study", super().delete_study, study_id, landed=landed)

    set_study_user_attr = retried(RDBStorage.set_study_user_attr)
    set_study_system_attr = retried(RDBStorage.set_study_system_attr)
    get_study_id_from_name = retried(RDBStorage.get_study_id_from_name)
    get_study_name_from_id = retried(RDBStorage.get_study_name_from_id)
    get_study_directions = retried(RDBStorage.get_study_directions)
    get_study_user_attrs = retried(RDBStorage.get_study_user_attrs)
    get_study_system_attrs = retried(RDBStorage.get_study_system_attrs)
    get_all_studies = retried(RDBStorage.get_all_studies)
    # ---- trials (creation, params, lists, best: RDBStoragePrivateRetries)

    get_trial_id_from_study_id_trial_number = retried(
        RDBStorage.get_trial_id_from_study_id_trial_number)
    get_trial_param = retried(RDBStorage.get_trial_param)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        """RDBStorage's, except that a retry finds its own landed commit: a claim
        (WAITING -> RUNNING) by its token, a finish by the state and values it wrote."""
        if state == TrialState.RUNNING and values is None:
            return self._claim(trial_id)
        if not state.is_finished():
            return self._retry("set_trial_state_values", super().set_trial_state_values,
                               trial_id, state, values)
        wanted = None if values is None else [float(v) for v in values]

        def landed() -> Any:
            trial = RDBStorage.get_trial(self, trial_id)
            same = trial.state == state and (wanted is None or trial.values == wanted)
            return True if same else NOT_DONE

        return self._retry("set_trial_state_values", self._finish, trial_id, state, wanted,
                           landed=landed)

    def _finish(self, trial_id: int, state: TrialState, values: list[float] | None) -> bool:
        """RDBStorage.set_trial_state_values for a finishing state, in two statements instead
        of its four (a locking read of the trial and one of its values come first there): the
        conditional UPDATE is the check that the trial is unfinished, and a trial has no
        values before it finishes, so they are inserted, not merged."""
        if oneshot.alone(self.engine):
            return self._finish_alone(trial_id, state, values)
        tables = rdb_tables()
        trials = tables.trials
        with self.engine.begin() as conn:
            done = conn.execute(sa.update(trials).where(
                trials.c.trial_id == trial_id,
                trials.c.state.in_((TrialState.RUNNING, TrialState.WAITING))).values(
                state=state, datetime_complete=datetime.now())).rowcount
            if not done:
                current = conn.execute(sa.select(trials.c.state).where(
                    trials.c.trial_id == trial_id)).scalar_one_or_none()
                if current is None:
                    raise KeyError(f"No trial with trial id {trial_id} exists.")
                self.check_trial_is_updatable(trial_id, current)  # finished: it raises
            if values:
                conn.execute(sa.insert(tables.trial_values), [
                    {"trial_id": trial_id, "objective": k, "value": _stored_value(v),
                     "value_type": _value_type(v)} for k, v in enumerate(values)])
        return True

    def _finish_alone(self, trial_id: int, state: TrialState,
                      values: list[float] | None) -> bool:
        """:meth:`_finish` as one statement and round trip (PostgreSQL, see
        :mod:`sweeper.study.sql.oneshot`): the writes riding with it (:meth:`riding`), the
        conditional UPDATE, the values inserted only when it matched, and the state the trial
        had before."""
        ctes, binds, then = self._riders.get(trial_id, ("", {}, None))
        binds = {**binds, "t": trial_id, "done": datetime.now()}
        inserts = ""
        for k, v in enumerate(values or []):
            binds.update({f"v{k}": _stored_value(v), f"vt{k}": _value_type(v)})
            inserts += (f", v{k} AS (INSERT INTO trial_values (trial_id, objective, value, "
                        f"value_type) SELECT trial_id, {k}, :v{k}, :vt{k} FROM fin)")
        finish = (f"WITH {ctes}fin AS (UPDATE trials SET state='{state.name}', "  # enum's name
                  "datetime_complete=:done WHERE trial_id = :t AND state IN ('RUNNING', "
                  f"'WAITING') RETURNING trial_id){inserts}")
        own = "(SELECT COUNT(*) FROM fin), (SELECT state FROM trials WHERE trial_id = :t)"
        if then is not None and state in (TrialState.COMPLETE, TrialState.PRUNED):
            # The next index's take, claiming only if this finish matched: its columns first.
            take = take_riding(self, then, "EXISTS (SELECT 1 FROM fin)")
            rows = oneshot.run(self.engine, f"{finish}, {take.ctes} SELECT {take.columns}, "
                               f"{own} {take.from_}", {**binds, **take.binds})[0]
            done, current = rows[0][-2:]
            if done:
                self._taken_ahead[then.token] = take.read(rows)
        else:
            (done, current), = oneshot.run(self.engine, f"{finish} SELECT {own}", binds)[0]
        if not done:
            if current is None:
                raise KeyError(f"No trial with trial id {trial_id} exists.")
            self.check_trial_is_updatable(trial_id, TrialState[current])  # finished: raises
        return True

    def _claim(self, trial_id: int) -> bool:
        """Optuna's claim (``study.ask`` taking a WAITING trial) with a token: True exactly
        once, also when the acknowledgement of the winning commit was lost."""
        writes.ensure_table(self.engine)
        token = writes.new_token()

        def claim() -> bool:
            if oneshot.alone(self.engine):
                won, state = writes.claim_alone(self.engine, trial_id, token,
                                                start=datetime.now(), heartbeat=False)
                if won:
                    return True
                return self._unclaimable(trial_id, state)
            with self.engine.begin() as conn:
                if writes.claim_waiting(conn, trial_id, token, start=datetime.now(),
                                        heartbeat=False):
                    return True
                state = writes.trial_state(conn, trial_id)
            return self._unclaimable(trial_id, state)

        return self._retry("set_trial_state_values", claim)

    @staticmethod
    def _unclaimable(trial_id: int, state: str | None) -> bool:
        """A claim lost to ``state``: False, or the error Optuna raises there."""
        if state is None:
            raise KeyError(f"No trial with trial id {trial_id} exists.")
        if TrialState[state].is_finished():
            raise optuna.exceptions.UpdateFinishedTrialError(
                f"Trial#{trial_id} has already finished and can not be updated.")
        return False

    set_trial_intermediate_value = retried(RDBStorage.set_trial_intermediate_value)
    set_trial_user_attr = retried(RDBStorage.set_trial_user_attr)
    set_trial_system_attr = retried(RDBStorage.set_trial_system_attr)
    get_trial = retried(RDBStorage.get_trial)
    get_trial_user_attrs = retried(RDBStorage.get_trial_user_attrs)
    get_trial_system_attrs = retried(RDBStorage.get_trial_system_attrs)
    record_heartbeat = retried(RDBStorage.record_heartbeat)


def _stored_value(v: float) -> float | None:
    """Optuna's column for an objective value: +-inf are NULL, told apart by the type."""
    return None if math.isinf(v) else v


def _value_type(v: float) -> str:
    if not math.isinf(v):
        return "FINITE"
    return "INF_POS" if v > 0 else "INF_NEG"


#: A pooled PostgreSQL connection idle this long is pinged before use (the server may have
#: restarted or closed it meanwhile). One in steady use, as a runner's between the statements
#: of a trial, is not: a ping per checkout was a round trip per statement, and a connection
#: that died since its last use fails its statement, which the retry layer repeats.
IDLE_PING_S = 2.0


def ping_when_idle(engine: sa.Engine, idle_s: float = IDLE_PING_S) -> None:
    """SQLAlchemy's ``pool_pre_ping``, for connections idle more than ``idle_s`` only."""
    def checkin(dbapi_connection: Any, record: Any) -> None:
        record.info["sweeper_idle_since"] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop("sweeper_idle_since", None)
        if since is None or time.monotonic() - since < idle_s:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception:  # noqa: BLE001 - any failure: the pool replaces the connection
            alive = False
        if not alive:
            raise sa.exc.DisconnectionError("connection lost while idle")

    sa.event.listen(engine, "checkin", checkin)
    sa.event.listen(engine, "checkout", checkout)
