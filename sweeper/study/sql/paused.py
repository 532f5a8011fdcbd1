"""A scheduler's pauses (``scheduler:`` promotion ASHA) on Optuna's tables: what the ranking
reads, the pause, the stale promotion put back, and the sweep's end.

A paused trial is WAITING with the user attrs ``sweeper:rung`` and ``sweeper:paused`` true; its
promotion is claimed by the index protocol's claim (WAITING -> RUNNING, exactly one winner,
:func:`sweeper.study.sql.index.claim`). A WAITING trial holds no heartbeat row: the pause and
the put-back delete it in the transaction that changes the state, so that the claim's first
heartbeat is an insert, as on any WAITING trial."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from sweeper.accounting import Ending
from sweeper.protocol import INDEX_ATTR, PAUSED_ATTR, RUNG_ATTR
from sweeper.study.retry import with_retry
from sweeper.study.sql import writes
from sweeper.study.sql._bulk import utcnow
from sweeper.study.sql.ledger import close_open
from sweeper.study.values import RungTrial

_TRUE = json.dumps(True)

_RUNG_TRIALS = sa.text(f"""
SELECT t.trial_id, t.number, t.state, ix.value_json, rg.value_json, pz.value_json,
  hb.heartbeat, CURRENT_TIMESTAMP, iv.step, iv.intermediate_value
