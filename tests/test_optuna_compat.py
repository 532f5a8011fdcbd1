"""Contract tests: one per private Optuna name that sweeper._optuna_compat uses. Each fails
on the Optuna release that removes or changes what sweeper relies on; then fix the compat
module (and only it) and add the new series to SUPPORTED_SERIES."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.storages import InMemoryStorage, RDBStorage
from optuna.storages._cached_storage import _CachedStorage, _StudyInfo
from optuna.trial import FrozenTrial, TrialState

from sweeper import _optuna_compat as compat
from sweeper.errors import SweeperError
from sweeper.study import open_storage
from sweeper.study.sql._bulk import TrialRow, exclusive, insert_trials
from sweeper.study.sql.storage import RetryingRDBStorage

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def storage(sqlite_url: str) -> RetryingRDBStorage:
    return open_storage(sqlite_url)


@pytest.fixture
def study(storage: RetryingRDBStorage) -> optuna.Study:
    return optuna.create_study(study_name="compat", storage=storage)


# --------------------------------------------------------------------------- the version gate


def test_version_gate_accepts_the_5_0_series_only() -> None:
    for ok in ("5.0.0", "5.0.3", "5.0.1.dev0"):
        compat.check_version(ok)
    for bad in ("4.5.0", "5.1.0", "6.0.0"):
        with pytest.raises(compat.UnsupportedOptunaError) as e:
            compat.check_version(bad)
        assert bad in str(e.value) and "5.0.x" in str(e.value) and "\n" not in str(e.value)
    assert issubclass(compat.UnsupportedOptunaError, SweeperError)
    assert issubclass(compat.UnsupportedOptunaError, ImportError)


def test_installed_optuna_is_the_pinned_series() -> None:
    compat.check_version(optuna.__version__)
    pin = [line.strip() for line in (REPO / "setup.cfg").read_text().splitlines()
           if line.strip().startswith("optuna==")]
    assert pin and pin[0].split("==")[1].rsplit(".", 1)[0] in compat.SUPPORTED_SERIES


def test_no_other_module_imports_optuna_private_modules_or_touches_wrapped_names() -> None:
    """The import side of "only _optuna_compat touches Optuna's private API", plus the
    private attributes it wraps (so they are not used again elsewhere by accident)."""
    wrapped = {"_storage", "_study_id", "_trial_id", "_thread_local", "_cached_frozen_trial",
               "_backend", "_studies", "_add_trials_to_cache", "_tell_with_warning",
               "_get_stale_trial_ids", "_create_new_trial", "_set_trial_param", "_get_trials",
               "_get_best_trial_id", "_get_prepared_new_trial", "_create_scoped_session",
               "_channel", "_stub", "_cache", "_setup", "_trial_id_to_study_id_and_number",
               "_fixed_params"}
    offenders = []
    for path in [*(REPO / "sweeper").rglob("*.py"), *(REPO / "trial_runner").rglob("*.py")]:
        if "_optuna_compat" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("optuna"):
                names = [*node.module.split("."), *(a.name for a in node.names)]  # type: ignore[union-attr]
            elif isinstance(node, ast.Import):
                names = [p for a in node.names if a.name.startswith("optuna")
                         for p in a.name.split(".")]
            elif isinstance(node, ast.Attribute) and node.attr in wrapped:
                names = [node.attr]
            if any(n.startswith("_") and n != "__future__" for n in names):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


# --------------------------------------------------------------------------- opening a storage


def test_storages_share_one_alembic_script_directory_with_optunas_head(tmp_path: Path) -> None:
    """share_alembic_script replaces _VersionManager._create_alembic_script (a method taking
    only self): every storage gets the same loaded directory, whose head is the one a freshly
    loaded directory names, and a new schema is stamped with it."""
    import sqlalchemy as sa
    from alembic.script import ScriptDirectory
    from optuna.storages._rdb import storage as rdb

    compat.share_alembic_script()  # idempotent
    shared = rdb._VersionManager._create_alembic_script
    assert list(inspect.signature(shared).parameters) == ["self"]
    first = open_storage(f"sqlite:///{tmp_path / 'a.db'}")
    second = open_storage(f"sqlite:///{tmp_path / 'b.db'}")
    managers = [s._version_manager for s in (first, second)]
    script = managers[0]._create_alembic_script()
    assert managers[1]._create_alembic_script() is script
    fresh = ScriptDirectory.from_config(managers[0]._create_alembic_config())
    assert fresh is not script and script.get_current_head() == fresh.get_current_head()
    with second.engine.connect() as conn:
        stamped = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
    assert stamped == fresh.get_current_head()


# --------------------------------------------------------------------------- studies and trials


def test_study_storage_and_id(storage: RetryingRDBStorage, study: optuna.Study) -> None:
    """Study._storage: Optuna's trial cache around the RDBStorage it was given;
    Study._study_id: the storage's id of the study."""
    assert isinstance(study._storage, _CachedStorage)
    assert compat.storage_of(study) is study._storage
    assert study._storage._backend is storage
    assert compat.study_id_of(study) == storage.get_study_id_from_name("compat")


