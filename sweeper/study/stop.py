"""Sweep-level stop rules (``stop:``): when one fires, the sweep starts no new index.

The state lives on the study (user attr ``STOP_ATTR``), so every runner, the CLI and the
dashboard see the same thing whether ``sweeper run`` watches or not. Runners read it before
claiming an index (one indexed query on two study attrs, nothing when the spec has no rules)
and evaluate the rules after each trial they finish; the first rule to fire is recorded once.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from optuna.storages import RDBStorage

from sweeper.protocol import FAIL_REASON_ATTR, FAILED_FOR_GOOD_ATTR, STARTED_ATTR, STOP_ATTR
from sweeper.proxy import client as proxy
from sweeper.spec import SweepSpec
from sweeper.study._bulk import exclusive
from sweeper.study.retry import with_retry

logger = logging.getLogger(__name__)

STOPPED, IGNORED = "stopped", "ignored"


@dataclass(frozen=True)
class StopState:
    """What the study says: a rule fired (``stopped``), or the user chose to go on past it
    (``ignored``: the rules are off for this sweep)."""

    state: str
    rule: str
    reason: str
    at: str
    trial: int | None = None

    @property
    def stopped(self) -> bool:
        return self.state == STOPPED

    def describe(self) -> str:
        """One line: which rule fired, when, and why."""
        return f"stop rule {self.rule} fired at {self.at[:19]}Z: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "rule": self.rule, "reason": self.reason, "at": self.at,
                "trial": self.trial}


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")


def parse_state(value: Any) -> StopState | None:
    """The stop attribute's stored value as a state (None: nothing recorded)."""
    if not isinstance(value, dict) or value.get("state") not in (STOPPED, IGNORED):
        return None
    return StopState(value["state"], str(value.get("rule")), str(value.get("reason")),
                     str(value.get("at")), value.get("trial"))


_READ_SQL = sa.text("SELECT key, value_json FROM study_user_attributes WHERE study_id = :s "
                    f"AND key IN ('{STOP_ATTR}', '{STARTED_ATTR}')")


def read_stop(storage: RDBStorage | proxy.ProxyStorage, study_id: int
              ) -> tuple[StopState | None, str | None]:
    """(stop state, first launch time): one query on the study's attrs."""
    if isinstance(storage, proxy.ProxyStorage):
        got = storage.get_study_user_attrs(study_id)
        started = got.get(STARTED_ATTR)
        return parse_state(got.get(STOP_ATTR)), started if isinstance(started, str) else None

    def query() -> dict[str, Any]:
        with storage.engine.connect() as conn:
            return {k: json.loads(v) for k, v in conn.execute(_READ_SQL, {"s": study_id})}

    attrs = with_retry(query, what="read the stop state")
    started = attrs.get(STARTED_ATTR)
    return parse_state(attrs.get(STOP_ATTR)), started if isinstance(started, str) else None


def stop_state(storage: RDBStorage | proxy.ProxyStorage, study_id: int) -> StopState | None:
    return read_stop(storage, study_id)[0]


def _write(storage: RDBStorage, study_id: int, state: StopState, *, replace: bool) -> StopState:
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


def record_stop(storage: RDBStorage, study_id: int, rule: str, reason: str,
                trial: int | None = None) -> StopState:
    """Record that ``rule`` fired (the first rule recorded wins)."""
    state = _write(storage, study_id, StopState(STOPPED, rule, reason, now_iso(), trial),
                   replace=False)
    if state.rule == rule and state.reason == reason:
        logger.warning("the sweep stops: %s", state.describe())
    return state


def ignore_stop(storage: RDBStorage | proxy.ProxyStorage, study_id: int) -> StopState | None:
    """``--ignore-stop``: keep what fired, for the record, and turn the rules off."""
    if isinstance(storage, proxy.ProxyStorage):  # the proxy runs this function on its database
        return parse_state(storage.ignore_stop(study_id))
    current = stop_state(storage, study_id)
    if current is None or not current.stopped:
        return current
    return _write(storage, study_id, StopState(IGNORED, current.rule, current.reason,
                                               current.at, current.trial), replace=True)


# --------------------------------------------------------------------------- the rules


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=None)


def check_duration(spec: SweepSpec, started: str | None) -> str | None:
    """The reason ``max_duration`` fires now, or None."""
    budget = spec.stop.max_duration
    if budget is None or started is None:
        return None
    elapsed = datetime.now(timezone.utc).replace(tzinfo=None) - _parse_time(started)
    if elapsed < timedelta(seconds=budget):
        return None
    return f"{elapsed.total_seconds():.0f}s since the sweep started (max_duration {budget:g}s)"


