"""Optuna's gRPC storage proxy: its servicer on a server of ours, its client on a channel of
ours, and its trial cache as the proxy serves it (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.trial import FrozenTrial

from sweeper._optuna_compat._base import experimental_on_purpose
from sweeper._optuna_compat._storages import rdb_tables


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

    def __init__(self, *, host: str, port: int, options: Sequence[tuple[str, Any]],
                 open_channel: Callable[[str, int, Sequence[tuple[str, Any]]], Any]
                 | None = None) -> None:
        self._channel_options = list(options)
        self._open_channel = open_channel
        with experimental_on_purpose():  # "GrpcStorageProxy is experimental": we know
            super().__init__(host=host, port=port)

    def _setup(self) -> None:
        """Optuna's client on a channel of ours: ``open_channel(host, port, options)`` (TLS,
        per-call credentials), else a plaintext one with ``options``."""
        import grpc
        from optuna.storages._grpc.auto_generated import api_pb2_grpc
        from optuna.storages._grpc.client import GrpcClientCache

        if self._open_channel is not None:
            self._channel = self._open_channel(self._host, self._port, self._channel_options)
        else:
            self._channel = grpc.insecure_channel(f"{self._host}:{self._port}",
                                                  options=self._channel_options)
        self._stub = api_pb2_grpc.StorageServiceStub(self._channel)
        self._cache = GrpcClientCache(self._stub)

    @property
    def channel(self) -> Any:
        """The grpc.Channel both services are called on."""
        return self._channel
