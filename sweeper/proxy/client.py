"""The runner's and the CLI's end of ``grpc://host:port``: Optuna's gRPC storage client plus
sweeper's own service (:mod:`.service`) on the same channel, both retried while the proxy is
unavailable (a restart, a rolling update), so a sweep survives the proxy the way it survives a
database restart.

The study functions (``sweeper.study.index``, ``record``, ``summaries``, ``trials``,
``stats``) check ``isinstance(storage, ProxyStorage)`` first and call the method of the same
name here; the proxy runs the very same function on its database (:mod:`.server`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Container, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sweeper._optuna_compat import FrozenStudy, GrpcStorageProxyOnChannel
from sweeper.errors import SpecError, StorageError, StudyNotFoundError, SweeperError
from sweeper.protocol import ENV_PARENT_PID
from sweeper.proxy import service as wire
from sweeper.study.storage import RetryingRDBStorage

if TYPE_CHECKING:
    from sweeper.spec import SweepSpec
    from sweeper.study.index import Attempt
    from sweeper.study.stats import StudyStats
    from sweeper.study.summaries import IndexStatus

logger = logging.getLogger(__name__)

T = TypeVar("T")
W = TypeVar("W", bound=wire.Wire)

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
        super().__init__(host=host, port=port, options=CHANNEL_OPTIONS)

    def _setup(self) -> None:
        """Optuna's client, then its stub and cache moved to a channel that carries this
        process's credential and verifies the proxy's certificate (:mod:`.credentials`)."""
        from sweeper.proxy.credentials import open_channel

        super()._setup()
        self._channel.close()  # never used: channels connect on their first call
        self._channel = open_channel(self._host, self._port, CHANNEL_OPTIONS)
        self._stub = type(self._stub)(self._channel)
        self._cache = type(self._cache)(self._stub)

    # ---------------------------------------------------------------- plumbing

    def _retry(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        import grpc

        from sweeper.proxy.credentials import is_throttled, refusal

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
                    raise StorageError(f"storage proxy {self.proxy_url} unavailable for "
                                       f"{self.retry_deadline_s:.0f}s during {what}") from None
                if _orphaned():
                    raise StorageError(f"storage proxy {self.proxy_url} unavailable during "
                                       f"{what}, and the sweeper run that started this worker "
                                       "(and served it) is gone") from None
                logger.warning("storage proxy unavailable during %s; retrying in %.1fs", what,
                               delay)
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)

    def _call(self, name: str, request: wire.Wire, reply: type[W]) -> W:
        """One call of sweeper's service; errors become what the direct path raises."""
        method = self._methods.get(name)
        if method is None:
            m = wire.METHODS[name]
            method = self._methods[name] = self.channel.unary_unary(
                m.path, request_serializer=wire.Wire.encode, response_deserializer=bytes)
        try:
            raw = self._retry(name, method, request, timeout=self.call_timeout_s)
        except StorageError:
            raise
        except Exception as e:  # noqa: BLE001 - a grpc.RpcError; grpc is imported lazily
            raise self._translate(name, e) from None
        return reply.decode(raw)

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
            self._info = self._call("Info", wire.Empty(), wire.Info)
        return self._info.storage

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the proxy answers (raises StorageError after ``timeout_s``, or at once
        when its TLS handshake fails: a CA that is missing or wrong is no outage)."""
        import grpc

        from sweeper.proxy.credentials import diagnose

        deadline = time.monotonic() + timeout_s
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
                    raise StorageError(f"cannot reach the storage proxy {self.proxy_url} "
                                       f"(waited {timeout_s:g}s): is `sweeper proxy` running "
                                       "there?") from None

    # ---------------------------------------------------------------- the index protocol

    def attempts(self, study_id: int, index: int) -> list[Attempt]:
        from sweeper.study.index import Attempt

        reply = self._call("Attempts", wire.StudyIndex(study_id, index), wire.AttemptList)
        return [Attempt(a.trial_id, a.number, TrialState[a.state], a.attempt,
                        a.heartbeat_age_s) for a in reply.attempts]

    def claim(self, trial_id: int, token: str | None = None) -> bool:
        return self._call("Claim", wire.ClaimMsg(trial_id, token), wire.Flag).value

    def new_attempt(self, study_id: int, index: int, *, after: Attempt | None,
                    params: dict[str, Any] | None, token: str | None = None) -> int | None:
        msg = None if after is None else wire.AttemptMsg(
            after.trial_id, after.number, after.state.name, after.attempt, after.heartbeat_age_s)
        return self._call("NewAttempt", wire.NewAttemptMsg(study_id, index, msg, params, token),
                          wire.MaybeTrialId).trial_id

    def mark_failed(self, trial_id: int, reason: str, token: str | None = None) -> bool:
        return self._call("MarkFailed", wire.MarkFailedMsg(trial_id, reason, token),
                          wire.Flag).value

    def fail_stale_trials(self, study_id: int, grace_s: float) -> list[int]:
        return self._call("FailStaleTrials", wire.StaleSweepMsg(study_id, grace_s),
                          wire.TrialIds).trial_ids

    def create_or_resume(self, spec: SweepSpec) -> tuple[int, bool, int | None]:
        """(study id, created, grown from)."""
        try:
            got = self._call("CreateOrResume", wire.SpecRecord(spec.to_dict(), spec.base_dir),
                             wire.Created)
        except SpecError as e:
            raise SpecError(e.message, source=spec.source, field=e.field) from None
        return got.study_id, got.created, got.grown_from

    def state_counts(self, study_id: int) -> dict[str, int]:
        return self._call("StateCounts", wire.StudyRef(study_id), wire.Counts).counts

    def index_table(self, study_id: int, trials: int) -> list[IndexStatus]:
        from sweeper.study.summaries import IndexStatus

        rows = self._call("IndexTable", wire.IndexTableMsg(study_id, trials), wire.IndexRows)
        return [IndexStatus(i, state, n, number, tuple(values) if values is not None else None,
                            reason) for i, state, n, number, values, reason in rows.rows]

    def stop_check(self, study_id: int, spec: SweepSpec, *, after_trial: bool
                   ) -> dict[str, Any] | None:
        """The stop rules evaluated on the proxy's database (``sweeper.study.stop``): the
        stop state's JSON, or None."""
        return self._call("StopCheck", wire.StopCheckMsg(study_id, spec.to_dict(), after_trial),
                          wire.MaybeStop).state

    def ignore_stop(self, study_id: int) -> dict[str, Any] | None:
        return self._call("IgnoreStop", wire.StudyRef(study_id), wire.MaybeStop).state

    def set_trial_user_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        self._call("SetTrialUserAttrs", wire.UserAttrsMsg(trial_id, attrs), wire.Empty)

    def record_heartbeat(self, trial_id: int) -> None:
        self._call("Heartbeat", wire.TrialRef(trial_id), wire.Empty)

    def study_stats(self, study_id: int | None, buckets: Sequence[float]) -> list[StudyStats]:
        from sweeper.study.stats import StudyStats

        got = self._call("Stats", wire.StatsMsg(study_id, list(buckets)), wire.StatsList)
        return [StudyStats(s.study, s.states, s.duration_buckets, s.duration_sum_s, s.best)
                for s in got.studies]

    # ---------------------------------------------------------------- Optuna's storage API,
    # retried while the proxy is unavailable (same signatures as GrpcStorageProxy's)

    def create_new_study(self, directions: Sequence[StudyDirection],
                         study_name: str | None = None) -> int:
        return self._retry("create_new_study", super().create_new_study, directions,
                           study_name)

    def delete_study(self, study_id: int) -> None:
        return self._retry("delete_study", super().delete_study, study_id)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        return self._retry("set_study_user_attr", super().set_study_user_attr, study_id, key,
                           value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        return self._retry("set_study_system_attr", super().set_study_system_attr, study_id,
                           key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._retry("get_study_id_from_name", super().get_study_id_from_name,
                           study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._retry("get_study_name_from_id", super().get_study_name_from_id, study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._retry("get_study_directions", super().get_study_directions, study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._retry("get_study_user_attrs", super().get_study_user_attrs, study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._retry("get_study_system_attrs", super().get_study_system_attrs, study_id)

    def get_all_studies(self) -> list[FrozenStudy]:
        return self._retry("get_all_studies", super().get_all_studies)

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        return self._retry("create_new_trial", super().create_new_trial, study_id,
                           template_trial)

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        return self._retry("set_trial_param", super().set_trial_param, trial_id, param_name,
                           param_value_internal, distribution)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._retry("get_trial_id_from_study_id_trial_number",
                           super().get_trial_id_from_study_id_trial_number, study_id,
                           trial_number)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        return self._retry("set_trial_state_values", super().set_trial_state_values, trial_id,
                           state, values)

    def set_trial_intermediate_value(self, trial_id: int, step: int,
                                     intermediate_value: float) -> None:
        return self._retry("set_trial_intermediate_value",
                           super().set_trial_intermediate_value, trial_id, step,
                           intermediate_value)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        return self._retry("set_trial_user_attr", super().set_trial_user_attr, trial_id, key,
                           value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        return self._retry("set_trial_system_attr", super().set_trial_system_attr, trial_id,
                           key, value)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._retry("get_trial", super().get_trial, trial_id)

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._retry("get_all_trials", super().get_all_trials, study_id, deepcopy, states)


def _orphaned() -> bool:
    """A local worker whose ``sweeper run`` died: its in-process proxy died with it, so there
    is nothing to wait for (the trial's heartbeat goes stale and the next run retries it)."""
    parent = os.environ.get(ENV_PARENT_PID)
    return parent is not None and parent.isdigit() and os.getppid() != int(parent)


#: What ``open_storage`` returns: the database directly, or the proxy in front of it.
StudyStorage = RetryingRDBStorage | ProxyStorage


def open_proxy_storage(url: str, *, connect_deadline_s: float = 0.0) -> ProxyStorage:
    """Connect to ``sweeper proxy`` at ``grpc://host:port``. ``connect_deadline_s`` > 0 waits
    that long for it to come up (runners); 0 waits a few seconds and fails with one line."""
    storage = ProxyStorage(url)
    storage.wait_ready(connect_deadline_s if connect_deadline_s > 0 else 5.0)
    return storage


def close_storage(storage: StudyStorage) -> None:
    """Close the database connections or the channel (``__main__`` skips the final GC)."""
    if isinstance(storage, ProxyStorage):
        storage.close()
    else:
        storage.engine.dispose()
