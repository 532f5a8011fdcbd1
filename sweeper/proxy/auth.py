"""Every call to the proxy is checked here before any handler runs (a grpc.ServerInterceptor,
first in the server's chain):

1. **authentication**: the ``authorization: Bearer TOKEN`` metadata
   (:mod:`sweeper.study.remote.credentials`), checked by an :class:`Authenticator`: the local
   run's per-run secret (:class:`SharedSecret`), or Kubernetes TokenReview
   (:mod:`.kubeauth`). No credential or a bad one: ``UNAUTHENTICATED``;
2. **limits** (:mod:`.limits`): the caller's rate (``RESOURCE_EXHAUSTED``); the message size
   is the server's ``grpc.max_receive_message_length``;
3. **decoding**: the request is decoded here, not by gRPC, so malformed bytes are an
   ``INVALID_ARGUMENT`` with one line, never an exception inside gRPC;
4. **authorisation** (:mod:`.policy`): ``PERMISSION_DENIED``.

Each refusal is one log line naming the caller (never its token) and the reason, and nothing
was read or written. The health service (kubelet probes carry no token) is exempt.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from sweeper.errors import SweeperError
from sweeper.proxy.limits import Limits, RateLimiter
from sweeper.proxy.policy import SWEEPER_PREFIX, Caller, Policy, Scope
from sweeper.study.remote.credentials import METADATA_KEY

logger = logging.getLogger(__name__)

#: Methods any caller may use without a credential.
PUBLIC_METHODS = frozenset({"/grpc.health.v1.Health/Check"})
#: Fields of sweeper's requests that must be integers when present (ids of rows, indexes).
_INT_FIELDS = ("study_id", "trial_id", "index", "trials")


class AuthError(SweeperError):
    """A caller the proxy refuses. ``reason`` is the log line's; the caller sees it too."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unauthenticated(AuthError):
    """No credential, or one that does not check out (expired, wrong audience, revoked)."""


class AuthUnavailable(AuthError):
    """The authority that checks credentials (the API server) cannot be asked now: a retry
    may succeed (UNAVAILABLE)."""


class Authenticator(Protocol):
    def authenticate(self, token: str) -> Caller: ...


class SharedSecret:
    """One secret, compared in constant time: the local run's in-process proxy, whose workers
    get the secret through their environment. Its holder is an admin of the storage (it is
    the user's own run)."""

    def __init__(self, secret: str, name: str = "local run") -> None:
        if len(secret) < 16:
            raise ValueError("a proxy secret needs at least 16 characters")
        self._secret = secret.encode()
        self.name = name

    def authenticate(self, token: str) -> Caller:
        if not hmac.compare_digest(token.encode(), self._secret):
            raise Unauthenticated("wrong secret")
        return Caller(self.name, admin=True)


def bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == METADATA_KEY and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def peer_name(context: grpc.ServicerContext) -> str:
    try:
        return str(context.peer())
    except Exception:  # noqa: BLE001 - only for the log line
        return "?"