def test_trial_id_of_trial_and_frozen_trial(storage: RetryingRDBStorage,
                                            study: optuna.Study) -> None:
    """Trial._trial_id and FrozenTrial._trial_id: the storage's trial id."""
    trial = study.ask()
    tid = compat.trial_id_of(trial)
    assert storage.get_trial(tid).number == trial.number
    frozen = storage.get_all_trials(compat.study_id_of(study))[0]
    assert isinstance(frozen, FrozenTrial) and compat.trial_id_of(frozen) == tid


def test_reset_trials_cache_makes_the_next_sampler_call_reread(storage: RetryingRDBStorage,
                                                               study: optuna.Study) -> None:
    """Study._thread_local.cached_all_trials is what Study._get_trials(use_cache=True) (the
    samplers' view) serves; None makes it read the storage again."""
    assert "cached_all_trials" in inspect.getsource(optuna.Study._get_trials)
    assert study._get_trials(deepcopy=False, use_cache=True) == []
    storage.create_new_trial(compat.study_id_of(study))
    assert study._get_trials(deepcopy=False, use_cache=True) == []  # served from the cache
    compat.reset_trials_cache(study)
    assert study._thread_local.cached_all_trials is None
    assert len(study._get_trials(deepcopy=False, use_cache=True)) == 1


def test_tell_with_warning_takes_what_we_pass(storage: RetryingRDBStorage,
                                              study: optuna.Study) -> None:
    """optuna.study._tell._tell_with_warning(study, trial, value_or_values, state=...,
    skip_if_finished=...): finishes the trial; a second tell raises."""
    from optuna.study._tell import _tell_with_warning

    params = inspect.signature(_tell_with_warning).parameters
    assert list(params)[:3] == ["study", "trial", "value_or_values"]
    assert {"state", "skip_if_finished"} <= set(params)
    first, second = study.ask(), study.ask()
    compat.tell(study, first.number, [1.5], TrialState.COMPLETE)
    compat.tell(study, second.number, None, TrialState.PRUNED)
    assert storage.get_trial(compat.trial_id_of(first)).values == [1.5]
    assert storage.get_trial(compat.trial_id_of(second)).state == TrialState.PRUNED
    with pytest.raises((optuna.exceptions.UpdateFinishedTrialError, ValueError)):
        compat.tell(study, first.number, [2.0], TrialState.COMPLETE)


def test_update_cached_trial_is_what_the_trial_shows_and_suggest_reuses(
        study: optuna.Study) -> None:
    """Trial._cached_frozen_trial backs Trial.user_attrs, params and distributions; a param in
    it is returned by suggest_* without a storage write, a step in it is not reported again."""
    trial = study.ask()
    dist = FloatDistribution(0, 1)
    compat.update_cached_trial(trial, user_attrs={"a": 1, "b": [2]}, params={"x": (0.5, dist)},
                               reports=[(3, 0.25)])
    assert trial.user_attrs == {"a": 1, "b": [2]}
    assert trial.params == {"x": 0.5} and trial.distributions == {"x": dist}
    assert trial.suggest_float("x", 0, 1) == 0.5
    with pytest.warns(UserWarning, match="already reported"):
        trial.report(9.0, 3)
    stored = study._storage.get_trial(compat.trial_id_of(trial))
    assert stored.params == {} and stored.intermediate_values == {}  # nothing was written


