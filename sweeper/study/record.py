"""The sweep record: a study whose user attrs hold the normalised spec and its hash. Running
the same spec again resumes the study; raising ``trials`` grows it (the new indexes follow the
old ones, enqueued in the same locked transaction as the record); any other change under the
same name is refused."""

from __future__ import annotations

import functools
import json
import threading
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper._optuna_compat import reset_trials_cache
from sweeper.errors import SpecError, StudyNotFoundError
from sweeper.protocol import (
    ENQUEUED_ATTR,
    HASH_ATTR,
    METRIC_NAMES_ATTR,
    SPEC_ATTR,
    SPEC_DIR_ATTR,
    STARTED_ATTR,
    UID_ATTR,
    state_key,
)
from sweeper.proxy import client as proxy
from sweeper.spec import SweepSpec, load_stored
from sweeper.study._bulk import TrialRow, exclusive, insert_trials
from sweeper.study.retry import with_retry


@dataclass(frozen=True)
class Sweep:
    """A sweep as stored: the study plus its normalised spec."""

    storage: proxy.StudyStorage
    study_id: int
    spec: SweepSpec
    #: The number of indexes this launch grew the sweep from (None: it did not grow it).
    grown_from: int | None = field(default=None, compare=False)
    #: One Study per thread for runner_study(), keyed by thread id.
    _runner_studies: dict[int, optuna.Study] = field(default_factory=dict, compare=False,
                                                     repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @functools.cached_property
    def uid(self) -> str | None:
        """The sweep's identity (protocol.UID_ATTR); None for a study from before it."""
        uid = self.storage.get_study_user_attrs(self.study_id).get(UID_ATTR)
        return uid if isinstance(uid, str) else None

    @property
    def state_key(self) -> str:
        """Where this sweep's checkpoints and local logs live, under their roots."""
        return state_key(self.name, self.uid)

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


@dataclass(frozen=True)
class InheritedSweep:
    """An open sweep handed to a worker forked from the process that opened it: the local
    backend builds it and passes it, as an argument, to the runner's entry function the forked
    child calls (``trial_runner.main.main(argv, inherited=...)``). The worker takes over this
    Sweep (the parent's storage object, the runner's study already loaded) instead of opening
    the storage and reading the sweep again, where it is the one it was told to open."""

    storage_url: str
    sweep: Sweep

    def sweep_for(self, storage_url: str, name: str) -> Sweep | None:
        """The sweep, if it is ``name`` on ``storage_url``; else None (open them as usual)."""
        if storage_url != self.storage_url or self.sweep.name != name:
            return None
        return self.sweep


def create_or_resume(storage: proxy.StudyStorage, spec: SweepSpec) -> tuple[Sweep, bool]:
    """Create the study and enqueue its plan, or resume it if this exact spec already ran.

    Returns (sweep, created). The same spec with more ``trials`` grows the sweep (its new
    indexes are enqueued; ``sweep.grown_from`` says from how many). Any other difference under
    the same name raises SpecError before anything is written. Safe against concurrent
    launches: one WAITING trial per index.
    """
    if isinstance(storage, proxy.ProxyStorage):  # the proxy runs this function on its database
        study_id, created, grown_from = storage.create_or_resume(spec)
        return Sweep(storage, study_id, spec, grown_from=grown_from), created
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
    return Sweep(storage, study_id, spec, grown_from=grown_from), created


def load_sweep(storage: proxy.StudyStorage, name: str) -> Sweep:
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        raise StudyNotFoundError(f"no sweep named {name!r} in this storage") from None
    attrs = storage.get_study_user_attrs(study_id)
    if SPEC_ATTR not in attrs:
        raise StudyNotFoundError(f"study {name!r} exists but was not created by sweeper")
    spec = load_stored(attrs[SPEC_ATTR], source=f"<study {name}>")
    base_dir = attrs.get(SPEC_DIR_ATTR)
    if isinstance(base_dir, str):
        spec = replace(spec, base_dir=base_dir)
    return Sweep(storage, study_id, spec)


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


def _grown_from(spec: SweepSpec, stored_hash: Any, stored: Any) -> int:
    """The stored number of indexes if ``spec`` is the stored sweep with more of them; raises
    the changed-spec error otherwise (fewer indexes included: a sweep grows, never shrinks)."""
    old = stored.get("trials") if isinstance(stored, dict) else None
    if not isinstance(old, int) or isinstance(old, bool) or \
            replace(spec, trials=old).spec_hash != stored_hash:
        raise changed_spec_error(spec, stored)
    if spec.trials < old:
        raise SpecError(f"sweep {spec.name!r} has {old} indexes; trials: {spec.trials} would "
                        f"shrink it (a sweep can grow, not shrink){_FIXES.format(spec.name)}",
                        source=spec.source, field="trials")
    return old


#: How to start over under the same name, or keep the old sweep and start another.
_FIXES = ("; to start over, delete the old sweep (`sweeper delete {0}`, with this run's "
          "--storage if any) or change `name:` in the spec")


def changed_spec_error(spec: SweepSpec, stored: Any) -> SpecError:
    """The error for a sweep name already used by a different spec, naming what differs and
    the commands that fix it."""
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
        if spec.method == "grid" and "parameters" in changed and "trials" in changed:
            changed.remove("trials")  # a grid's size follows from its parameters
    what = f" ({', '.join(changed)} differ)" if changed else ""
    return SpecError(f"a different sweep named {spec.name!r} already exists in this storage"
                     f"{what}{_FIXES.format(spec.name)}", source=spec.source,
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
