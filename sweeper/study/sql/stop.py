"""The stop rules' reads and writes (:mod:`sweeper.study.stop` decides): the stop attribute on
the study, recorded once under the study lock, and the few counts the rules look at."""

from __future__ import annotations

import json
import logging
from typing import Any

import sqlalchemy as sa

from sweeper.protocol import FAIL_REASON_ATTR, FAILED_FOR_GOOD_ATTR, STARTED_ATTR, STOP_ATTR
from sweeper.spec import SweepSpec
from sweeper.study import stop as rules
from sweeper.study.retry import with_retry
from sweeper.study.sql._bulk import exclusive
from sweeper.study.sql.storage import RetryingRDBStorage
from sweeper.study.values import IGNORED, STOPPED, StopState, parse_state

logger = logging.getLogger(__name__)

_READ_SQL = sa.text("SELECT key, value_json FROM study_user_attributes WHERE study_id = :s "
                    f"AND key IN ('{STOP_ATTR}', '{STARTED_ATTR}')")


def read_stop(storage: RetryingRDBStorage, study_id: int) -> tuple[StopState | None, str | None]:
    """(stop state, first launch time): one query on the study's attrs."""
    def query() -> dict[str, Any]:
        with storage.engine.connect() as conn:
            return {k: json.loads(v) for k, v in conn.execute(_READ_SQL, {"s": study_id})}

    attrs = with_retry(query, what="read the stop state")
    started = attrs.get(STARTED_ATTR)
    return parse_state(attrs.get(STOP_ATTR)), started if isinstance(started, str) else None


def _write(storage: RetryingRDBStorage, study_id: int, state: StopState, *,
           replace: bool) -> StopState:
    """Write the state unless one is there already (``replace``: overwrite it). Under the
    study lock, so two runners firing at once record one rule. Returns what is stored."""
    def write() -> StopState:
        with exclusive(storage.engine, study_id) as conn:
            row = conn.execute(sa.text("SELECT value_json FROM study_user_attributes WHERE "
                                       "study_id = :s AND key = :k"),
                               {"s": study_id, "k": STOP_ATTR}).first()
            current = parse_state(json.loads(row[0])) if row is not None else None
            if current is not None and not replace:
                return current
            blob = json.dumps(state.to_json())
            if row is not None:
                conn.execute(sa.text("UPDATE study_user_attributes SET value_json = :v WHERE "
                                     "study_id = :s AND key = :k"),
                             {"v": blob, "s": study_id, "k": STOP_ATTR})
            else:
                conn.execute(sa.text("INSERT INTO study_user_attributes (study_id, key, "
                                     "value_json) VALUES (:s, :k, :v)"),
                             {"s": study_id, "k": STOP_ATTR, "v": blob})
            return state

    return with_retry(write, what="record the stop state")


def record_stop(storage: RetryingRDBStorage, study_id: int, rule: str, reason: str,
                trial: int | None = None) -> StopState:
    """Record that ``rule`` fired (the first rule recorded wins)."""
    state = _write(storage, study_id, StopState(STOPPED, rule, reason, rules.now_iso(), trial),
                   replace=False)
    if state.rule == rule and state.reason == reason:
        logger.warning("the sweep stops: %s", state.describe())
    return state


def ignore_stop(storage: RetryingRDBStorage, study_id: int) -> StopState | None:
    """``--ignore-stop``: keep what fired, for the record, and turn the rules off."""
    current = read_stop(storage, study_id)[0]
    if current is None or not current.stopped:
        return current
    return _write(storage, study_id, StopState(IGNORED, current.rule, current.reason,
                                               current.at, current.trial), replace=True)


def stop_check(storage: RetryingRDBStorage, study_id: int, spec: SweepSpec, *,
               after_trial: bool) -> StopState | None:
    """The stop state once the rules are checked: a stop already recorded stands (an ignored
    one turns the rules off); else ``max_duration`` alone before a start, every rule after a
    trial; the first rule that fires is recorded."""
    state, started = read_stop(storage, study_id)
    if state is not None:
        return state if state.stopped else None
    if not spec.stop.any:  # the brake alone: recorded by brake(), read above
        return None
    if not after_trial:
        why = rules.check_duration(spec, started)
        return record_stop(storage, study_id, "max_duration", why) if why else None
    fired = rules.fired(spec, *_rule_counts(storage, study_id, spec), started)
    if fired is None:
        return None
    rule, reason, trial = fired
    return record_stop(storage, study_id, rule, reason, trial)