def test_fixed_params_of_is_what_enqueue_trial_set(study: optuna.Study) -> None:
    """Trial._fixed_params: the enqueued params that suggest_* returns."""
    study.enqueue_trial({"x": 0.75})
    trial = study.ask()
    assert compat.fixed_params_of(trial) == {"x": 0.75}
    assert trial.suggest_float("x", 0, 1) == 0.75


def test_distribution_contains() -> None:
    """BaseDistribution._contains(internal repr)."""
    assert compat.distribution_contains(FloatDistribution(0, 1, step=0.25), 0.5)
    assert not compat.distribution_contains(FloatDistribution(0, 1, step=0.25), 0.3)
    assert compat.distribution_contains(IntDistribution(1, 8), 8)
    assert not compat.distribution_contains(IntDistribution(1, 8), 9)
    assert compat.distribution_contains(CategoricalDistribution(["x", "y"]), "y")
    with pytest.raises(ValueError):
        compat.distribution_contains(CategoricalDistribution(["x", "y"]), "z")


# --------------------------------------------------------------------------- storages


def test_backend_of_unwraps_the_trial_cache(storage: RetryingRDBStorage,
                                             study: optuna.Study) -> None:
    """_CachedStorage._backend: the RDBStorage it wraps."""
    assert compat.backend_of(storage) is storage
    assert compat.backend_of(compat.storage_of(study)) is storage
    assert compat.cached_rdb_backend(study) is storage
    memory = InMemoryStorage()
    assert compat.backend_of(memory) is memory
    assert compat.cached_rdb_backend(optuna.create_study()) is None


def test_cached_storage_internals_that_add_to_cache_uses() -> None:
    """_CachedStorage._lock, ._studies (study id -> _StudyInfo), ._add_trials_to_cache(study_id,
    trials); _StudyInfo.unfinished_trial_ids."""
    assert list(inspect.signature(_CachedStorage._add_trials_to_cache).parameters) == \
        ["self", "study_id", "trials"]
    src = inspect.getsource(_CachedStorage.__init__)
    assert "self._lock" in src and "self._studies" in src and "self._backend" in src
    info = _StudyInfo()
    assert info.unfinished_trial_ids == set() and info.trials == {}


def test_add_to_cache_registers_a_trial_created_behind_optuna(storage: RetryingRDBStorage,
                                                               study: optuna.Study) -> None:
    """A trial inserted with SQL and registered (id, number, state only) is served like one
    Optuna created: in the study's trials, and re-read from the database while unfinished."""
    sid = compat.study_id_of(study)
    assert study.trials == []  # the cache has read the (empty) study
    with exclusive(storage.engine, sid) as conn:
        [tid] = insert_trials(conn, sid, [TrialRow(index=0, params=None,
                                                   state=TrialState.RUNNING)])
    compat.add_to_cache(study, FrozenTrial(
        number=0, state=TrialState.RUNNING, value=None, datetime_start=None,
        datetime_complete=None, params={}, distributions={}, user_attrs={}, system_attrs={},
        intermediate_values={}, trial_id=tid))
    cache = compat.storage_of(study)
    assert isinstance(cache, _CachedStorage)
    assert tid in cache._studies[sid].unfinished_trial_ids
    storage.set_trial_state_values(tid, TrialState.COMPLETE, [3.0])  # behind the cache
    [trial] = study.trials
    assert trial.state == TrialState.COMPLETE and trial.value == 3.0


