"""Storages: Optuna's RDB tables, its trial cache and the private calls of its RDBStorage
(see the package's docstring)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import uuid
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import optuna
import sqlalchemy as sa
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage, RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

T = TypeVar("T")


def share_alembic_script() -> None:
    """RDBStorages share one loaded alembic script directory. Optuna's ``_VersionManager``
    loads one, executing each migration file, whenever it asks for the head revision (3 times
    for a new schema, once per later open: most of an open's time). Applied on import."""
    from optuna.storages._rdb import storage as rdb

    build = rdb._VersionManager._create_alembic_script
    if getattr(build, "sweeper_shared", False):
        return
    loaded: list[Any] = []

    def shared(self: Any) -> Any:
        loaded[:] = loaded or [build(self)]
        return loaded[0]

    shared.sweeper_shared = True  # type: ignore[attr-defined]
    rdb._VersionManager._create_alembic_script = shared  # type: ignore[method-assign]


share_alembic_script()


def backend_of(storage: BaseStorage) -> BaseStorage:
    """The storage under Optuna's trial cache (``optuna.load_study`` wraps an RDBStorage in
    ``_CachedStorage``), or ``storage`` itself where nothing wraps it."""
    backend: BaseStorage = getattr(storage, "_backend", storage)
    return backend


def cached_rdb_backend(study: optuna.Study) -> RDBStorage | None:
    """The RDBStorage behind the study's trial cache; None when the study has no such cache
    (Optuna caches only RDB storages)."""
    backend: RDBStorage | None = getattr(study._storage, "_backend", None)
    return backend


def add_to_cache(study: optuna.Study, trial: FrozenTrial) -> None:
    """Register a trial created outside Optuna's API in the study's trial cache (else filled
    by reading every trial). Unfinished trials are re-read on each access: id, number and
    state are enough."""
    from optuna.storages._cached_storage import _StudyInfo

    cache: Any = study._storage
    if not hasattr(cache, "_add_trials_to_cache"):  # not Optuna's trial cache
        return
    with cache._lock:
        info = cache._studies.setdefault(study._study_id, _StudyInfo())
        cache._add_trials_to_cache(study._study_id, [trial])
        if not trial.state.is_finished():
            info.unfinished_trial_ids.add(trial._trial_id)


def trial_value(value: float | None, value_type: str) -> float:
    """The objective value of a raw ``trial_values`` row: Optuna stores +-inf as NULL with
    ``value_type`` INF_POS / INF_NEG, and finite values with FINITE."""
    from optuna.storages._rdb.models import TrialValueModel

    kind = TrialValueModel.TrialValueType[value_type]
    return float(TrialValueModel.stored_repr_to_value(value, kind))


@dataclass(frozen=True)
class RDBTables:
    """The tables of Optuna's RDB schema that sweeper writes rows into directly."""

    trials: sa.Table
    trial_user_attributes: sa.Table
    trial_system_attributes: sa.Table
    trial_heartbeats: sa.Table
    trial_params: sa.Table
    trial_intermediate_values: sa.Table
    trial_values: sa.Table


@functools.cache
def rdb_tables() -> RDBTables:
    from optuna.storages._rdb import models

    tables = {m.__table__.name: m.__table__ for m in vars(models).values()
              if isinstance(m, type) and hasattr(m, "__table__")}
    return RDBTables(**{f.name: tables[f.name] for f in dataclasses.fields(RDBTables)})


#: The private RDBStorage methods Optuna itself calls on a trial's path (its trial cache,
#: ``_CachedStorage``, routes these through its backend; ``fail_stale_trials`` and the heartbeat
#: ask the last). :class:`RDBStoragePrivateRetries` overrides each with the same signature; the
#: contract tests check both the signatures and that Optuna still calls them.
PRIVATE_TRIAL_PATH = ("_create_new_trial", "_set_trial_param", "_get_trials",
                      "_get_best_trial_id", "_get_stale_trial_ids")


class RDBStoragePrivateRetries(RDBStorage):
    """The retry layer for Optuna's own private storage calls (:data:`PRIVATE_TRIAL_PATH`) and
    the two creations whose retry must recognise its own landed commit (a study, a trial):
    each stores a token with itself. Subclasses say how to retry in ``_retry`` and how a token
    is made, stored and found (``_new_token``, ``_token_row``, ``_found_token``); this class
    calls straight through and stores none."""

    def _retry(self, name: str, fn: Callable[..., T], *args: Any,
               landed: Callable[[], Any] | None = None, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    def _new_token(self) -> str | None:
        """A fresh write token (None: creations carry none, a retry cannot tell)."""
        return None

    def _token_row(self, token: str, *, study_id: int, trial_id: int | None = None) -> Any:
        """The statement that stores ``token`` for a creation, in its transaction."""
        raise NotImplementedError

    def _found_token(self, token: str) -> tuple[int | None, int | None] | None:
        """(study id, trial id) of the creation that stored ``token``, or None: not landed."""
        raise NotImplementedError

    #: What ``landed`` returns for "not landed": run it again (``_retry``'s protocol).
    not_landed: Any = None

    # ---- creations that carry a token

    def create_new_study(self, directions: Sequence[StudyDirection],
                         study_name: str | None = None) -> int:
        """RDBStorage.create_new_study, plus the token; an unnamed study is named once here."""
        from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        name = study_name if study_name is not None else \
            DEFAULT_STUDY_NAME_PREFIX + str(uuid.uuid4())
        token = self._new_token()

        def create() -> int:
            try:
                with _create_scoped_session(self.scoped_session) as session:
                    study = models.StudyModel(study_name=name, directions=[
                        models.StudyDirectionModel(objective=k, direction=d)
                        for k, d in enumerate(directions)])
                    session.add(study)
                    session.flush()
                    study_id = int(study.study_id)
                    if token is not None:
                        session.execute(self._token_row(token, study_id=study_id))
            except sa.exc.IntegrityError:
                raise optuna.exceptions.DuplicatedStudyError(
                    f"Another study with name '{name}' already exists.") from None
            _rdb_logger.info(f"A new study created in RDB with name: {name}")
            return study_id

        def landed() -> Any:
            found = self._found_token(token) if token is not None else None
            return found[0] if found is not None else self.not_landed

        return self._retry("create_new_study", create, landed=landed if token else None)

    def _create_new_trial(self, study_id: int,
                          template_trial: FrozenTrial | None = None) -> FrozenTrial:
        """One attempt of RDBStorage._create_new_trial (whose own loop would retry a lost
        commit into a second trial), plus the token."""
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        token = self._new_token()

        def create() -> FrozenTrial:
            with _create_scoped_session(self.scoped_session) as session:
                # The study row lock numbers trials safely (as RDBStorage does).
                models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
                trial = self._get_prepared_new_trial(study_id, template_trial, session)
                frozen = _new_frozen_trial(trial, template_trial)
                if token is not None:
                    session.execute(self._token_row(token, study_id=study_id,
                                                    trial_id=frozen._trial_id))
            return frozen

        def landed() -> Any:
            found = self._found_token(token) if token is not None else None
            if found is None or found[1] is None:
                return self.not_landed
            return RDBStorage.get_trial(self, found[1])

        return self._retry("_create_new_trial", create, landed=landed if token else None)

    # ---- reads and idempotent writes: retried as they are

    def _set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                         distribution: BaseDistribution,
                         previous_distribution: BaseDistribution | None) -> None:
        # Idempotent: a repeated insert of the same (trial, param) is ignored by RDBStorage.
        return self._retry("_set_trial_param", super()._set_trial_param, trial_id, param_name,
                           param_value_internal, distribution, previous_distribution)

    def _get_trials(self, study_id: int, states: Container[TrialState] | None,
                    included_trial_ids: set[int],
                    trial_id_greater_than: int) -> list[FrozenTrial]:
        return self._retry("_get_trials", super()._get_trials, study_id, states,
                           included_trial_ids, trial_id_greater_than)

    def _get_best_trial_id(self, study_id: int, direction: StudyDirection) -> int:
        return self._retry("_get_best_trial_id", super()._get_best_trial_id, study_id,
                           direction)

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        return self._retry("_get_stale_trial_ids", super()._get_stale_trial_ids, study_id)


_rdb_logger = optuna.logging.get_logger("optuna.storages._rdb.storage")


def _new_frozen_trial(trial: Any, template_trial: FrozenTrial | None) -> FrozenTrial:
    """What RDBStorage._create_new_trial returns for a just-created trial model."""
    if template_trial is not None:
        frozen = copy.deepcopy(template_trial)
        frozen.number = trial.number
        frozen.datetime_start = trial.datetime_start
        frozen._trial_id = trial.trial_id
        return frozen
    return FrozenTrial(number=trial.number, state=trial.state, value=None, values=None,
                       datetime_start=trial.datetime_start, datetime_complete=None, params={},
                       distributions={}, user_attrs={}, system_attrs={},
                       intermediate_values={}, trial_id=trial.trial_id)

