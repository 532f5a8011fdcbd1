"""A loopback ``sweeper proxy`` requires a credential unless ``--auth none`` says otherwise
(issue 40): a random secret in a file of the user's runtime directory that only this user can
read; sweeper's commands and runners of that user find it there, anyone else is refused."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import optuna
import pytest

from sweeper.protocol import ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE
from sweeper.study import open_storage
from sweeper.study.remote.localsecret import (
    existing_secret,
    expected_path,
    read_secret,
    write_secret,
)
from tests.support.helpers import write_spec
from tests.support.proxy import REPO, SWEEPER, ProxyProcess, free_port

#: The uid and gid of another user of the machine (nobody).
OTHER_UID = 65534


@pytest.fixture
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credential in this process's environment: only the secret file can give one."""
    monkeypatch.delenv(ENV_PROXY_TOKEN, raising=False)
    monkeypatch.delenv(ENV_PROXY_TOKEN_FILE, raising=False)


@pytest.fixture
def proxy(sqlite_url: str, tmp_path: Path, no_token: None) -> Iterator[ProxyProcess]:
    """``sweeper proxy`` with its defaults (no --auth) on a loopback port."""
    with ProxyProcess(sqlite_url, tmp_path) as p:
        yield p


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE)}
    return dict(env, PYTHONPATH=str(REPO))


def _sweeper(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SWEEPER), *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=240)


def test_the_proxy_says_where_its_secret_is_and_never_shows_it(proxy: ProxyProcess) -> None:
    path = expected_path("127.0.0.1", proxy.port)
    secret = read_secret(path)
    assert secret is not None and len(secret) >= 40
    log = proxy.log.read_text()
    assert f"callers need the secret in {path} (mode 0600" in log
    assert secret not in log
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.stat().st_uid == path.parent.stat().st_uid == os.geteuid()


def test_a_plain_optuna_client_is_refused_and_changes_nothing(proxy: ProxyProcess,
                                                              sqlite_url: str) -> None:
    study = optuna.create_study(study_name="precious", storage=open_storage(sqlite_url))
    study.enqueue_trial({"x": 1.0})
    storage_id = open_storage(sqlite_url).get_study_id_from_name("precious")
    plain = optuna.storages.GrpcStorageProxy(host="127.0.0.1", port=proxy.port)
    for call in (plain.get_all_studies, lambda: plain.delete_study(storage_id),
                 lambda: plain.create_new_study([optuna.study.StudyDirection.MINIMIZE],
                                                "intruder")):
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    plain.close()
    after = open_storage(sqlite_url)
    assert [s.study_name for s in after.get_all_studies()] == ["precious"]
    assert len(after.get_all_trials(storage_id)) == 1


def test_another_user_cannot_read_the_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             no_token: None) -> None:
    """A process of another uid (forked, then setuid to nobody) can neither enter the runtime
    directory nor, where the directories let it through, read the file; sweeper's own lookup
    in that process finds no secret for the address."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    parent = tmp_path / "home"
    parent.mkdir()
    parent.chmod(0o755)  # every user may walk up to the runtime directory
    tmp_path.chmod(0o755)
    runtime = parent / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    path = write_secret("127.0.0.1", 13999, "s" * 43)
    assert read_secret(path) == "s" * 43

    assert _as_other_user(path) == {"read": "EACCES", "list": "EACCES", "found": None}
    # Through directories another user may walk: the file's own mode still keeps it out.
    for d in (runtime, path.parent):
        d.chmod(0o711)
    try:
        assert _as_other_user(path)["read"] == "EACCES"
    finally:
        for d in (runtime, path.parent):
            d.chmod(0o700)


def _as_other_user(path: Path) -> dict[str, object]:
    """What a process of uid nobody gets when it reads ``path``, lists its directory and looks
    the address up as sweeper's client does."""
    import errno

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: plain system calls only, then _exit
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            out: dict[str, object] = {}
            for what, call in (("read", lambda: path.read_text()),
                               ("list", lambda: os.listdir(path.parent))):
                try:
                    call()
                    out[what] = "ok"
                except OSError as e:
                    out[what] = errno.errorcode.get(e.errno or 0, str(e))
            out["found"] = existing_secret("127.0.0.1", 13999)
            os.write(write_end, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return dict(json.loads(text))


def test_every_sweeper_command_works_through_the_loopback_proxy_without_flags(
        proxy: ProxyProcess, tmp_path: Path) -> None:
    url = proxy.url
    spec = write_spec(tmp_path, name="loop")
    steps = [("run", str(spec), "--storage", url),
             ("status", "loop", "--storage", url, "--format", "json"),
             ("list", "--storage", url),
             ("best", "loop", "--storage", url),
             ("export", "loop", "--storage", url),
             ("resume", "loop", "--storage", url),
             ("delete", "loop", "--yes", "--storage", url)]
    for args in steps:
        done = _sweeper(*args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        assert "UNAUTHENTICATED" not in done.stderr
    assert "loop" not in _sweeper("list", "--storage", url, cwd=tmp_path).stdout


def test_a_restarted_proxy_keeps_its_secret_and_its_clients(proxy: ProxyProcess) -> None:
    from sweeper.study import create_or_resume
    from tests.support.helpers import make_spec

    client = open_storage(proxy.url)
    sweep, _ = create_or_resume(client, make_spec(name="restarted"))
    before = existing_secret("127.0.0.1", proxy.port)
    proxy.kill()
    proxy.start()
    assert existing_secret("127.0.0.1", proxy.port) == before
    assert client.state_counts(sweep.study_id) == {"WAITING": 10}
    client.close()


def test_auth_none_warns_once_on_start(sqlite_url: str, no_token: None) -> None:
    port = free_port()
    proc = subprocess.Popen([str(SWEEPER), "proxy", "--auth", "none", "--port", str(port),
                             "--metrics-port", "0", "--storage", sqlite_url], env=_env(),
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("storage proxy for"):
                break
        plain = optuna.storages.GrpcStorageProxy(host="127.0.0.1", port=port)
        assert plain.get_all_studies() == []  # what --auth none means: anyone is let in
        plain.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    warnings = [ln for ln in lines if ln.startswith("warning:")]
    assert len(warnings) == 1 and "--auth none" in warnings[0], lines
    assert "every user of this machine" in warnings[0]
    assert existing_secret("127.0.0.1", port) is None  # no secret file for an open proxy


def test_a_secret_file_others_may_read_is_no_secret(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    path = write_secret("localhost", 14000, "t" * 43)
    assert path == expected_path("127.0.0.1", 14000)  # one address, whichever name
    assert existing_secret("127.0.0.1", 14000) == "t" * 43
    path.chmod(0o644)
    assert existing_secret("127.0.0.1", 14000) is None
    assert existing_secret("127.0.0.1", 0) is None  # any free port: never reused


def test_a_client_without_the_secret_is_told_why(proxy: ProxyProcess, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeper.errors import StorageError
    from sweeper.study.remote.client import ProxyStorage

    elsewhere = tmp_path / "another-runtime"
    elsewhere.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(elsewhere))  # as a user whose file is not there
    client = ProxyStorage(proxy.url)
    with pytest.raises(StorageError, match=r"refused ListSweeps \(UNAUTHENTICATED\): "
                                           r"unauthenticated: no credential \(a proxy on "
                                           r"loopback .* another user's\?"):
        client.list_sweeps()
    client.close()
