"""The sweep record in the database: the study, its user attrs (the normalised spec, its hash,
identity, first launch) and its plan enqueued, in one locked transaction."""

from __future__ import annotations

import json
import uuid
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper.errors import SpecError
from sweeper.protocol import (
    ENQUEUED_ATTR,
    HASH_ATTR,
    METRIC_NAMES_ATTR,
    SPEC_ATTR,
    SPEC_DIR_ATTR,
    STARTED_ATTR,
    STOP_ATTR,
    UID_ATTR,
)
from sweeper.spec import SweepSpec
from sweeper.study.growth import grown_from as _grown_from
from sweeper.study.retry import with_retry
from sweeper.study.sql._bulk import TrialRow, exclusive, insert_trials
from sweeper.study.sql.storage import RetryingRDBStorage
from sweeper.study.values import Created


def create_or_resume(storage: RetryingRDBStorage, spec: SweepSpec) -> Created:
    """Create the study and enqueue its plan, or resume it if this exact spec already ran.

    The same spec with more ``trials`` grows the sweep (its new indexes are enqueued;
    ``grown_from`` says from how many). Any other difference under
    the same name raises SpecError before anything is written. Safe against concurrent
    launches: one WAITING trial per index.
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

    def record_and_enqueue() -> int | None:
        with exclusive(storage.engine, study_id) as conn:
            return _record_and_enqueue(conn, study_id, spec, record, created)

    grown_from = with_retry(record_and_enqueue, what="enqueue")
    # Objective names for optuna-dashboard and Optuna's plots ("loss", not "Objective 0").
    storage.set_study_system_attr(study_id, METRIC_NAMES_ATTR,
                                  [o.metric for o in spec.objectives])
    return Created(study_id, created, grown_from)


def _record_and_enqueue(conn: sa.Connection, study_id: int, spec: SweepSpec,
                        record: dict[str, Any], created: bool) -> int | None:
    """Write the record and enqueue what is not enqueued yet; the old number of indexes when
    this grew the sweep, else None."""
    from sweeper.space import distributions, planned_sets

    attrs = _study_user_attrs(conn, study_id)
    grown_from = None
    if HASH_ATTR in attrs:
        if attrs[HASH_ATTR] != spec.spec_hash:
            grown_from = _grown_from(spec, attrs[HASH_ATTR], attrs.get(SPEC_ATTR))
    elif not created:
        n = conn.execute(sa.text("SELECT COUNT(*) FROM trials WHERE study_id = :s"),
                         {"s": study_id}).scalar_one()
        if n:
            raise SpecError(f"study {spec.name!r} already exists in this storage and was "
                            "not created by sweeper; pick another name", source=spec.source,
                            field="name")
    _lift_budget_stop(conn, study_id, attrs, record)
    _set_study_attr(conn, study_id, SPEC_ATTR, record)
    _set_study_attr(conn, study_id, HASH_ATTR, spec.spec_hash)
    if created and UID_ATTR not in attrs:  # a new sweep: state of its own, under no old name
        _set_study_attr(conn, study_id, UID_ATTR, uuid.uuid4().hex)
    if spec.base_dir is not None and attrs.get(SPEC_DIR_ATTR) != spec.base_dir:
        _set_study_attr(conn, study_id, SPEC_DIR_ATTR, spec.base_dir)
    if STARTED_ATTR not in attrs:  # the first launch: stop.max_duration counts from here
        from sweeper.study.stop import now_iso

        _set_study_attr(conn, study_id, STARTED_ATTR, now_iso())
    if not attrs.get(ENQUEUED_ATTR) or grown_from is not None:
        # Grown: only the new indexes. Set i of a planned sweep never depends on ``trials``
        # (see planned_sets), so the old ones stay.
        start = grown_from or 0
        dists = distributions(spec)
        insert_trials(conn, study_id, [
            TrialRow(index=i, params=params, state=TrialState.WAITING, distributions=dists)
            for i, params in planned_sets(spec, start=start)])
        _set_study_attr(conn, study_id, ENQUEUED_ATTR, True)
    return grown_from


def _lift_budget_stop(conn: sa.Connection, study_id: int, attrs: dict[str, Any],
                      record: dict[str, Any]) -> None:
    """A sweep launched with another budget than its record's is no longer stopped on the old
    one: its budget stop goes (the gate records it again if the new budget is spent too)."""
    from sweeper.accounting import BUDGET_RULE

    stop = attrs.get(STOP_ATTR)
    old = attrs.get(SPEC_ATTR)
    if isinstance(stop, dict) and stop.get("rule") == BUDGET_RULE and isinstance(old, dict) \
            and old.get("budget") != record.get("budget"):
        conn.execute(sa.text("DELETE FROM study_user_attributes WHERE study_id = :s AND "
                             "key = :k"), {"s": study_id, "k": STOP_ATTR})


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