def test_rdb_tables_have_the_columns_sweeper_writes_and_queries() -> None:
    """optuna.storages._rdb.models: the tables sweeper inserts into (compat.rdb_tables) and the
    ones its raw SQL reads, with the columns and unique keys it relies on."""
    tables = compat.rdb_tables()
    meta = tables.trials.metadata.tables
    expected = {
        "trials": {"trial_id", "number", "study_id", "state", "datetime_start"},
        "trial_user_attributes": {"trial_id", "key", "value_json"},
        "trial_system_attributes": {"trial_id", "key", "value_json"},
        "trial_heartbeats": {"trial_id", "heartbeat"},
        "trial_values": {"trial_id", "objective", "value", "value_type"},
        "studies": {"study_id"},
        "study_user_attributes": {"study_id", "key", "value_json"},
    }
    for name, columns in expected.items():
        assert columns <= set(meta[name].c.keys()), name
    assert tables.trial_user_attributes is meta["trial_user_attributes"]
    assert tables.trial_system_attributes is meta["trial_system_attributes"]
    assert tables.trial_heartbeats is meta["trial_heartbeats"]
    # ON CONFLICT (trial_id, key) needs that unique key; a heartbeat row gets its time itself.
    uniques = {tuple(sorted(c.name for c in u.columns))
               for u in tables.trial_user_attributes.constraints
               if type(u).__name__ == "UniqueConstraint"}
    assert ("key", "trial_id") in uniques
    assert tables.trial_heartbeats.c.heartbeat.default is not None
    # Raw SQL compares trials.state with TrialState names ('RUNNING', 'WAITING').
    assert set(tables.trials.c.state.type.enums) == {s.name for s in TrialState}  # type: ignore[attr-defined]


def test_trial_value_decodes_what_optuna_stores(storage: RetryingRDBStorage,
                                                study: optuna.Study) -> None:
    """TrialValueModel.TrialValueType names and stored_repr_to_value: +-inf stored as NULL."""
    import sqlalchemy as sa

    for v in (1.5, float("inf"), float("-inf")):
        trial = study.ask()
        study.tell(trial, v)
    with storage.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT value, value_type FROM trial_values "
                                    "ORDER BY trial_id")).all()
    assert [compat.trial_value(v, k) for v, k in rows] == [1.5, float("inf"), float("-inf")]


def test_frozen_study_is_what_get_all_studies_returns(storage: RetryingRDBStorage,
                                                      study: optuna.Study) -> None:
    [frozen] = storage.get_all_studies()
    assert isinstance(frozen, compat.FrozenStudy) and frozen.study_name == "compat"


def test_artifact_store_protocol_has_what_sweeper_calls() -> None:
    """optuna.artifacts._protocol.ArtifactStore: open_reader, write, remove."""
    from optuna.artifacts import Boto3ArtifactStore, FileSystemArtifactStore
    from optuna.artifacts._protocol import ArtifactStore

    assert compat.ArtifactStore is ArtifactStore
    for method in ("open_reader", "write", "remove"):
        assert callable(getattr(ArtifactStore, method))
        for impl in (FileSystemArtifactStore, Boto3ArtifactStore):
            assert callable(getattr(impl, method))
    with pytest.raises(AttributeError):
        compat.NoSuchThing  # noqa: B018