FROM trials t
LEFT JOIN trial_user_attributes ix ON ix.trial_id = t.trial_id AND ix.key = '{INDEX_ATTR}'
LEFT JOIN trial_user_attributes rg ON rg.trial_id = t.trial_id AND rg.key = '{RUNG_ATTR}'
LEFT JOIN trial_user_attributes pz ON pz.trial_id = t.trial_id AND pz.key = '{PAUSED_ATTR}'
LEFT JOIN trial_heartbeats hb ON hb.trial_id = t.trial_id
LEFT JOIN trial_intermediate_values iv ON iv.trial_id = t.trial_id AND iv.step IN :steps
WHERE t.study_id = :s AND (iv.step IS NOT NULL OR rg.value_json IS NOT NULL)
ORDER BY t.number, iv.step
""").bindparams(sa.bindparam("steps", expanding=True))


def _naive(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=None)


def _state(value: Any) -> TrialState:
    return TrialState[value] if isinstance(value, str) else TrialState(value)


def _rung_trials(rows: list[Any]) -> list[RungTrial]:
    by_id: dict[int, RungTrial] = {}
    values: dict[int, list[tuple[int, float]]] = {}
    for tid, number, state, index, rung, paused, hb, now, step, value in rows:
        if tid not in by_id:
            st = _state(state)
            age = (_naive(now) - _naive(hb)).total_seconds() \
                if st == TrialState.RUNNING and hb is not None else None
            by_id[tid] = RungTrial(
                tid, number, json.loads(index) if index is not None else None, st,
                json.loads(rung) if rung is not None else None,
                st == TrialState.WAITING and paused == _TRUE, age, ())
            values[tid] = []
        if step is not None and value is not None:
            values[tid].append((int(step), float(value)))
    return [RungTrial(t.trial_id, t.number, t.index, t.state, t.rung, t.paused,
                      t.heartbeat_age_s, tuple(values[t.trial_id])) for t in by_id.values()]


def rung_trials(storage: RDBStorage, study_id: int, steps: list[int]) -> list[RungTrial]:
    """Every trial of the study with an intermediate value at one of ``steps`` or a rung it
    paused at: one query."""
    def query() -> list[RungTrial]:
        with storage.engine.connect() as conn:
            rows = conn.execute(_RUNG_TRIALS, {"s": study_id, "steps": list(steps)}).all()
        return _rung_trials(list(rows))

    return with_retry(query, what="read rungs", url=storage.url)


def _set_attrs(conn: sa.Connection, trial_id: int, attrs: dict[str, Any]) -> None:
    for key, value in attrs.items():
        params = {"t": trial_id, "k": key}
        conn.execute(sa.text("DELETE FROM trial_user_attributes WHERE trial_id = :t "
                             "AND key = :k"), params)
        conn.execute(sa.text("INSERT INTO trial_user_attributes (trial_id, key, value_json) "
                             "VALUES (:t, :k, :v)"), {**params, "v": json.dumps(value)})


def _to_waiting(conn: sa.Connection, trial_id: int, rung: int | None) -> bool:
    """RUNNING -> WAITING, paused (at ``rung``, or the rung it has), without a heartbeat; an
    open segment its runner did not close (a stale promotion) is closed as failed."""
    done = conn.execute(sa.text("UPDATE trials SET state = 'WAITING' WHERE trial_id = :t "
                                "AND state = 'RUNNING'"), {"t": trial_id}).rowcount == 1
    if done:
        close_open(conn, trial_id, Ending.FAILED)
        conn.execute(sa.text("DELETE FROM trial_heartbeats WHERE trial_id = :t"), {"t": trial_id})
        attrs: dict[str, Any] = {PAUSED_ATTR: True}
        if rung is not None:
            attrs[RUNG_ATTR] = rung
        _set_attrs(conn, trial_id, attrs)
    return done


def pause(storage: RDBStorage, trial_id: int, rung: int, *, token: str | None = None) -> bool:
    """RUNNING -> WAITING paused at ``rung``, in one transaction with the call's token (a retry
    after a lost acknowledgement finds its own pause). False if the trial was not RUNNING (the
    watcher failed it, say)."""
    token = token or writes.new_token()
    writes.ensure_table(storage.engine)

    def update() -> bool:
        with storage.engine.begin() as conn:
            if _to_waiting(conn, trial_id, rung):
                conn.execute(writes.record(token, trial_id=trial_id))
                return True
            return writes.find(conn, token) is not None

    return with_retry(update, what="pause trial", url=storage.url)


_STALE_PROMOTIONS = sa.text(f"""
SELECT t.trial_id, hb.heartbeat, CURRENT_TIMESTAMP FROM trials t
JOIN trial_user_attributes rg ON rg.trial_id = t.trial_id AND rg.key = '{RUNG_ATTR}'
JOIN trial_heartbeats hb ON hb.trial_id = t.trial_id
WHERE t.study_id = :s AND t.state = 'RUNNING'
""")


def requeue_stale(storage: RDBStorage, study_id: int, grace_s: float) -> list[int]:
    """Promoted trials (RUNNING with a rung) whose heartbeat is older than ``grace_s`` back to
    WAITING, paused at their rung: their promoter died, the promotion is claimed again. Only
    where the heartbeat is still the stale one read (a beat in between keeps the trial)."""
    def stale() -> list[tuple[int, Any]]:
        with storage.engine.connect() as conn:
            rows = conn.execute(_STALE_PROMOTIONS, {"s": study_id}).all()
        return [(tid, hb) for tid, hb, now in rows
                if (_naive(now) - _naive(hb)).total_seconds() > grace_s]

    def put_back(tid: int, hb: Any) -> bool:
        with storage.engine.begin() as conn:
            if conn.execute(sa.text("SELECT 1 FROM trial_heartbeats WHERE trial_id = :t "
                                    "AND heartbeat = :hb"), {"t": tid, "hb": hb}).first() is None:
                return False
            return _to_waiting(conn, tid, None)

    back = []
    for tid, hb in with_retry(stale, what="find stale promotions", url=storage.url):
        if with_retry(lambda tid=tid, hb=hb: put_back(tid, hb), what="put back promotion",
                      url=storage.url):
            back.append(tid)
    return back


_PAUSED = sa.text(f"""
SELECT t.trial_id FROM trials t
JOIN trial_user_attributes pz ON pz.trial_id = t.trial_id AND pz.key = '{PAUSED_ATTR}'
WHERE t.study_id = :s AND t.state = 'WAITING' AND pz.value_json = :true
""")


def finish_paused(storage: RDBStorage, study_id: int) -> list[int]:
    """The sweep's end (nothing can be promoted any more): every paused trial WAITING ->
    PRUNED, its rung and intermediate values kept. Each a conditional UPDATE, so a claim of
    the same trial and this finish never both win. Returns the ids this call finished."""
    def finish() -> list[int]:
        with storage.engine.begin() as conn:
            ids = [tid for (tid,) in conn.execute(_PAUSED, {"s": study_id, "true": _TRUE})]
            now = utcnow()
            return [tid for tid in ids if conn.execute(sa.text(
                "UPDATE trials SET state = 'PRUNED', datetime_complete = :now "
                "WHERE trial_id = :t AND state = 'WAITING'"), {"t": tid, "now": now}).rowcount]

    return with_retry(finish, what="finish paused trials", url=storage.url)
