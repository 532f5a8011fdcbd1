"""Every use sweeper makes of Optuna's private API, in one place, for the one Optuna it knows.

Optuna's public API has no way to finish a trial without re-reading it, to register a trial
created outside the API in a study's trial cache, to write several attributes in one
transaction, to name its RDB tables, or to open a storage without reloading its migrations;
sweeper needs them on its hot paths. Its gRPC proxy is served alone on a port with fixed
channel options; sweeper's serves its own service beside Optuna's and reconnects quickly.
Each private name used here has a contract test in ``tests/study/test_optuna_compat.py``.
Importing this module on an Optuna series it was not written for fails at once with one line:
check the contract tests against the new series, then add it to :data:`SUPPORTED_SERIES`.

No other module of ``sweeper`` or ``trial_runner`` touches an ``_underscored`` Optuna name.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import uuid
import warnings
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import optuna
import sqlalchemy as sa
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.study import StudyDirection
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import SweeperError
from sweeper.study import writes
from sweeper.study.retry import NOT_DONE

if TYPE_CHECKING:
    from optuna.artifacts._protocol import ArtifactStore

__all__ = [
    "PRIVATE_TRIAL_PATH", "SUPPORTED_SERIES", "ArtifactStore", "FrozenStudy",
    "GrpcStorageProxyOnChannel", "RDBStoragePrivateRetries", "RDBTables",
    "UnsupportedOptunaError", "add_optuna_storage_servicer", "add_to_cache", "cached_rdb_backend",
    "cached_storage", "check_version", "distribution_contains", "experimental_on_purpose",
    "fixed_params_of", "is_finishing_request", "own_copy", "rdb_backend", "rdb_tables",
    "reset_trials_cache", "share_alembic_script", "storage_of", "study_id_of", "tell",
    "tell_trial", "trial_from_frozen", "trial_id_of", "trial_value", "update_cached_trial",
]

T = TypeVar("T")

#: ``major.minor`` series of Optuna whose private API this module was written and tested for.
SUPPORTED_SERIES = ("5.0",)


class UnsupportedOptunaError(SweeperError, ImportError):
    """The installed Optuna is a series this module does not know (see the module docstring)."""

    exit_code = 2


def check_version(version: str) -> None:
    """Raise :class:`UnsupportedOptunaError` unless ``version`` is of a supported series."""
    series = ".".join(version.split(".")[:2])
    if series not in SUPPORTED_SERIES:
        raise UnsupportedOptunaError(
            f"sweeper works with optuna {' or '.join(s + '.x' for s in SUPPORTED_SERIES)}, "
            f"found optuna {version}: pip install 'optuna~={SUPPORTED_SERIES[-1]}.0'")


check_version(optuna.__version__)


def __getattr__(name: str) -> Any:
    # ArtifactStore, imported on first use: `import optuna` does not load optuna.artifacts.
    if name == "ArtifactStore":
        from optuna.artifacts._protocol import ArtifactStore

        return ArtifactStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- studies and trials


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes through (Optuna's cache over an RDBStorage)."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    return study._study_id


def trial_id_of(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (``number`` counts within a study, this across studies)."""
    return trial._trial_id


def trial_from_frozen(study: optuna.Study, frozen: FrozenTrial) -> optuna.Trial:
    """``optuna.Trial(study, trial_id)`` given the trial its constructor would read (six
    queries): the same attributes, the sampler's ``before_trial`` hook called the same way."""
    from optuna import pruners

    trial = optuna.Trial.__new__(optuna.Trial)
    trial.study = study
    trial._trial_id = frozen._trial_id
    trial.storage = study._storage
    trial._cached_frozen_trial = frozen
    study.sampler.before_trial(pruners._filter_study(study, frozen), frozen)
    trial.relative_search_space = None
    trial._relative_params = None
    trial._fixed_params = frozen.system_attrs.get("fixed_params", {})
    return trial