def test_get_stale_trial_ids_is_overridden_with_the_same_signature_and_used_by_optuna(
        storage: RetryingRDBStorage, study: optuna.Study) -> None:
    """RDBStorage._get_stale_trial_ids(study_id): what optuna.storages.fail_stale_trials asks."""
    from optuna.storages import _heartbeat

    assert inspect.signature(RDBStorage._get_stale_trial_ids) == \
        inspect.signature(compat.RDBStoragePrivateRetries._get_stale_trial_ids)
    assert "_get_stale_trial_ids" in inspect.getsource(_heartbeat.fail_stale_trials)
    calls = []
    real = storage._retry

    def spy(name, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(name)
        return real(name, fn, *args, **kwargs)

    storage._retry = spy  # type: ignore[method-assign]
    storage.heartbeat_interval = 60  # Optuna only asks when its heartbeat is on
    assert storage._get_stale_trial_ids(compat.study_id_of(study)) == []
    assert calls == ["_get_stale_trial_ids"]



# --------------------------------------------------------------------------- the retry layer


@pytest.mark.parametrize("name", compat.PRIVATE_TRIAL_PATH)
def test_private_trial_path_methods_exist_as_wrapped_and_optuna_calls_them(name: str) -> None:
    """Each private RDBStorage method the retry layer overrides: same signature as Optuna's,
    and still called by Optuna on a trial's path (its trial cache, or fail_stale_trials)."""
    from optuna.storages import _cached_storage, _heartbeat

    def shape(fn: object) -> list[tuple[str, object, object]]:
        return [(p.name, p.kind, p.default)
                for p in inspect.signature(fn).parameters.values()]  # type: ignore[arg-type]

    assert shape(getattr(compat.RDBStoragePrivateRetries, name)) == \
        shape(getattr(RDBStorage, name))
    callers = inspect.getsource(_cached_storage) + inspect.getsource(_heartbeat)
    assert f"._backend.{name}(" in callers or f"storage.{name}(" in callers


def test_create_new_trial_is_one_attempt_of_optunas(storage: RetryingRDBStorage,
                                                    study: optuna.Study) -> None:
    """RDBStorage._create_new_trial's loop body: lock the study row, _get_prepared_new_trial
    (study_id, template_trial, session); the FrozenTrial it returns is what ours returns."""
    src = inspect.getsource(RDBStorage._create_new_trial)
    assert "find_or_raise_by_id(study_id, session, for_update=True)" in src
    assert "self._get_prepared_new_trial(study_id, template_trial, session)" in src
    assert list(inspect.signature(RDBStorage._get_prepared_new_trial).parameters) == \
        ["self", "study_id", "template_trial", "session"]
    sid = compat.study_id_of(study)
    template = FrozenTrial(number=0, state=TrialState.WAITING, value=None, datetime_start=None,
                           datetime_complete=None, params={"x": 0.5},
                           distributions={"x": FloatDistribution(0, 1)}, user_attrs={"u": 1},
                           system_attrs={"s": 2}, intermediate_values={}, trial_id=0)
    for tmpl in (None, template):
        theirs = RDBStorage._create_new_trial(storage, sid, tmpl)
        mine = storage._create_new_trial(sid, tmpl)
        assert mine.number == theirs.number + 1
        for attr in ("state", "params", "distributions", "user_attrs", "system_attrs",
                     "values", "intermediate_values"):
            assert getattr(mine, attr) == getattr(theirs, attr), attr


def test_create_new_study_uses_optunas_models_and_session() -> None:
    """_create_scoped_session(scoped_session, ignore_integrity_error=False); StudyModel
    (study_name, directions) and StudyDirectionModel (objective, direction); unnamed studies
    are named DEFAULT_STUDY_NAME_PREFIX + uuid4, as RDBStorage names them."""
    from optuna.storages._base import DEFAULT_STUDY_NAME_PREFIX
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    assert list(inspect.signature(_create_scoped_session).parameters) == \
        ["scoped_session", "ignore_integrity_error"]
    assert {"study_name", "directions"} <= set(vars(models.StudyModel))
    assert {"objective", "direction"} <= set(vars(models.StudyDirectionModel))
    assert "DEFAULT_STUDY_NAME_PREFIX + study_uuid" in \
        inspect.getsource(RDBStorage._create_unique_study_name)
    assert DEFAULT_STUDY_NAME_PREFIX == "no-name-"


def test_create_new_study_behaves_as_optunas(storage: RetryingRDBStorage) -> None:
    from optuna.study import StudyDirection

    sid = storage.create_new_study([StudyDirection.MAXIMIZE, StudyDirection.MINIMIZE], "two")
    assert storage.get_study_id_from_name("two") == sid
    assert storage.get_study_directions(sid) == [StudyDirection.MAXIMIZE,
                                                 StudyDirection.MINIMIZE]
    with pytest.raises(optuna.exceptions.DuplicatedStudyError):
        storage.create_new_study([StudyDirection.MINIMIZE], "two")
    unnamed = storage.create_new_study([StudyDirection.MINIMIZE])
    assert storage.get_study_name_from_id(unnamed).startswith("no-name-")


# --------------------------------------------------------------------------- gRPC storage proxy


def test_optuna_proxy_server_is_what_add_optuna_storage_servicer_serves() -> None:
    """optuna.storages._grpc.server.make_server = grpc.server + add_StorageServiceServicer_to_
    server(OptunaStorageProxyService(storage)): what sweeper's server adds beside its own."""
    from optuna.storages._grpc import server as grpc_server
    from optuna.storages._grpc.auto_generated import api_pb2_grpc
    from optuna.storages._grpc.servicer import OptunaStorageProxyService

    src = inspect.getsource(grpc_server.make_server)
    assert "add_StorageServiceServicer_to_server" in src and "OptunaStorageProxyService" in src
    assert list(inspect.signature(OptunaStorageProxyService).parameters) == ["storage"]
    assert callable(api_pb2_grpc.add_StorageServiceServicer_to_server)
    assert "cached" in optuna.storages.run_grpc_proxy_server.__doc__.lower() or \
        "get_storage" in optuna.storages.run_grpc_proxy_server.__doc__


def test_is_finishing_request_reads_set_trial_state_values() -> None:
    """api_pb2.SetTrialStateValuesRequest.state and the TrialState enum values."""
    from optuna.storages._grpc.auto_generated import api_pb2

    method = compat.OPTUNA_SERVICE_PREFIX + "SetTrialStateValues"
    for state, finishing in ((api_pb2.COMPLETE, True), (api_pb2.PRUNED, True),
                             (api_pb2.FAIL, True), (api_pb2.RUNNING, False),
                             (api_pb2.WAITING, False)):
        request = api_pb2.SetTrialStateValuesRequest(trial_id=1, state=state)
        assert compat.is_finishing_request(method, request) is finishing
    assert not compat.is_finishing_request(compat.OPTUNA_SERVICE_PREFIX + "GetTrial", object())


def test_grpc_client_setup_is_what_grpc_storage_proxy_on_channel_replaces() -> None:
    """GrpcStorageProxy._setup() sets _channel, _stub and _cache from _host and _port (and
    __setstate__ calls it); the subclass builds the same three on its own channel."""
    from optuna.storages import GrpcStorageProxy
    from optuna.storages._grpc.client import GrpcClientCache

    src = inspect.getsource(GrpcStorageProxy._setup)
    for name in ("self._channel", "self._stub", "self._cache", "self._host", "self._port"):
        assert name in src
    assert "_setup" in inspect.getsource(GrpcStorageProxy.__init__)
    assert "_setup" in inspect.getsource(GrpcStorageProxy.__setstate__)
    proxy = compat.GrpcStorageProxyOnChannel(host="127.0.0.1", port=1, options=[])
    try:
        assert isinstance(proxy._cache, GrpcClientCache)
        assert proxy.channel is proxy._channel
    finally:
        proxy.close()


def test_proxy_trial_cache_registers_trials_it_did_not_create(
        storage: RetryingRDBStorage) -> None:
    """_CachedStorage.set_trial_param looks the trial up in _trial_id_to_study_id_and_number
    (KeyError for a trial it has not seen); the proxy's cache registers it first."""
    src = inspect.getsource(_CachedStorage.set_trial_param)
    assert "_trial_id_to_study_id_and_number" in src
    assert list(inspect.signature(_CachedStorage.set_trial_param).parameters) == \
        ["self", "trial_id", "param_name", "param_value_internal", "distribution"]
    sid = storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "cache")
    with exclusive(storage.engine, sid) as conn:
        [tid] = insert_trials(conn, sid, [TrialRow(index=0, params=None,
                                                   state=TrialState.RUNNING)])
    with pytest.raises(KeyError):
        _CachedStorage(storage).set_trial_param(tid, "x", 0.5, FloatDistribution(0, 1))
    cache = compat.cached_storage(storage)
    assert isinstance(cache, _CachedStorage)
    cache.set_trial_param(tid, "x", 0.5, FloatDistribution(0, 1))
    assert storage.get_trial(tid).params == {"x": 0.5}
    assert [t.params for t in cache.get_all_trials(sid)] == [{"x": 0.5}]  # re-read: unfinished
    storage.set_trial_state_values(tid, TrialState.COMPLETE, [1.0])
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        compat.cached_storage(storage).set_trial_param(tid, "y", 0.5, FloatDistribution(0, 1))


