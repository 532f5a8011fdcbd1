"""The runner's and the CLI's end of ``grpc://host:port``: Optuna's gRPC storage client plus
sweeper's own service (:mod:`.wire`) on the same channel, both retried while the proxy is
unavailable (a restart, a rolling update), so a sweep survives the proxy the way it survives a
database restart.

:class:`ProxyStorage` is one of the two implementations of the index store
(:class:`sweeper.study.store.IndexStore`): each operation is sent as it is and the proxy runs
the database's implementation of it (:mod:`sweeper.proxy.server`). Callers never ask which
one they hold.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import optuna

from sweeper._optuna_compat import GrpcStorageProxyOnChannel
from sweeper.errors import (
    SpecError,
    StorageError,
    StorageUnavailableError,
    StudyNotFoundError,
    SweeperError,
)
from sweeper.protocol import ENV_PARENT_PID
from sweeper.study.remote import wire
from sweeper.study.retry import retried
from sweeper.study.store import IndexStore
from sweeper.study.values import NextTake, Taken

logger = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: URL scheme of the storage proxy.
SCHEME = "grpc://"
DEFAULT_PORT = 13000

#: Channel options: reconnect within ~2 s of a restarted proxy (gRPC's default backoff grows
#: to 120 s), keepalive pings so a dead proxy behind a Service is noticed, no message limit
#: (a study's trials can be large, as Optuna's own client allows).
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.keepalive_timeout_ms", 10000),
)


#: ``sweeper run`` (local backend) puts its workers behind an in-process proxy from this many
#: workers on, for PostgreSQL (measured: benchmarks/proxy.py, "threshold"; benchmarks/history.md).
#: Below it the direct path's forked workers were faster at every W measured, and W + 1
#: connections fit PostgreSQL's default 100; from here on the connections decide.
PROXY_AUTO_PARALLELISM = 64


def is_proxy_url(url: str) -> bool:
    return url.startswith(SCHEME)


def proxy_pays(url: str, workers: int) -> bool:
    """Whether ``workers`` local workers on ``url`` are better off behind a proxy: PostgreSQL
    (each direct worker holds its own connections; the server allows ~100) from
    :data:`PROXY_AUTO_PARALLELISM` workers on. SQLite has no connections to save."""
    return url.startswith(("postgresql", "postgres://")) and workers >= PROXY_AUTO_PARALLELISM


def parse_proxy_url(url: str) -> tuple[str, int]:
    """``grpc://host[:port]`` -> (host, port). A path, a user or a password is an error."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise StorageError(f"bad storage proxy URL {url!r}: use grpc://host:port") from None
    if not parts.hostname or parts.path not in ("", "/") or parts.username or parts.query:
        raise StorageError(f"bad storage proxy URL {url!r}: use grpc://host:port")
    return parts.hostname, port


#: Optuna's gRPC client, whose calls ProxyStorage retries while the proxy is unavailable.
_Optunas = optuna.storages.GrpcStorageProxy


def _open_channel(host: str, port: int, options: Sequence[tuple[str, Any]]) -> Any:
    from sweeper.study.remote.credentials import open_channel

    return open_channel(host, port, options)


def _remote(method: F) -> F:
    """The client side of an operation of the index store: ``method``'s signature, its
    arguments sent to the proxy (:mod:`.wire`), the reply decoded."""
    op = wire.OPERATIONS[method.__name__]

    @functools.wraps(method)
    def call(self: ProxyStorage, *args: Any, **kwargs: Any) -> Any:
        return self._operate(op, args, kwargs)

    return cast(F, call)