class AuthInterceptor(grpc.ServerInterceptor):
    """Authenticate, limit, decode and authorise every unary call (see the module's doc)."""

    def __init__(self, authenticator: Authenticator, policy: Policy | None,
                 limits: Limits = Limits()) -> None:
        self.authenticator = authenticator
        self.policy = policy
        self.limiter = RateLimiter(limits.rate, limits.burst)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        method: str = details.method
        if handler is None or handler.unary_unary is None or method in PUBLIC_METHODS:
            return handler
        token = bearer(details.invocation_metadata)
        inner = handler.unary_unary
        deserialize = handler.request_deserializer

        def behavior(raw: bytes, context: grpc.ServicerContext) -> Any:
            caller = self._authenticate(method, token, context)
            if not self.limiter.allow(caller.name):
                _refuse(context, grpc.StatusCode.RESOURCE_EXHAUSTED, method, caller.name,
                        f"over its rate of {self.limiter.rate:g} calls/s", log=False)
            request, view = _decode(method, raw, deserialize, context, caller.name)
            if self.policy is not None:
                denied = self.policy.check(caller, method, view)
                if denied is not None:
                    _refuse(context, grpc.StatusCode.PERMISSION_DENIED, method, caller.name,
                            denied)
            try:
                reply = inner(request, context)
            except (ValueError, TypeError, AttributeError, UnicodeError) as e:
                # A message of the right shape with values no handler can use (a string for
                # a number, a list for an object): nothing was written (each step is one
                # transaction and fails before it), the caller gets one line.
                _refuse(context, grpc.StatusCode.INVALID_ARGUMENT, method, caller.name,
                        f"malformed request: {type(e).__name__}")
            if self.policy is not None and method.endswith("/DeleteStudy"):
                self.policy.scope.forget_study(getattr(view, "study_id", -1))
            return reply

        return grpc.unary_unary_rpc_method_handler(
            behavior, response_serializer=handler.response_serializer)

    def _authenticate(self, method: str, token: str | None,
                      context: grpc.ServicerContext) -> Caller:
        who = f"caller at {peer_name(context)}"
        if token is None:
            _refuse(context, grpc.StatusCode.UNAUTHENTICATED, method, who, "no credential")
        assert token is not None
        try:
            return self.authenticator.authenticate(token)
        except AuthUnavailable as e:
            _refuse(context, grpc.StatusCode.UNAVAILABLE, method, who, e.reason)
        except AuthError as e:
            _refuse(context, grpc.StatusCode.UNAUTHENTICATED, method, who, e.reason)
        raise AssertionError("unreachable: context.abort raises")


def _decode(method: str, raw: bytes, deserialize: Callable[[bytes], Any] | None,
            context: grpc.ServicerContext, who: str) -> tuple[Any, Any]:
    """(what the handler takes, what the policy reads): sweeper's service takes the raw
    JSON bytes (checked here to be an object with integer ids), Optuna's its protobuf
    message."""
    try:
        if deserialize is not None:
            message = deserialize(raw)
            return message, message
        if not method.startswith(SWEEPER_PREFIX):
            return raw, raw
        view = json.loads(raw) if raw else {}
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, JSON's ValueError, ...
        _refuse(context, grpc.StatusCode.INVALID_ARGUMENT, method, who,
                f"undecodable request: {type(e).__name__}")
    problem = _shape(view)
    if problem:
        _refuse(context, grpc.StatusCode.INVALID_ARGUMENT, method, who, problem)
    return raw, view


def _shape(view: Any) -> str | None:
    if not isinstance(view, dict):
        return "the request is not a JSON object"
    after = view.get("after")
    for d in (view, after if isinstance(after, dict) else {}):
        for name in _INT_FIELDS:
            v = d.get(name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)
                                  or not 0 <= v < 2**63):
                return f"{name} is not an integer of 64 bits"
    return None


def storage_scope(storage: Any) -> Scope:
    """The :class:`~sweeper.proxy.policy.Scope` of the proxy's database: a trial's study by
    one indexed lookup (``SqlStore.study_of_trial``), a study's id by its name."""
    def study_of_trial(trial_id: int) -> int | None:
        found: int | None = storage.study_of_trial(trial_id)
        return found

    def study_id_of(name: str) -> int | None:
        try:
            return int(storage.get_study_id_from_name(name))
        except KeyError:
            return None

    return Scope(study_of_trial, study_id_of)


def _refuse(context: grpc.ServicerContext, code: grpc.StatusCode, method: str, who: str,
            reason: str, log: bool = True) -> None:
    if log:
        logger.warning("refused %s for %s: %s (%s)", method, who, reason, code.name)
    context.abort(code, f"{code.name.lower().replace('_', ' ')}: {reason}")


def server_interceptors(auth: Authenticator | None, storage: Any,
                        limits: Limits | None) -> list[grpc.ServerInterceptor]:
    """What :class:`~sweeper.proxy.server.ProxyServer` puts first in its chain: nothing
    without an authenticator (a proxy of the tests), else the check of every call."""
    if auth is None:
        return []
    return [AuthInterceptor(auth, Policy(storage_scope(storage)), limits or Limits())]