def test_trial_from_frozen_is_what_the_trial_constructor_builds(
        storage: RetryingRDBStorage, study: optuna.Study) -> None:
    """optuna.Trial.__init__ sets study, _trial_id, storage, _cached_frozen_trial (from
    storage.get_trial), relative_search_space, _relative_params, _fixed_params and calls
    sampler.before_trial: trial_from_frozen does the same given the frozen trial."""
    src = inspect.getsource(optuna.Trial.__init__)
    assigned = set(re.findall(r"self\.(\w+)\s*(?::[^=\n]*)?= ", src))
    assert assigned == {"study", "_trial_id", "storage", "_cached_frozen_trial",
                        "relative_search_space", "_relative_params", "_fixed_params"}
    assert "before_trial" in src and "_filter_study" in src
    study.enqueue_trial({"x": 0.25})
    tid = storage.get_all_trials(compat.study_id_of(study))[0]._trial_id
    storage.set_trial_state_values(tid, TrialState.RUNNING)
    seen: list[int] = []
    study.sampler.before_trial = lambda s, t: seen.append(t.number)  # type: ignore[method-assign]
    real = optuna.Trial(study, tid)
    mine = compat.trial_from_frozen(study, storage.get_trial(tid))
    assert seen == [0, 0]
    assert set(vars(mine)) == set(vars(real))
    assert mine._fixed_params == real._fixed_params == {"x": 0.25}
    assert mine.suggest_float("x", 0, 1) == 0.25