def before_start(storage: RDBStorage | proxy.ProxyStorage, study_id: int,
                 spec: SweepSpec) -> StopState | None:
    """What a runner (or the local backend) checks before starting an index: the recorded
    stop (a rule's, or the brake's), or ``max_duration`` running out now. None: go ahead.
    Free when no rule is set and the brake is off."""
    return _evaluate(storage, study_id, spec, after_trial=False)


def after_trial(storage: RDBStorage | proxy.ProxyStorage, study_id: int,
                spec: SweepSpec) -> StopState | None:
    """Evaluate the rules once a trial finished (any state); record the first that fires."""
    return _evaluate(storage, study_id, spec, after_trial=True)


def _evaluate(storage: RDBStorage | proxy.ProxyStorage, study_id: int, spec: SweepSpec, *,
              after_trial: bool) -> StopState | None:
    """The stop state once the rules are checked: a stop already recorded stands (an ignored
    one turns the rules off); else ``max_duration`` alone before a start, every rule after a
    trial. Through a proxy, the proxy runs this on its database."""
    if not spec.stop.any and (after_trial or brake_limit(spec) <= 0):
        return None  # no rule to evaluate, and before a start no brake to read
    if isinstance(storage, proxy.ProxyStorage):
        return parse_state(storage.stop_check(study_id, spec, after_trial=after_trial))
    state, started = read_stop(storage, study_id)
    if state is not None:
        return state if state.stopped else None
    if not spec.stop.any:  # the brake alone: recorded by brake(), read above
        return None
    if not after_trial:
        why = check_duration(spec, started)
        return record_stop(storage, study_id, "max_duration", why) if why else None
    fired = _fired(storage, study_id, spec, started)
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


def _fired(storage: RDBStorage, study_id: int, spec: SweepSpec,
           started: str | None) -> tuple[str, str, int | None] | None:
    rules = spec.stop
    maximize = spec.objectives[0].direction == "maximize"
    metric = spec.objectives[0].metric

    def query() -> tuple[Any, int, int]:
        with storage.engine.connect() as conn:
            best = None
            if rules.value is not None or rules.patience is not None:
                best = conn.execute(sa.text(_BEST_SQL.format(
                    order="DESC" if maximize else "ASC")), {"s": study_id}).first()
            after = 0
            if rules.patience is not None and best is not None:
                after = conn.execute(sa.text(_FINISHED_AFTER_SQL),
                                     {"s": study_id, "t": best[1]}).scalar_one()
            failed = 0
            if rules.max_failed_trials:
                failed = conn.execute(sa.text(_FAILED_FOR_GOOD_SQL),
                                      {"s": study_id}).scalar_one()
            return best, after, failed

    best, after, failed = with_retry(query, what="evaluate the stop rules")
    if rules.value is not None and best is not None and \
            (best[2] >= rules.value if maximize else best[2] <= rules.value):
        return "value", (f"trial #{best[0]} reached {metric}={best[2]:.6g} (stop.value "
                         f"{rules.value:g})"), best[0]
    if rules.patience is not None and best is not None and after >= rules.patience:
        return "patience", (f"{after} trials finished since the best, trial #{best[0]} "
                            f"({metric}={best[2]:.6g}), without beating it (patience "
                            f"{rules.patience})"), best[0]
    if rules.max_failed_trials and failed >= rules.max_failed_trials:
        return "max_failed_trials", (f"{failed} indexes failed for good (max_failed_trials "
                                     f"{rules.max_failed_trials})"), None
    why = check_duration(spec, started)
    return ("max_duration", why, None) if why else None


# --------------------------------------------------------------------------- the default brake

#: A sweep whose first attempts all failed stops after this many (``stop.max_failed_trials``
#: sets another number, 0 turns the brake off): a deterministic bug should not spend every
#: index's retries.
DEFAULT_BRAKE = 5
BRAKE_RULE = "failing_start"
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


def brake_limit(spec: SweepSpec) -> int:
    n = spec.stop.max_failed_trials
    return DEFAULT_BRAKE if n is None else n


def brake(storage: RDBStorage | proxy.ProxyStorage, study_id: int,
          spec: SweepSpec) -> StopState | None:
    """What the launcher checks after a failed attempt: when the sweep's first attempts have
    all failed of their own doing (``brake_limit`` of them, none completed or pruned; a killed
    or interrupted runner does not count), record the stop with the most common reason. Not
    through a storage proxy (the launcher holds the database)."""
    limit = brake_limit(spec)
    if limit <= 0 or isinstance(storage, proxy.ProxyStorage):
        return None
    current = stop_state(storage, study_id)
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

    done, failed, common = with_retry(query, what="check the failing start")
    if done or failed < limit:
        return None
    why = f"; most often: {common}" if isinstance(common, str) else ""
    return record_stop(storage, study_id, BRAKE_RULE,
                       f"the first {failed} attempts all failed and none completed{why} "
                       "(stop.max_failed_trials sets how many; 0 never stops)")
