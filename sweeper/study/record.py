"""The sweep record: a study whose user attrs hold the normalised spec and its hash. Running
the same spec again resumes the study; a different spec under the same name is refused."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper.errors import SpecError, StudyNotFoundError
from sweeper.protocol import ENQUEUED_ATTR, HASH_ATTR, METRIC_NAMES_ATTR, SPEC_ATTR
from sweeper.proxy import client as proxy
from sweeper.spec import SweepSpec, parse_spec_dict
from sweeper.study._bulk import TrialRow, exclusive, insert_trials
from sweeper.study._optuna_compat import reset_trials_cache
from sweeper.study.retry import with_retry


@dataclass(frozen=True)
class Sweep:
    """A sweep as stored: the study plus its normalised spec."""

    storage: proxy.StudyStorage
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
            reset_trials_cache(study)  # re-read once per trial, as ask() does
        return study


def create_or_resume(storage: proxy.StudyStorage, spec: SweepSpec) -> tuple[Sweep, bool]:
    """Create the study and enqueue its plan, or resume it if this exact spec already ran.

    Returns (sweep, created). A different spec under the same name raises SpecError before
    anything is written. Safe against concurrent launches: one WAITING trial per index.
    """
    if isinstance(storage, proxy.ProxyStorage):  # the proxy runs this function on its database
        study_id, created = storage.create_or_resume(spec)
        return Sweep(storage, study_id, spec), created
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
        with exclusive(storage.engine, study_id) as conn:
            _record_and_enqueue(conn, study_id, spec, record, created)

    with_retry(record_and_enqueue, what="enqueue")
    # Objective names for optuna-dashboard and Optuna's plots ("loss", not "Objective 0").
    storage.set_study_system_attr(study_id, METRIC_NAMES_ATTR,
                                  [o.metric for o in spec.objectives])
    return Sweep(storage, study_id, spec), created


def load_sweep(storage: proxy.StudyStorage, name: str) -> Sweep:
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        raise StudyNotFoundError(f"no sweep named {name!r} in this storage") from None
    attrs = storage.get_study_user_attrs(study_id)
    if SPEC_ATTR not in attrs:
        raise StudyNotFoundError(f"study {name!r} exists but was not created by sweeper")
    spec = parse_spec_dict(attrs[SPEC_ATTR], source=f"<study {name}>")
    return Sweep(storage, study_id, spec)


def _record_and_enqueue(conn: sa.Connection, study_id: int, spec: SweepSpec,
                        record: dict[str, Any], created: bool) -> None:
    from sweeper.space import planned_sets

    attrs = _study_user_attrs(conn, study_id)
    if HASH_ATTR in attrs:
        if attrs[HASH_ATTR] != spec.spec_hash:
            raise changed_spec_error(spec, attrs.get(SPEC_ATTR))
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
        insert_trials(conn, study_id, [
            TrialRow(index=i, params=params, state=TrialState.WAITING)
            for i, params in planned_sets(spec)])
        _set_study_attr(conn, study_id, ENQUEUED_ATTR, True)


def changed_spec_error(spec: SweepSpec, stored: Any) -> SpecError:
    """The error for a sweep name already used by a different spec, naming what differs."""
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