def test_tell_trial_does_what_tell_with_warning_does(storage: RetryingRDBStorage,
                                                     study: optuna.Study) -> None:
    """_tell_with_warning: reset cached_all_trials, read the trial, _check_state_and_values,
    _check_values_are_feasible (COMPLETE), the last intermediate value as a PRUNED trial's
    value, sampler.after_trial on the filtered study, then set_trial_state_values; tell_trial
    does the same from the Trial's own copy, with the same stored result."""
    from optuna.study import _tell

    src = inspect.getsource(_tell._tell_with_warning)
    for step in ("cached_all_trials = None", "_get_frozen_trial", "_check_state_and_values",
                 "_check_values_are_feasible", "last_step", "_filter_study", "after_trial",
                 "set_trial_state_values"):
        assert step in src, step
    results = []
    for finish in (lambda t, v, s: compat.tell(study, t.number, v, s),
                   lambda t, v, s: compat.tell_trial(study, t, v, s)):
        done, pruned, bad = study.ask(), study.ask(), study.ask()
        done.report(0.5, 0)
        pruned.report(2.0, 0)
        pruned.report(1.5, 3)
        finish(done, [1.25], TrialState.COMPLETE)
        finish(pruned, None, TrialState.PRUNED)
        with pytest.raises(ValueError):
            finish(bad, [float("nan")], TrialState.COMPLETE)
        got = [storage.get_trial(compat.trial_id_of(t)) for t in (done, pruned, bad)]
        results.append([(t.state, t.values, t.intermediate_values) for t in got])
        with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
            compat.tell_trial(study, done, [2.0], TrialState.COMPLETE)  # finished: refused
    assert results[0] == results[1]
    assert results[1][1][:2] == (TrialState.PRUNED, [1.5])


def test_experimental_on_purpose_silences_what_this_series_marks_experimental() -> None:
    """What sweeper builds although Optuna 5.0 marks it experimental warns without the context
    (when a series stops marking one, drop it from the docstring) and not within it; other
    warnings still pass."""
    import warnings

    from optuna.exceptions import ExperimentalWarning

    builders = [lambda: optuna.samplers.NSGAIIISampler(seed=0),
                lambda: optuna.samplers.TPESampler(seed=0, group=True, multivariate=True),
                lambda: optuna.samplers.CmaEsSampler(seed=0, with_margin=True),
                lambda: optuna.samplers.GPSampler(seed=0, deterministic_objective=True)]
    for build in builders:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            build()
        assert any(issubclass(w.category, ExperimentalWarning) for w in seen)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with compat.experimental_on_purpose():
                build()
                warnings.warn("still heard", UserWarning, stacklevel=1)
        assert [str(w.message) for w in seen] == ["still heard"]