def reset_trials_cache(study: optuna.Study) -> None:
    """Forget the per-thread list of all trials that samplers read, as ``Study.ask`` does, so
    the next sampler call reads the trials again."""
    study._thread_local.cached_all_trials = None


def tell(study: optuna.Study, number: int, values: Sequence[float] | None,
         state: TrialState) -> None:
    """Finish trial ``number`` as ``study.optimize`` does, without ``Study.tell``'s re-read and
    deep copy. UpdateFinishedTrialError or ValueError when it is finished already."""
    from optuna.study._tell import _tell_with_warning

    _tell_with_warning(study, number, values, state=state, skip_if_finished=False)


def tell_trial(study: optuna.Study, trial: optuna.Trial, values: Sequence[float] | None,
               state: TrialState) -> None:
    """:func:`tell` for a trial this process is running, COMPLETE or PRUNED: what
    ``_tell_with_warning`` does, with the trial's own up-to-date copy instead of re-reading it
    (six queries). UpdateFinishedTrialError when it was finished behind our back (the storage
    checks the state in the statement that writes it)."""
    from optuna import pruners
    from optuna.study._tell import _check_state_and_values, _check_values_are_feasible

    study._thread_local.cached_all_trials = None
    frozen = copy.copy(trial._cached_frozen_trial)
    _check_state_and_values(state, values)
    if state == TrialState.COMPLETE:
        assert values is not None
        problem = _check_values_are_feasible(study, values)
        if problem is not None:
            raise ValueError(problem)
    elif state == TrialState.PRUNED and frozen.last_step is not None:
        last = frozen.intermediate_values[frozen.last_step]
        if _check_values_are_feasible(study, [last]) is None:
            values = [last]
    else:
        raise ValueError(f"tell_trial does not finish a trial as {state.name}")
    floats = [float(v) for v in values] if values is not None else None
    try:
        study.sampler.after_trial(pruners._filter_study(study, frozen), frozen, state, floats)
    finally:
        study._storage.set_trial_state_values(frozen._trial_id, state, floats)


def update_cached_trial(trial: optuna.Trial, *, user_attrs: Mapping[str, Any] | None = None,
                        params: Mapping[str, tuple[Any, BaseDistribution]] | None = None,
                        reports: Sequence[tuple[int, float]] = ()) -> None:
    """Make the trial's own copy show what was written behind Optuna's back (as ``suggest_*``,
    ``report`` and ``set_user_attr`` keep it): its params and steps are not written again."""
    frozen = trial._cached_frozen_trial
    frozen.user_attrs.update(user_attrs or {})
    for name, (value, distribution) in (params or {}).items():
        frozen.distributions[name] = distribution
        frozen.params[name] = value
    for step, value in reports:
        frozen.intermediate_values.setdefault(step, value)


def own_copy(trial: optuna.Trial) -> FrozenTrial:
    """The trial's own copy (its params, reports and user attrs, without a query); not to edit."""
    return trial._cached_frozen_trial


def fixed_params_of(trial: optuna.Trial) -> dict[str, Any]:
    """The params the trial was enqueued with (``enqueue_trial``), which ``suggest_*`` returns."""
    return dict(trial._fixed_params)


def distribution_contains(distribution: BaseDistribution, value: Any) -> bool:
    """Whether ``value`` is one of the distribution's points (TypeError etc. if no such kind)."""
    return distribution._contains(distribution.to_internal_repr(value))


# --------------------------------------------------------------------------- storages


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


def rdb_backend(storage: BaseStorage) -> RDBStorage | None:
    """The RDBStorage under ``storage`` (itself, or the one Optuna's cache wraps), else None."""
    from optuna.storages._cached_storage import _CachedStorage

    if isinstance(storage, _CachedStorage):
        storage = storage._backend
    return storage if isinstance(storage, RDBStorage) else None


