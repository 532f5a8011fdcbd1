"""Kubernetes identities for the proxy (``sweeper proxy --auth kubernetes``), as Vault's and
Linkerd's Kubernetes auth do it:

- a token is checked with a **TokenReview** against the API server, for the proxy's own
  audience (``sweeper-proxy``): a trial pod's projected ServiceAccount token, or a user's
  (``kubectl create token NAME --audience sweeper-proxy``). Expired, revoked, another
  audience, or bound to a pod that is gone: refused. An answer is cached for the token's
  lifetime, at most ``ttl_s`` (default 60 s: a deleted pod's token stops working within it);
- a token bound to a pod names the pod; the pod's ``sweeper.dev/sweep`` label names its
  sweep (read once per pod, cached). Only pods of the proxy's namespaces count;
- any other identity is an admin when a **SubjectAccessReview** allows it the verb ``admin``
  on ``studies.sweeper.dev`` in the proxy's namespace (the ClusterRole
  ``sweeper-proxy-admin`` of manifests/components/storage-proxy grants it), cached like the
  token.

The proxy's ServiceAccount needs ``create`` on tokenreviews and subjectaccessreviews
(``system:auth-delegator``) and ``get`` on pods in its namespace.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from sweeper.proxy.auth import AuthUnavailable, Unauthenticated
from sweeper.proxy.policy import Caller
from sweeper.study.remote.credentials import DEFAULT_AUDIENCE

logger = logging.getLogger(__name__)

SWEEP_LABEL = "sweeper.dev/sweep"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
#: What the admin role is: ``kubectl auth can-i admin studies.sweeper.dev -n NS``.
ADMIN_GROUP, ADMIN_RESOURCE, ADMIN_VERB = "sweeper.dev", "studies", "admin"
DEFAULT_TTL_S = 60.0

Obj = dict[str, Any]


class ApiClients(Protocol):
    """Where the API server is (``sweeper.backends.kubernetes.client.ClientFactory``, which
    the CLI passes in: the proxy does not import the backends)."""

    request_timeout_s: float

    def api_client(self) -> Any: ...


class KubernetesAuthenticator:
    """``authenticate(token) -> Caller`` through the API server (see the module's doc)."""

    def __init__(self, factory: ApiClients, namespace: str, *,
                 audience: str = DEFAULT_AUDIENCE, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.factory = factory
        self.namespace = namespace
        self.audience = audience
        self.ttl_s = ttl_s
        self._clock = clock
        self._tokens: dict[str, tuple[float, Caller]] = {}  # sha256 -> (until, caller)
        self._pods: dict[str, str | None] = {}  # pod uid -> sweep
        self._lock = threading.Lock()

    def authenticate(self, token: str) -> Caller:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        with self._lock:
            hit = self._tokens.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        caller = self._review(token)
        until = min(now + self.ttl_s, _expiry(token) or now + self.ttl_s)
        with self._lock:
            if len(self._tokens) > 100_000:
                self._tokens = {k: v for k, v in self._tokens.items() if v[0] > now}
            self._tokens[key] = (until, caller)
        return caller

    # ---------------------------------------------------------------- the reviews

    def _review(self, token: str) -> Caller:
        status = self._post("create_token_review", "AuthenticationV1Api", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": [self.audience]}}).get("status") or {}
        if not status.get("authenticated"):
            raise Unauthenticated(f"token review: {_first_line(status.get('error'))}")
        if self.audience not in (status.get("audiences") or [self.audience]):
            raise Unauthenticated(f"token review: not for audience {self.audience}")
        user: Obj = status.get("user") or {}
        username = str(user.get("username") or "?")
        extra: dict[str, list[str]] = user.get("extra") or {}
        pod: str | None = (extra.get(POD_NAME) or [None])[0]  # type: ignore[list-item]
        if pod is not None:
            namespace = _sa_namespace(username)
            name = f"pod {namespace}/{pod} ({username})"
            if namespace != self.namespace:
                return Caller(name)  # another namespace's pod: no sweep of this proxy's
            return Caller(name, sweep=self._sweep_of(namespace, pod,
                                                     (extra.get(POD_UID) or [""])[0]))
        return Caller(username, admin=self._is_admin(user))

    def _sweep_of(self, namespace: str, pod: str, uid: str) -> str | None:
        with self._lock:
            if uid in self._pods:
                return self._pods[uid]
        obj = self._get_pod(namespace, pod)
        meta = (obj or {}).get("metadata") or {}
        if obj is None or meta.get("uid") != uid:
            raise Unauthenticated(f"pod {namespace}/{pod} is gone")
        sweep = (meta.get("labels") or {}).get(SWEEP_LABEL)
        with self._lock:
            self._pods[uid] = sweep
        return sweep

    def _is_admin(self, user: Obj) -> bool:
        spec: Obj = {"user": user.get("username"), "groups": user.get("groups") or [],
                     "resourceAttributes": {"namespace": self.namespace,
                                            "group": ADMIN_GROUP, "resource": ADMIN_RESOURCE,
                                            "verb": ADMIN_VERB}}
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        status = self._post("create_subject_access_review", "AuthorizationV1Api", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": spec}).get("status") or {}
        return bool(status.get("allowed"))

    # ---------------------------------------------------------------- the API server

    def _post(self, method: str, api: str, body: Obj) -> Obj:
        from kubernetes import client

        return self._call(getattr(getattr(client, api)(self.factory.api_client()), method),
                          body)

    def _get_pod(self, namespace: str, name: str) -> Obj | None:
        from kubernetes import client

        core = client.CoreV1Api(self.factory.api_client())
        return self._call(core.read_namespaced_pod, name, namespace, missing_ok=True)

    def _call(self, fn: Callable[..., Any], *args: Any, missing_ok: bool = False) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = fn(*args, _preload_content=False,
                      _request_timeout=self.factory.request_timeout_s)
            return json.loads(resp.data)
        except ApiException as e:
            if missing_ok and e.status == 404:
                return None
            if e.status in (401, 403):
                # The proxy's own identity lacks a permission: say which, once per call.
                raise AuthUnavailable(f"the API server refused the proxy's own request "
                                      f"({e.status} {e.reason}): does its ServiceAccount have "
                                      "the storage-proxy component's RBAC?") from None
            raise AuthUnavailable(f"the API server answered {e.status} {e.reason}") from None
        except (HTTPError, OSError, ValueError) as e:
            raise AuthUnavailable(f"the API server cannot be reached: "
                                  f"{type(e).__name__}") from None


def _sa_namespace(username: str) -> str:
    """``system:serviceaccount:NS:NAME`` -> NS (a pod's token is always a ServiceAccount's)."""
    parts = username.split(":")
    return parts[2] if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else ""


def _expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (read only to bound the cache; TokenReview checked it)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def _first_line(text: Any) -> str:
    lines = str(text or "invalid token").strip().splitlines()
    return lines[0][:200] if lines else "invalid token"


def in_cluster_namespace(default: str = "sweeper") -> str:
    """The namespace this pod runs in (its ServiceAccount's), else ``default``."""
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or default
    except OSError:
        return default
