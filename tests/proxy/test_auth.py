"""Authentication and per-sweep authorisation in the proxy itself (sweeper.proxy.auth and
.policy), on a real proxy in this process: the local run's secret, and callers that an
authenticator names (a trial pod of a sweep, an admin, a user without the role) the way the
Kubernetes authenticator does (its TokenReview and SubjectAccessReview are tested against the
real API server in tests/backends/test_proxy_auth_k8s.py)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import optuna
import pytest

from sweeper.errors import StorageError
from sweeper.protocol import ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE, LAUNCHES_ATTR
from sweeper.proxy.auth import AuthError, SharedSecret, Unauthenticated
from sweeper.proxy.policy import Caller
from sweeper.proxy.server import ProxyServer
from sweeper.study import create_or_resume
from sweeper.study.remote.client import ProxyStorage
from tests.support.helpers import make_spec

SECRET = "s3cret-of-this-run-0123456789"


class Tokens:
    """An authenticator from a table: token -> caller (a stand-in for TokenReview)."""

    def __init__(self, table: dict[str, Caller]) -> None:
        self.table = table

    def authenticate(self, token: str) -> Caller:
        if token not in self.table:
            raise Unauthenticated("token not known")
        return self.table[token]


CALLERS = {"admin-token": Caller("user alice", admin=True),
           "pod-a-token": Caller("pod sweeper/a-0", sweep="sweep-a"),
           "nobody-token": Caller("user mallory")}


@pytest.fixture
def server(sqlite_url: str) -> Iterator[ProxyServer]:
    server = ProxyServer(sqlite_url, port=0, auth=Tokens(CALLERS)).start()
    yield server
    server.stop(0)


def client(url: str, monkeypatch: pytest.MonkeyPatch, token: str | None) -> ProxyStorage:
    monkeypatch.delenv(ENV_PROXY_TOKEN_FILE, raising=False)
    if token is None:
        monkeypatch.delenv(ENV_PROXY_TOKEN, raising=False)
    else:
        monkeypatch.setenv(ENV_PROXY_TOKEN, token)
    return ProxyStorage(url)


def test_the_local_secret_admits_its_holder_only(sqlite_url: str,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    server = ProxyServer(sqlite_url, port=0, auth=SharedSecret(SECRET)).start()
    try:
        good = client(server.url, monkeypatch, SECRET)
        sweep, created = create_or_resume(good, make_spec(name="local"))
        assert created and good.state_counts(sweep.study_id) == {"WAITING": 10}
        for token in (None, "not-the-secret-at-all-0123"):
            bad = client(server.url, monkeypatch, token)
            with caplog.at_level(logging.WARNING, logger="sweeper.proxy.auth"), \
                    pytest.raises(StorageError, match=r"refused get_all_studies "
                                                      r"\(UNAUTHENTICATED\)"):
                bad.get_all_studies()
            with pytest.raises(StorageError, match="UNAUTHENTICATED"):
                bad.state_counts(sweep.study_id)
            bad.close()
        lines = [r.getMessage() for r in caplog.records if r.name == "sweeper.proxy.auth"]
        assert len(lines) == 4, lines  # one line per refused call
        line = lines[0]
        assert "refused /optuna.StorageService/GetAllStudies for caller at ipv" in line
        assert "no credential" in line
        assert SECRET not in caplog.text and "not-the-secret" not in caplog.text
        assert good.state_counts(sweep.study_id) == {"WAITING": 10}  # nothing written
        good.close()
    finally:
        server.stop(0)
    with pytest.raises(ValueError):
        SharedSecret("short")


def _sweeps(server: ProxyServer, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, int]:
    """Sweeps A and B made by the admin: (A's study, B's study, a trial of B)."""
    admin = client(server.url, monkeypatch, "admin-token")
    a, _ = create_or_resume(admin, make_spec(name="sweep-a"))
    b, _ = create_or_resume(admin, make_spec(name="sweep-b"))
    trial_b = admin.attempts(b.study_id, 0)[0].trial_id
    admin.close()
    return a.study_id, b.study_id, trial_b


def _snapshot(server: ProxyServer) -> list[Any]:
    storage = server.storage
    out = []
    for s in storage.get_all_studies():
        trials = storage.get_all_trials(storage.get_study_id_from_name(s.study_name))
        out.append((s.study_name, s.user_attrs,
                    [(t.state, t.user_attrs, t.intermediate_values) for t in trials]))
    return out


def test_a_pod_runs_its_own_sweep_and_touches_nothing_else(
        server: ProxyServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    study_a, study_b, trial_b = _sweeps(server, monkeypatch)
    pod = client(server.url, monkeypatch, "pod-a-token")
    # The runner's operations on its own sweep: claim, report, heartbeat, finish.
    assert pod.get_study_id_from_name("sweep-a") == study_a
    (first,) = pod.attempts(study_a, 0)
    assert pod.claim(first.trial_id)
    pod.record_heartbeat(first.trial_id)
    pod.set_trial_intermediate_value(first.trial_id, 1, 0.5)
    pod.set_trial_user_attrs(first.trial_id, {"acc": 0.9})
    pod.set_study_user_attr(study_a, LAUNCHES_ATTR, 1)
    assert pod.set_trial_state_values(first.trial_id, optuna.trial.TrialState.COMPLETE, [0.5])
    assert pod.state_counts(study_a) == {"COMPLETE": 1, "WAITING": 9}
    before = _snapshot(server)
    with caplog.at_level(logging.WARNING, logger="sweeper.proxy.auth"):
        refused = [
            lambda: pod.get_study_id_from_name("sweep-b"),
            lambda: pod.get_trial(trial_b),
            lambda: pod.set_trial_state_values(trial_b, optuna.trial.TrialState.FAIL),
            lambda: pod.set_trial_user_attr(trial_b, "x", 1),
            lambda: pod.delete_study(study_b),
            lambda: pod.delete_study(study_a),
            lambda: pod.create_new_study([optuna.study.StudyDirection.MINIMIZE], "new"),
            lambda: pod.set_study_user_attr(study_a, "sweeper:spec", {}),
            lambda: pod.set_study_system_attr(study_a, "x", 1),
            lambda: pod.get_all_studies(),
            lambda: pod.get_all_trials(study_b),
        ]
        for call in [*refused, lambda: pod.claim(trial_b), lambda: pod.record_heartbeat(trial_b),
                     lambda: pod.attempts(study_b, 0), lambda: pod.state_counts(study_b),
                     lambda: pod.mark_failed(trial_b, "x"),
                     lambda: pod.ignore_stop(study_a),
                     lambda: pod.study_stats(None, [1.0]),
                     lambda: pod.create_or_resume(make_spec(name="sweep-b"))]:
            with pytest.raises(StorageError, match="PERMISSION_DENIED"):
                call()
    assert _snapshot(server) == before  # nothing written
    lines = [r.getMessage() for r in caplog.records if r.name == "sweeper.proxy.auth"]
    assert len(lines) == 19, lines  # one line each
    assert "refused /optuna.StorageService/DeleteStudy for pod sweeper/a-0: Optuna's " \
           "DeleteStudy is not a runner's operation (PERMISSION_DENIED)" in lines
    assert any(f"trial {trial_b} is not in sweep 'sweep-a'" in x for x in lines)
    pod.close()


def test_an_admin_may_do_anything_and_a_user_without_the_role_nothing(
        server: ProxyServer, monkeypatch: pytest.MonkeyPatch) -> None:
    _, study_b, _ = _sweeps(server, monkeypatch)
    nobody = client(server.url, monkeypatch, "nobody-token")
    with pytest.raises(StorageError, match=r"\(PERMISSION_DENIED\)"):
        nobody.get_all_studies()
    with pytest.raises(StorageError, match="no sweep and no admin role"):
        nobody.state_counts(study_b)
    nobody.close()
    admin = client(server.url, monkeypatch, "admin-token")
    assert {s.study_name for s in admin.get_all_studies()} == {"sweep-a", "sweep-b"}
    admin.delete_study(study_b)
    assert {s.study_name for s in admin.get_all_studies()} == {"sweep-a"}
    # A sweep created again under a deleted one's name gets a new id: the pod's scope follows.
    _, created = create_or_resume(admin, make_spec(name="sweep-b"))
    assert created
    admin.close()


def test_a_pod_may_create_its_own_sweep_only(server: ProxyServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """GitOps: the first pods of a rendered Job create their sweep from the mounted spec."""
    pod = client(server.url, monkeypatch, "pod-a-token")
    sweep, created = create_or_resume(pod, make_spec(name="sweep-a"))
    assert created and pod.state_counts(sweep.study_id) == {"WAITING": 10}
    with pytest.raises(StorageError, match="creates sweep 'sweep-c', not its own"):
        create_or_resume(pod, make_spec(name="sweep-c"))
    pod.close()


def test_auth_errors_are_sweeper_errors() -> None:
    from sweeper.errors import SweeperError

    assert issubclass(AuthError, SweeperError)


def test_a_throttled_runner_waits_and_goes_on(sqlite_url: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Over its rate a caller is told RESOURCE_EXHAUSTED; the client backs off and calls
    again (as for a proxy that is unavailable) instead of failing its trial."""
    from sweeper.proxy.limits import Limits

    server = ProxyServer(sqlite_url, port=0, auth=Tokens(CALLERS),
                         limits=Limits(rate=5.0, burst=2)).start()
    try:
        admin = client(server.url, monkeypatch, "admin-token")
        start = time.monotonic()
        for _ in range(5):
            assert admin.get_all_studies() == []
        assert time.monotonic() - start > 0.3  # three calls waited for the bucket
        admin.close()
    finally:
        server.stop(0)


def test_the_local_proxy_has_a_secret_per_run_and_no_rate_limit(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeper.proxy.server import reserve_local_port, start_local_proxy

    monkeypatch.delenv(ENV_PROXY_TOKEN, raising=False)
    first = start_local_proxy(sqlite_url)
    secret = os.environ[ENV_PROXY_TOKEN]
    first.stop(0)
    reserved = reserve_local_port()
    second_secret = os.environ[ENV_PROXY_TOKEN]
    second = start_local_proxy(sqlite_url, reserved=reserved)
    reserved.close()
    try:
        assert len(secret) >= 40 and second_secret != secret
        storage = client(second.url, monkeypatch, second_secret)
        for _ in range(50):
            storage.get_all_studies()
        storage.close()
    finally:
        second.stop(0)
