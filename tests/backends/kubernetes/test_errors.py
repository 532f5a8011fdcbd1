"""Kubernetes API failures -> one line (pure: ApiException and urllib3 errors built here)."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
)

from sweeper.backends.kubernetes import api_error, connection_error
from sweeper.backends.kubernetes.errors import first_line
from sweeper.errors import BackendError

SERVER = "https://k8s.example:6443"


def _api_exception(status: int, body: Any = None, reason: str = "reason") -> ApiException:
    e = ApiException(status=status, reason=reason)
    e.body = json.dumps(body).encode() if body is not None else None
    return e


def test_forbidden_names_the_user_verb_resource_and_namespace() -> None:
    forbidden = _api_exception(403, {"message": 'pods "p" is forbidden: User '
                                     '"system:serviceaccount:ci:runner" cannot get resource '
                                     '"pods/log" in API group "" in the namespace "ml"'})
    line = str(api_error(forbidden))
    assert line.startswith(
        "permission denied: system:serviceaccount:ci:runner may not get pods/log in namespace ml;")
    assert "manifests/rbac.yaml" in line and "\n" not in line


def test_forbidden_with_a_group_and_cluster_wide() -> None:
    forbidden = _api_exception(403, {"message": 'jobs.batch is forbidden: User "alice" cannot '
                                     'list resource "jobs" in API group "batch" at the cluster '
                                     'scope'})
    assert str(api_error(forbidden)).startswith(
        "permission denied: alice may not list jobs.batch cluster-wide;")
    # A 403 in another shape (an admission webhook) is passed on as the server said it.
    other = _api_exception(403, {"message": "admission webhook denied the request"})
    assert str(api_error(other)) == ("permission denied by the Kubernetes API: admission "
                                     "webhook denied the request")


def test_invalid_job_lists_every_field() -> None:
    invalid = _api_exception(422, {"message": "Job.batch \"x\" is invalid", "details": {
        "name": "x", "kind": "jobs", "causes": [
            {"field": "spec.parallelism", "message": "Invalid value: -1"},
            {"field": "metadata.name", "message": "must be no more than 63 characters"}]}})
    assert str(api_error(invalid)) == (
        "the API server rejected Job x: spec.parallelism: Invalid value: -1; metadata.name: "
        "must be no more than 63 characters")
    # Without causes: the message, and the Job named by the caller.
    bare = _api_exception(422, {"message": "something is wrong"})
    assert str(api_error(bare, job="y")) == "the API server rejected Job y: something is wrong"


@pytest.mark.parametrize(("status", "body", "kwargs", "expected"), [
    (401, {}, {}, "the Kubernetes API rejected the credentials (401 Unauthorized): check the "
                  "kubeconfig user or log in again"),
    (404, {"message": 'namespaces "nowhere" not found',
           "details": {"name": "nowhere", "kind": "namespaces"}}, {},
     "namespace nowhere not found (kubectl apply -k manifests/ creates sweeper)"),
    (404, {"message": 'jobs.batch "j" not found', "details": {"name": "j", "kind": "jobs"}}, {},
     'not found: jobs.batch "j" not found'),
    (409, {"details": {"name": "s-r1"}}, {"sweep": "s"},
     "Job s-r1 already exists (sweeper cancel s, or resume)"),
    (409, {}, {"job": "j"}, "Job j already exists"),
    (500, {"message": "etcd timed out"}, {}, "Kubernetes API error 500 reason: etcd timed out"),
])
def test_status_codes(status: int, body: dict[str, Any], kwargs: dict[str, str],
                      expected: str) -> None:
    assert str(api_error(_api_exception(status, body), **kwargs)) == expected


def test_body_that_is_not_a_status_object() -> None:
    e = _api_exception(503, reason="Service Unavailable")
    e.body = b"<html>upstream connect error</html>"
    assert str(api_error(e)) == ("Kubernetes API error 503 Service Unavailable: Service "
                                 "Unavailable")
    e.body = b'["not", "a", "dict"]'
    assert str(api_error(e)).startswith("Kubernetes API error 503")


def test_client_side_failure_without_a_status() -> None:
    e = ApiException(reason="SSL: CERTIFICATE_VERIFY_FAILED\nmore detail")
    assert str(api_error(e, server=SERVER)) == (
        f"cannot talk to the Kubernetes API server at {SERVER}: SSL: CERTIFICATE_VERIFY_FAILED")


def _max_retry(reason: Exception) -> MaxRetryError:
    return MaxRetryError(None, "/apis/batch/v1/namespaces/sweeper/jobs", reason)  # type: ignore[arg-type]


@pytest.mark.parametrize(("error", "why"), [
    (_max_retry(NewConnectionError(None, "Failed to establish a new connection: [Errno 111] "  # type: ignore[arg-type]
                                   "Connection refused")), "connection refused"),
    (ConnectionRefusedError(111, "Connection refused"), "connection refused"),
    (_max_retry(ConnectTimeoutError(None, "Connection to k8s.example timed out")), "timed out"),
    (TimeoutError("timed out"), "timed out"),
    (_max_retry(NameResolutionError("k8s.example", None,  # type: ignore[arg-type]
                                    socket.gaierror(-2, "Name or service not known"))),
     "unknown host"),
])
def test_connection_failures(error: Exception, why: str) -> None:
    line = str(connection_error(error, SERVER))
    assert line == (f"cannot reach the Kubernetes API server at {SERVER}: {why} (is the "
                    "cluster up and the kubeconfig context right?)")
    assert str(api_error(error, server=SERVER)) == line  # api_error hands them on


def test_errors_are_backend_errors_of_one_line() -> None:
    errors = [api_error(_api_exception(code, {"message": "a\nb"})) for code in (400, 403, 404)]
    errors.append(connection_error(OSError("weird: first\nsecond"), None))
    for e in errors:
        assert isinstance(e, BackendError) and "\n" not in str(e)
    assert str(errors[-1]).startswith("cannot reach the Kubernetes API server at ?: first ")


def test_first_line() -> None:
    assert first_line("\n\n  one  \ntwo") == "one"
    assert first_line("") == ""
