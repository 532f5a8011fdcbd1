"""Kubernetes API failures -> one :class:`BackendError` line a user can act on.

Pure apart from importing the exception class lazily (so importing sweeper does not import the
``kubernetes`` client): 403 names the missing permission, 404 the missing namespace, 409 the
existing Job, 422 the invalid fields, and a connection failure says whether the server refused,
timed out or does not resolve.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sweeper.errors import BackendError

_FORBIDDEN_RE = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<ns>[^"]*)")?')
#: What the CLI's Role grants (manifests/rbac.yaml), named in a permission error.
RBAC_HINT = ("grant it a Role like the one in manifests/rbac.yaml (jobs create/get/list/watch/"
             "delete, pods get/list, pods/log get)")


def first_line(text: str) -> str:
    """The first non-blank line of ``text`` (stripped), or ``text`` itself if it has none."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text


def api_error(e: Exception, *, server: str | None = None, job: str | None = None,
              sweep: str | None = None) -> BackendError:
    """One clear line for an ApiException or a connection failure.

    ``job`` names the Job a request was about (for 409/422 without details), ``sweep`` the
    sweep (for the "cancel or resume" hint of a 409)."""
    from kubernetes.client.exceptions import ApiException

    if not isinstance(e, ApiException):
        return connection_error(e, server)
    if not e.status:  # raised by the client itself: TLS failure, unusable request
        return BackendError(f"cannot talk to the Kubernetes API server at {server or '?'}: "
                            f"{first_line(str(e.reason or ''))}")
    body = _status_body(e.body)
    # One line even when the server's message has several (joined, nothing dropped).
    message = " ".join(str(body.get("message") or e.reason or "").split())
    details = body.get("details")
    return _status_error(int(e.status), str(e.reason), message,
                         details if isinstance(details, dict) else {}, job=job, sweep=sweep)


def _status_body(raw: Any) -> dict[str, Any]:
    """The apiserver's ``Status`` object from an error response body ({} if it is not one)."""
    try:
        parsed = json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _status_error(status: int, reason: str, message: str, details: dict[str, Any], *,
                  job: str | None, sweep: str | None) -> BackendError:
    if status == 403:
        return _forbidden(message)
    if status == 401:
        return BackendError("the Kubernetes API rejected the credentials (401 Unauthorized): "
                            "check the kubeconfig user or log in again")
    if status == 404:
        return _not_found(message, details)
    if status == 409:
        name = details.get("name") or job or "?"
        hint = f" (sweeper cancel {sweep}, or resume)" if sweep else ""
        return BackendError(f"Job {name} already exists{hint}")
    if status == 422:
        return _invalid(message, details, job)
    return BackendError(f"Kubernetes API error {status} {reason}: {message}")


def _not_found(message: str, details: dict[str, Any]) -> BackendError:
    if details.get("kind") == "namespaces" or message.startswith("namespaces "):
        ns = details.get("name") or message
        return BackendError(f"namespace {ns} not found (kubectl apply -k manifests/ creates "
                            "sweeper)")
    return BackendError(f"not found: {message}")


def _invalid(message: str, details: dict[str, Any], job: str | None) -> BackendError:
    causes = details.get("causes") or []
    parts = [f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")
             for c in causes if isinstance(c, dict)]
    what = "; ".join(parts) or message
    return BackendError(f"the API server rejected Job {details.get('name') or job}: {what}")


def _forbidden(message: str) -> BackendError:
    f = _FORBIDDEN_RE.search(message)
    if not f:
        return BackendError(f"permission denied by the Kubernetes API: {message}")
    resource = f["resource"] + (f".{f['group']}" if f["group"] else "")
    where = f" in namespace {f['ns']}" if f["ns"] else " cluster-wide"
    return BackendError(f"permission denied: {f['user']} may not {f['verb']} {resource}{where}; "
                        + RBAC_HINT)


def connection_error(e: BaseException, server: str | None) -> BackendError:
    """One line for a request that never got an HTTP answer (urllib3 error, OSError)."""
    reason: BaseException = e
    for attr in ("reason", "__cause__", "__context__"):
        inner = getattr(reason, attr, None)
        if isinstance(inner, Exception):
            reason = inner
    text = str(reason)
    if "Connection refused" in text or "ConnectionRefused" in type(reason).__name__:
        why = "connection refused"
    elif "timed out" in text.lower() or "Timeout" in type(reason).__name__:
        why = "timed out"
    elif "Name or service not known" in text or "nodename nor servname" in text:
        why = "unknown host"
    else:
        why = first_line(text.split(": ", 1)[-1]) or type(reason).__name__
    return BackendError(f"cannot reach the Kubernetes API server at {server or '?'}: {why} "
                        "(is the cluster up and the kubeconfig context right?)")