class ProxyStorage(GrpcStorageProxyOnChannel):
    """Optuna's ``GrpcStorageProxy`` whose calls are retried while the proxy is UNAVAILABLE
    (with the capped backoff of direct database calls), plus the index protocol's steps and
    the runner's heartbeat as calls to sweeper's service on the same channel."""

    #: Give up after this long without a proxy (the same as a database outage).
    retry_deadline_s = 300.0
    #: A call that has not returned by then failed (a proxy that hangs, not one that is down).
    call_timeout_s = 120.0

    def __init__(self, url: str) -> None:
        host, port = parse_proxy_url(url)
        self.proxy_url = f"{SCHEME}{host}:{port}"
        self._methods: dict[str, Callable[..., bytes]] = {}
        self._info: wire.Info | None = None
        # The channel carries this process's credential and verifies the proxy's
        # certificate (:mod:`.credentials`).
        super().__init__(host=host, port=port, options=CHANNEL_OPTIONS,
                         open_channel=_open_channel)

    # ---------------------------------------------------------------- plumbing

    def _retry(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        import grpc

        from sweeper.study.remote.credentials import is_throttled, refusal

        start = time.monotonic()
        delay = 0.2
        while True:
            try:
                return fn(*args, **kwargs)
            except grpc.RpcError as e:
                refused = refusal(e, self.proxy_url, what)
                if refused is not None:
                    raise refused from None
                code = e.code() if isinstance(e, grpc.Call) else None
                if code != grpc.StatusCode.UNAVAILABLE and not is_throttled(e):
                    raise
                if time.monotonic() - start > self.retry_deadline_s:
                    raise StorageUnavailableError(
                        f"storage proxy {self.proxy_url} unavailable for "
                        f"{self.retry_deadline_s:.0f}s during {what}") from None
                if _orphaned():
                    raise StorageError(f"storage proxy {self.proxy_url} unavailable during "
                                       f"{what}, and the sweeper run that started this worker "
                                       "(and served it) is gone") from None
                logger.warning("storage proxy unavailable during %s; retrying in %.1fs", what,
                               delay)
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)

    def _call(self, name: str, path: str, request: bytes) -> bytes:
        """One call of sweeper's service; errors become what the direct path raises."""
        method = self._methods.get(path)
        if method is None:
            method = self._methods[path] = self.channel.unary_unary(
                path, request_serializer=None, response_deserializer=None)
        try:
            raw: bytes = self._retry(name, method, request, timeout=self.call_timeout_s)
        except StorageError:
            raise
        except Exception as e:  # noqa: BLE001 - a grpc.RpcError; grpc is imported lazily
            raise self._translate(name, e) from None
        return raw

    def _translate(self, name: str, e: Exception) -> Exception:
        import grpc

        details = e.details() if isinstance(e, grpc.Call) else str(e)
        err = wire.RemoteError.parse(details)
        if err is None:
            code = e.code().name if isinstance(e, grpc.Call) else type(e).__name__
            return StorageError(f"storage proxy {self.proxy_url}: {name} failed ({code}: "
                                f"{details})")
        if err.kind == "KeyError":
            return KeyError(err.message)
        if err.kind == "UpdateFinishedTrialError":
            return optuna.exceptions.UpdateFinishedTrialError(err.message)
        if err.kind == "SpecError":
            return SpecError(err.message, field=err.field)
        kinds: dict[str, type[SweeperError]] = {"StudyNotFoundError": StudyNotFoundError,
                                                "StorageError": StorageError}
        return kinds.get(err.kind, SweeperError)(err.message)

    @property
    def url(self) -> str:
        """The storage the proxy serves, password hidden: what a runner derives default
        artifact locations from (a direct runner uses its storage URL the same way)."""
        if self._info is None:
            self._info = wire.Info.decode(self._call("Info", wire.INFO, b"{}"))
        return self._info.storage

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the proxy answers (raises StorageUnavailableError after ``timeout_s``,
        StorageError at once when its TLS handshake fails: a CA that is missing or wrong is no
        outage). A warning says once that it waits."""
        import grpc

        from sweeper.study.remote.credentials import diagnose

        deadline = time.monotonic() + timeout_s
        warned = False
        while True:
            try:  # on our channel (Optuna's wait_server_ready opens a plaintext one)
                grpc.channel_ready_future(self.channel).result(
                    timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                return
            except grpc.FutureTimeoutError:
                failed = diagnose(self.channel, self._host, self._port, self.proxy_url)
                if failed is not None:
                    raise failed from None
                if time.monotonic() >= deadline:
                    raise StorageUnavailableError(
                        f"cannot reach the storage proxy {self.proxy_url} (waited "
                        f"{timeout_s:g}s): is `sweeper proxy` running there?") from None
                if not warned:
                    logger.warning("storage proxy %s not answering; waiting up to %gs",
                                   self.proxy_url, timeout_s)
                    warned = True

    # ---------------------------------------------------------------- the index store
    # Each operation of sweeper.study.store.IndexStore, sent as it is (sweeper.study.remote.wire);
    # the proxy runs the SqlStore method of the same name.

    attempts = _remote(IndexStore.attempts)
    take = _remote(IndexStore.take)
    claim = _remote(IndexStore.claim)
    new_attempt = _remote(IndexStore.new_attempt)
    mark_failed = _remote(IndexStore.mark_failed)
    fail_stale_trials = _remote(IndexStore.fail_stale_trials)
    record_heartbeat = _remote(IndexStore.record_heartbeat)
    rung_trials = _remote(IndexStore.rung_trials)
    pause = _remote(IndexStore.pause)
    requeue_stale = _remote(IndexStore.requeue_stale)
    finish_paused = _remote(IndexStore.finish_paused)
    create_or_resume = _remote(IndexStore.create_or_resume)
    stop_state = _remote(IndexStore.stop_state)
    stop_check = _remote(IndexStore.stop_check)
    ignore_stop = _remote(IndexStore.ignore_stop)
    brake = _remote(IndexStore.brake)
    record_stop = _remote(IndexStore.record_stop)
    ledger = _remote(IndexStore.ledger)
    ledger_sums = _remote(IndexStore.ledger_sums)
    set_trial_user_attrs = _remote(IndexStore.set_trial_user_attrs)
    write_trial = _remote(IndexStore.write_trial)
    state_counts = _remote(IndexStore.state_counts)
    best_so_far = _remote(IndexStore.best_so_far)
    index_table = _remote(IndexStore.index_table)
    study_stats = _remote(IndexStore.study_stats)
    list_sweeps = _remote(IndexStore.list_sweeps)
    study_names = _remote(IndexStore.study_names)
    artifact_ids = _remote(IndexStore.artifact_ids)
    code_part = _remote(IndexStore.code_part)

    def _operate(self, op: wire.Operation, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
        """One call of an operation; a write's token is made here, so a call this client
        retries (its reply lost with a proxy restart) is recognised as the same write."""
        if "token" in op.signature.parameters and kwargs.get("token") is None and \
                len(args) < list(op.signature.parameters).index("token") + 1:
            kwargs = {**kwargs, "token": uuid.uuid4().hex}
        request = op.encode_call(args, kwargs)
        return op.decode_reply(self._call(op.wire_name, op.path, request))

    def rides(self) -> bool:
        return False  # a finish through the proxy is Optuna's call: nothing rides with it

    def riding_with_finish(self, trial_id: int, user_attrs: Mapping[str, Any],
                           reports: Sequence[tuple[int, float]],
                           then: NextTake | None = None) -> AbstractContextManager[bool]:
        return contextlib.nullcontext(False)

    def taken_ahead(self, token: str) -> Taken | None:
        return None  # nothing rides: the runner takes its next index on its own

    # ---------------------------------------------------------------- Optuna's storage API,
    # retried while the proxy is unavailable (same signatures as GrpcStorageProxy's)

    create_new_study = retried(_Optunas.create_new_study)
    delete_study = retried(_Optunas.delete_study)
    set_study_user_attr = retried(_Optunas.set_study_user_attr)
    set_study_system_attr = retried(_Optunas.set_study_system_attr)
    get_study_id_from_name = retried(_Optunas.get_study_id_from_name)
    get_study_name_from_id = retried(_Optunas.get_study_name_from_id)
    get_study_directions = retried(_Optunas.get_study_directions)
    get_study_user_attrs = retried(_Optunas.get_study_user_attrs)
    get_study_system_attrs = retried(_Optunas.get_study_system_attrs)
    get_all_studies = retried(_Optunas.get_all_studies)
    create_new_trial = retried(_Optunas.create_new_trial)
    set_trial_param = retried(_Optunas.set_trial_param)
    get_trial_id_from_study_id_trial_number = retried(
        _Optunas.get_trial_id_from_study_id_trial_number)
    set_trial_state_values = retried(_Optunas.set_trial_state_values)
    set_trial_intermediate_value = retried(_Optunas.set_trial_intermediate_value)
    set_trial_user_attr = retried(_Optunas.set_trial_user_attr)
    set_trial_system_attr = retried(_Optunas.set_trial_system_attr)
    get_trial = retried(_Optunas.get_trial)
    get_all_trials = retried(_Optunas.get_all_trials)


def _orphaned() -> bool:
    """A local worker whose ``sweeper run`` died: its in-process proxy died with it, so there
    is nothing to wait for (the trial's heartbeat goes stale and the next run retries it)."""
    parent = os.environ.get(ENV_PARENT_PID)
    return parent is not None and parent.isdigit() and os.getppid() != int(parent)


def open_proxy_storage(url: str, *, connect_deadline_s: float = 0.0) -> ProxyStorage:
    """Connect to ``sweeper proxy`` at ``grpc://host:port``. ``connect_deadline_s`` > 0 waits
    that long for it to come up (runners); 0 waits a few seconds and fails with one line."""
    storage = ProxyStorage(url)
    storage.wait_ready(connect_deadline_s if connect_deadline_s > 0 else 5.0)
    return storage