_BEST_SQL = """
SELECT t.number, t.datetime_complete, v.value FROM trials t
JOIN trial_values v ON v.trial_id = t.trial_id
WHERE t.study_id = :s AND t.state = 'COMPLETE' AND v.objective = 0 AND v.value_type = 'FINITE'
ORDER BY v.value {order}, t.datetime_complete ASC LIMIT 1"""
_FINISHED_AFTER_SQL = """
SELECT COUNT(*) FROM trials WHERE study_id = :s AND state IN ('COMPLETE', 'PRUNED')
AND datetime_complete > :t"""
_FAILED_FOR_GOOD_SQL = f"""
SELECT COUNT(DISTINCT ix.value_json) FROM trial_user_attributes ff
JOIN trials t ON t.trial_id = ff.trial_id
JOIN trial_user_attributes ix ON ix.trial_id = t.trial_id AND ix.key = 'sweeper:index'
WHERE ff.key = '{FAILED_FOR_GOOD_ATTR}' AND t.study_id = :s AND t.state = 'FAIL'"""


def _rule_counts(storage: RetryingRDBStorage, study_id: int,
                 spec: SweepSpec) -> tuple[tuple[int, float] | None, int, int]:
    """What the rules look at: the best trial (number, value), the trials finished since it,
    and the indexes failed for good. Only what a rule of ``spec`` needs is queried."""
    stop = spec.stop
    maximize = spec.objectives[0].direction == "maximize"

    def query() -> tuple[Any, int, int]:
        with storage.engine.connect() as conn:
            best = None
            if stop.value is not None or stop.patience is not None:
                best = conn.execute(sa.text(_BEST_SQL.format(
                    order="DESC" if maximize else "ASC")), {"s": study_id}).first()
            after = 0
            if stop.patience is not None and best is not None:
                after = conn.execute(sa.text(_FINISHED_AFTER_SQL),
                                     {"s": study_id, "t": best[1]}).scalar_one()
            failed = 0
            if stop.max_failed_trials:
                failed = conn.execute(sa.text(_FAILED_FOR_GOOD_SQL),
                                      {"s": study_id}).scalar_one()
            return best, after, failed

    best, after, failed = with_retry(query, what="evaluate the stop rules")
    return (None if best is None else (int(best[0]), float(best[2]))), int(after), int(failed)


#: Failures the trial itself caused count; what sweeper wrote about the runner's fate (killed,
#: interrupted, cancelled, stopped) and stale heartbeats (no reason) do not.
_OWN_FAILURES = f"""
FROM trial_user_attributes a JOIN trials t ON t.trial_id = a.trial_id
WHERE t.study_id = :s AND t.state = 'FAIL' AND a.key = '{FAIL_REASON_ATTR}'
AND a.value_json NOT LIKE '"runner process %' AND a.value_json NOT LIKE '"interrupted by %'
AND a.value_json NOT LIKE '"cancelled %' AND a.value_json NOT LIKE '"sweep stopped%'"""
_BRAKE_SQL = f"""
SELECT (SELECT COUNT(*) FROM trials WHERE study_id = :s AND state IN ('COMPLETE', 'PRUNED')),
       (SELECT COUNT(*) {_OWN_FAILURES})"""
_COMMON_REASON_SQL = f"""
SELECT a.value_json, COUNT(*) AS n {_OWN_FAILURES}
GROUP BY a.value_json ORDER BY n DESC LIMIT 1"""


def brake(storage: RetryingRDBStorage, study_id: int, limit: int) -> StopState | None:
    """Record the brake's stop when the sweep's first ``limit`` attempts all failed of their
    own doing (:func:`sweeper.study.stop.brake_reason` decides)."""
    current = read_stop(storage, study_id)[0]
    if current is not None:  # stopped already, or the rules are off (--ignore-stop)
        return current if current.stopped else None

    def query() -> tuple[int, int, str | None]:
        with storage.engine.connect() as conn:
            done, failed = conn.execute(sa.text(_BRAKE_SQL), {"s": study_id}).one()
            common = None
            if not done and failed >= limit:
                row = conn.execute(sa.text(_COMMON_REASON_SQL), {"s": study_id}).first()
                common = json.loads(row[0]) if row is not None else None
            return int(done), int(failed), common

    why = rules.brake_reason(*with_retry(query, what="check the failing start"), limit)
    return record_stop(storage, study_id, rules.BRAKE_RULE, why) if why else None