def cached_rdb_backend(study: optuna.Study) -> RDBStorage | None:
    """The RDBStorage behind the study's trial cache; None when the study has no such cache."""
    from optuna.storages._cached_storage import _CachedStorage

    cache = study._storage
    return cache._backend if isinstance(cache, _CachedStorage) else None


def add_to_cache(study: optuna.Study, trial: FrozenTrial) -> None:
    """Register a trial created outside Optuna's API in the study's trial cache (else filled
    by reading every trial). Unfinished trials are re-read on each access: id, number and
    state are enough."""
    from optuna.storages._cached_storage import _CachedStorage, _StudyInfo

    cache = study._storage
    if not isinstance(cache, _CachedStorage):
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
    each stores a token with itself (:mod:`sweeper.study.writes`). Subclasses say how to
    retry in ``_retry``; this class calls straight through."""

    def _retry(self, name: str, fn: Callable[..., T], *args: Any,
               landed: Callable[[], Any] | None = None, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    # ---- creations that carry a token

    def create_new_study(self, directions: Sequence[StudyDirection],
                         study_name: str | None = None) -> int:
        """RDBStorage.create_new_study, plus the token; an unnamed study is named once here."""
        from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        name = study_name if study_name is not None else \
            DEFAULT_STUDY_NAME_PREFIX + str(uuid.uuid4())
        writes.ensure_table(self.engine)
        token = writes.new_token()

        def create() -> int:
            try:
                with _create_scoped_session(self.scoped_session) as session:
                    study = models.StudyModel(study_name=name, directions=[
                        models.StudyDirectionModel(objective=k, direction=d)
                        for k, d in enumerate(directions)])
                    session.add(study)
                    session.flush()
                    study_id = int(study.study_id)
                    session.execute(writes.record(token, study_id=study_id))
            except sa.exc.IntegrityError:
                raise optuna.exceptions.DuplicatedStudyError(
                    f"Another study with name '{name}' already exists.") from None
            _rdb_logger.info(f"A new study created in RDB with name: {name}")
            return study_id

        def landed() -> Any:
            with self.engine.connect() as conn:
                found = writes.find(conn, token)
            return found[0] if found is not None else NOT_DONE

        return self._retry("create_new_study", create, landed=landed)

    def _create_new_trial(self, study_id: int,
                          template_trial: FrozenTrial | None = None) -> FrozenTrial:
        """One attempt of RDBStorage._create_new_trial (whose own loop would retry a lost
        commit into a second trial), plus the token."""
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        writes.ensure_table(self.engine)
        token = writes.new_token()

        def create() -> FrozenTrial:
            with _create_scoped_session(self.scoped_session) as session:
                # The study row lock numbers trials safely (as RDBStorage does).
                models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
                trial = self._get_prepared_new_trial(study_id, template_trial, session)
                frozen = _new_frozen_trial(trial, template_trial)
                session.execute(writes.record(token, study_id=study_id,
                                              trial_id=frozen._trial_id))
            return frozen

        def landed() -> Any:
            with self.engine.connect() as conn:
                found = writes.find(conn, token)
            if found is None or found[1] is None:
                return NOT_DONE
            return RDBStorage.get_trial(self, found[1])

        return self._retry("_create_new_trial", create, landed=landed)

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


# --------------------------------------------------------------------------- experimental


@contextlib.contextmanager
def experimental_on_purpose() -> Iterator[None]:
    """Build what sweeper uses on purpose although this series marks it experimental
    (NSGAIIISampler for nsga3, TPESampler's group=True over a conditional space, CmaEsSampler's
    and GPSampler's experimental options, GrpcStorageProxy) without its ExperimentalWarning:
    nothing a user of sweeper can act on, it would land on the terminal of ``sweeper run``
    (which builds the runners' sampler before forking them) and in every index's log."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


# --------------------------------------------------------------------------- gRPC storage proxy


def cached_storage(storage: RDBStorage) -> BaseStorage:
    """``storage`` behind Optuna's trial cache (:class:`_ProxyTrialCache`), as Optuna's proxy
    docs advise (``get_storage`` does the same; it is documented "for internal usage")."""
    return _ProxyTrialCache(storage)


class _ProxyTrialCache(_CachedStorage):
    """Optuna's trial cache as the proxy serves it. ``_CachedStorage.set_trial_param`` knows
    only trials it read or created; the index protocol creates and claims them with its own SQL
    (maybe via another replica): an unknown one is looked up and registered, as
    :func:`add_to_cache` does."""

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        with self._lock:
            known = trial_id in self._trial_id_to_study_id_and_number
        if not known:
            self._register(trial_id)
        super().set_trial_param(trial_id, param_name, param_value_internal, distribution)

    def _register(self, trial_id: int) -> None:
        from optuna.storages._cached_storage import _StudyInfo

        trials = rdb_tables().trials
        with self._backend.engine.connect() as conn:
            row = conn.execute(sa.select(trials.c.study_id, trials.c.number, trials.c.state)
                               .where(trials.c.trial_id == trial_id)).one_or_none()
        if row is None:
            raise KeyError(f"No trial with trial id {trial_id} exists.")
        study_id, number, state = row
        self._backend.check_trial_is_updatable(trial_id, state)  # finished: nothing to set
        frozen = FrozenTrial(number=number, state=state, value=None, datetime_start=None,
                             datetime_complete=None, params={}, distributions={},
                             user_attrs={}, system_attrs={}, intermediate_values={},
                             trial_id=trial_id)
        with self._lock:
            if trial_id in self._trial_id_to_study_id_and_number:
                return
            info = self._studies.setdefault(study_id, _StudyInfo())
            self._add_trials_to_cache(study_id, [frozen])
            info.unfinished_trial_ids.add(trial_id)


def add_optuna_storage_servicer(server: Any, storage: BaseStorage) -> None:
    """Add Optuna's StorageService (what ``run_grpc_proxy_server`` serves) to a grpc.Server we
    built ourselves, so that sweeper's own service shares its port."""
    from optuna.storages._grpc.auto_generated import api_pb2_grpc
    from optuna.storages._grpc.servicer import OptunaStorageProxyService

    api_pb2_grpc.add_StorageServiceServicer_to_server(OptunaStorageProxyService(storage),
                                                      server)


#: The full name of a StorageService method: ``/optuna.StorageService/<Method>``.
OPTUNA_SERVICE_PREFIX = "/optuna.StorageService/"


def is_finishing_request(method: str, request: Any) -> bool:
    """Whether a request to Optuna's StorageService finishes a trial (a tell: COMPLETE, PRUNED
    or FAIL), read from the decoded SetTrialStateValues message."""
    if method != OPTUNA_SERVICE_PREFIX + "SetTrialStateValues":
        return False
    from optuna.storages._grpc.auto_generated import api_pb2

    return request.state in (api_pb2.COMPLETE, api_pb2.PRUNED, api_pb2.FAIL)


class GrpcStorageProxyOnChannel(optuna.storages.GrpcStorageProxy):
    """Optuna's gRPC client on a channel with our options: a restarted proxy is found within
    seconds (gRPC's default backoff grows to two minutes); sweeper's service shares it."""

    def __init__(self, *, host: str, port: int, options: Sequence[tuple[str, Any]]) -> None:
        self._channel_options = list(options)
        with experimental_on_purpose():  # "GrpcStorageProxy is experimental": we know
            super().__init__(host=host, port=port)

    def _setup(self) -> None:
        import grpc
        from optuna.storages._grpc.auto_generated import api_pb2_grpc
        from optuna.storages._grpc.client import GrpcClientCache

        self._channel = grpc.insecure_channel(f"{self._host}:{self._port}",
                                              options=self._channel_options)
        self._stub = api_pb2_grpc.StorageServiceStub(self._channel)
        self._cache = GrpcClientCache(self._stub)

    @property
    def channel(self) -> Any:
        """The grpc.Channel both services are called on."""
        return self._channel
