"""Managing the sweeps of a storage through the CLI: list, delete, growing a sweep with `run`,
a spec file in place of a NAME, and commands that read never creating a storage."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import yaml
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.protocol import LAUNCHES_ATTR
from sweeper.spec import load_spec
from sweeper.study import create_or_resume, open_storage
from tests.support.compare import isolate, quadratic_spec, run_sweep
from tests.support.helpers import make_spec

SWEEPER = Path(sys.executable).parent / "sweeper"
PASSWORD = "sweeper-test-pw"


def invoke(*args: str, **env: str | None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def _studies(url: str) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(open_storage(url))]


# --------------------------------------------------------------------------- list


def test_list_shows_every_sweep_with_counts_best_and_last_activity(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, storage_url, quadratic_spec("done-sweep", trials=3))
    storage = open_storage(storage_url)
    create_or_resume(storage, make_spec(name="planned", trials=4))  # a grid, nothing run yet
    plain = optuna.create_study(study_name="plain-optuna", storage=storage,
                                direction="maximize")
    plain.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    best_plain = plain.best_value
    best_done = optuna.load_study(study_name="done-sweep", storage=storage).best_value

    result = invoke("list", "--storage", storage_url, "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert list(rows) == ["done-sweep", "plain-optuna", "planned"]  # by name
    done = rows["done-sweep"]
    assert done["sweeper"] is True and done["method"] == "random"
    assert (done["indexes"], done["finished_indexes"]) == (3, 3)
    assert done["trials_by_state"] == {"COMPLETE": 3}
    assert done["objectives"] == [{"metric": "loss", "direction": "minimize"}]
    assert done["best_value"] == pytest.approx(best_done)
    assert done["last_activity"] is not None
    assert rows["planned"]["trials_by_state"] == {"WAITING": 4}
    assert rows["planned"]["finished_indexes"] == 0 and rows["planned"]["best_value"] is None
    assert rows["planned"]["last_activity"] is None
    assert rows["plain-optuna"]["sweeper"] is False and rows["plain-optuna"]["method"] is None
    assert rows["plain-optuna"]["best_value"] == pytest.approx(best_plain)  # maximize

    table = invoke("list", "--storage", storage_url)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split()[:9] == ["name", "method", "finished", "complete", "pruned",
                                    "running", "waiting", "fail", "best"]
    assert lines[2].split()[:8] == ["done-sweep", "random", "3/3", "3", "0", "0", "0", "0"]
    assert f"loss={best_done:.6g}" in lines[2]
    assert lines[3].split()[:2] == ["plain-optuna", "(optuna)"]
    assert lines[4].split()[:4] == ["planned", "grid", "0/4", "0"]
    assert "(optuna): a study sweeper did not create" in table.stderr
    if storage_url.startswith("postgresql"):
        assert PASSWORD not in table.output


def test_list_costs_the_same_few_queries_for_any_number_of_sweeps(sqlite_url: str) -> None:
    storage = open_storage(sqlite_url)

    def statements() -> int:
        seen: list[str] = []
        fresh = open_storage(sqlite_url, create=False)
        sa.event.listen(fresh.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
        fresh.list_sweeps()
        return len(seen)

    create_or_resume(storage, make_spec(name="s-0", method="random", trials=50))
    few = statements()
    for k in range(1, 6):
        create_or_resume(storage, make_spec(name=f"s-{k}", method="random", trials=50))
    assert statements() == few <= 8


def test_list_of_an_empty_or_missing_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    missing = invoke("list")
    assert missing.exit_code == 2
    assert one_error_line(missing) == ("error: storage sqlite:///sweeps.db: the file "
                                       f"{tmp_path / 'sweeps.db'} does not exist")
    assert list(tmp_path.iterdir()) == []
    open_storage("sqlite:///sweeps.db")  # the schema, no study
    empty = invoke("list")
    assert empty.exit_code == 0 and empty.stdout == ""
    assert "no sweeps in sqlite:///sweeps.db" in empty.stderr
    assert json.loads(invoke("list", "--format", "json").stdout) == []


# --------------------------------------------------------------------------- delete


def test_delete_removes_the_study_and_its_local_artifact_files(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, storage_url, quadratic_spec("art-sweep", trials=2))
    run_sweep(tmp_path, storage_url, quadratic_spec("keeper", trials=1))
    store = tmp_path / "sweeps-artifacts" if storage_url.startswith("sqlite") \
        else tmp_path / "sweeper-artifacts"
    assert len(list(store.iterdir())) == 3  # one file per trial

    refused = invoke("delete", "art-sweep", "--storage", storage_url)  # stdin is no terminal
    assert refused.exit_code == 2
    assert one_error_line(refused).endswith(
        "not confirmed (stdin is not a terminal); pass --yes to delete without asking")
    assert "delete sweep art-sweep: 2 trial(s) in " in refused.stderr
    assert "; 2 artifact(s) in " in refused.stderr
    assert sorted(_studies(storage_url)) == ["art-sweep", "keeper"]

    deleted = invoke("delete", "art-sweep", "--storage", storage_url, "--yes")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.splitlines()[0].startswith("deleted sweep art-sweep (2 trial(s)) from ")
    removed = deleted.stdout.splitlines()[1]
    assert removed.startswith("removed 2 artifact file(s) from ") and removed.endswith(store.name)
    assert _studies(storage_url) == ["keeper"]
    assert len(list(store.iterdir())) == 1  # the other sweep's file stays
    if storage_url.startswith("postgresql"):
        assert PASSWORD not in deleted.output + refused.output
    again = invoke("delete", "art-sweep", "--storage", storage_url, "--yes")
    assert again.exit_code == 2
    assert "no sweep named 'art-sweep' in " in one_error_line(again)
    assert "sweeps there: keeper" in one_error_line(again)


def test_delete_asks_on_a_terminal(sqlite_url: str, tmp_path: Path) -> None:
    """The real console script on a pseudo-terminal: "n" keeps the sweep, "y" deletes it."""
    create_or_resume(open_storage(sqlite_url), make_spec(name="asked"))

    def answer(reply: bytes) -> tuple[int, str]:
        pid, fd = pty.fork()
        if pid == 0:  # pragma: no cover - the child execs at once
            os.execv(str(SWEEPER), [str(SWEEPER), "delete", "asked", "--storage", sqlite_url])
        out = b""
        deadline = time.monotonic() + 60
        sent = False
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if not sent and b"Delete? [y/N]" in out:
                os.write(fd, reply + b"\n")
                sent = True
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        return os.waitstatus_to_exitcode(status), out.decode(errors="replace")

    code, out = answer(b"n")
    assert code == 1 and "delete sweep asked: 10 trial(s) in " in out, out
    assert _studies(sqlite_url) == ["asked"]
    code, out = answer(b"y")
    assert code == 0 and "deleted sweep asked (10 trial(s))" in out, out
    assert _studies(sqlite_url) == []


def test_delete_with_an_unreachable_cluster_warns_unless_kubernetes_is_asked(
        sqlite_url: str, tmp_path: Path) -> None:
    storage = open_storage(sqlite_url)
    sweep, _ = create_or_resume(storage, make_spec(name="was-on-k8s"))
    storage.set_study_user_attr(sweep.study_id, LAUNCHES_ATTR, 1)  # launched on Kubernetes
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{_closed_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    env = {"KUBECONFIG": str(kubeconfig), "KUBERNETES_SERVICE_HOST": None}
    required = invoke("delete", "was-on-k8s", "--storage", sqlite_url, "--yes",
                      "--kubernetes", **env)
    assert required.exit_code == 3, required.output
    assert "error: " in one_error_line(required)
    assert _studies(sqlite_url) == ["was-on-k8s"]  # nothing deleted
    optional = invoke("delete", "was-on-k8s", "--storage", sqlite_url, "--yes", **env)
    assert optional.exit_code == 0, optional.output
    assert "warning: the sweep's Kubernetes Jobs are not deleted: " in optional.stderr
    assert "deleted sweep was-on-k8s" in optional.stdout
    assert _studies(sqlite_url) == []


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- growing


def test_running_a_grown_spec_runs_only_the_new_indexes(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    spec = quadratic_spec("grower", trials=2)
    path = run_sweep(tmp_path, sqlite_url, spec)
    path.write_text(yaml.safe_dump({**spec, "trials": 4}, sort_keys=False))
    grown = invoke("run", str(path), "--storage", sqlite_url)
    assert grown.exit_code == 0, grown.output
    assert "grew the sweep from 2 to 4 indexes (new: 2-3)" in grown.stderr
    assert "this launch: 2 of 2 indexes finished" in grown.stderr
    status = json.loads(invoke("status", "grower", "--storage", sqlite_url, "--format",
                               "json").stdout)
    assert status["indexes"] == 4 and status["finished_indexes"] == 4
    assert status["trials_by_state"] == {"COMPLETE": 4}

    path.write_text(yaml.safe_dump({**spec, "trials": 4, "seed": 9}, sort_keys=False))
    changed = invoke("run", str(path), "--storage", sqlite_url)
    assert changed.exit_code == 2
    line = one_error_line(changed)
    assert "a different sweep named 'grower' already exists in this storage (seed differ)" \
        in line
    assert "`sweeper delete grower`" in line and "change `name:` in the spec" in line


# --------------------------------------------------------------------------- a spec for NAME


def _spec_with_storage(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A spec in tmp_path/specs whose storage: (a database next to it) is only in the spec."""
    (tmp_path / "specs").mkdir(exist_ok=True)
    url = f"sqlite:///{tmp_path / 'specs' / 'own.db'}"
    path = tmp_path / "specs" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(quadratic_spec(name, trials=2, storage=url),
                                   sort_keys=False))
    return path, url


def test_name_commands_take_the_spec_file_for_name_and_storage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate(tmp_path, monkeypatch)
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    path, _ = _spec_with_storage(tmp_path, "by-file")
    assert invoke("run", str(path)).exit_code == 0
    status = invoke("status", str(path), "--format", "json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["finished_indexes"] == 2
    best = invoke("best", str(path))
    assert best.exit_code == 0 and json.loads(best.stdout)["study"] == "by-file"
    export = invoke("export", str(path), "--format", "json")
    assert export.exit_code == 0 and len(json.loads(export.stdout)["trials"]) == 2
    resumed = invoke("resume", str(path))
    assert resumed.exit_code == 0, resumed.output
    assert "resuming: 2 of 2 indexes already finished" in resumed.stderr
    deleted = invoke("delete", str(path), "--yes")
    assert deleted.exit_code == 0 and "deleted sweep by-file" in deleted.stdout
    assert not (tmp_path / "sweeps.db").exists()  # the default storage was never touched


@pytest.mark.parametrize("command", ["status", "best", "export", "dashboard", "resume",
                                     "delete"])
def test_reading_a_missing_storage_creates_no_file(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    result = invoke(command, "some-sweep")
    assert result.exit_code == 2
    assert one_error_line(result) == (
        "error: no sweep named 'some-sweep': storage sqlite:///sweeps.db: the file "
        f"{tmp_path / 'sweeps.db'} does not exist")
    assert list(tmp_path.iterdir()) == []


def test_not_found_names_the_storage_and_lists_its_sweeps(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    storage = open_storage(storage_url)
    shown = storage_url.replace(PASSWORD, "***")
    empty = invoke("status", "digits", "--storage", storage_url)
    assert one_error_line(empty) == f"error: no sweep named 'digits' in {shown}: it has no sweeps"
    for name in ("digits-tpe", "other"):
        create_or_resume(storage, make_spec(name=name))
    result = invoke("best", "digits", "--storage", storage_url)
    assert result.exit_code == 2
    assert one_error_line(result) == (f"error: no sweep named 'digits' in {shown}; did you "
                                      "mean 'digits-tpe'? sweeps there: digits-tpe, other")
    assert PASSWORD not in result.output


def test_a_spec_file_that_is_not_there_or_is_invalid_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("status", "nope.yaml")
    assert result.exit_code == 2 and one_error_line(result) == "error: nope.yaml: no such file"
    (tmp_path / "bad.yml").write_text("name: bad\nmethod: grdi\n")
    result = invoke("status", "bad.yml")
    assert result.exit_code == 2 and one_error_line(result).startswith("error: bad.yml:2: method:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yml"]


@pytest.mark.parametrize("command", ["status", "best", "export", "dashboard", "logs", "cancel",
                                     "resume", "delete"])
def test_help_says_where_the_storage_comes_from(command: str) -> None:
    text = " ".join(invoke(command, "--help").stdout.split())
    assert "$SWEEPER_STORAGE, then the storage: of a spec file given as NAME" in text
    assert "spec file" in text.split("Options:")[0]


def test_console_script_status_from_a_spec_leaves_no_database_behind(tmp_path: Path) -> None:
    """The installed executable, as a user runs it: `sweeper status spec.yaml` of a sweep whose
    storage is only in the spec, from a directory with no database."""
    path, url = _spec_with_storage(tmp_path, "exe-spec")
    create_or_resume(open_storage(url), load_spec(path))
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SWEEPER_STORAGE"}
    proc = subprocess.run([str(SWEEPER), "status", str(path)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("exe-spec: 0/2 indexes finished; trials: waiting 2")
    proc = subprocess.run([str(SWEEPER), "status", "exe-spec"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: no sweep named 'exe-spec': storage sqlite:///sweeps.db:"
                                   f" the file {work / 'sweeps.db'} does not exist")
    assert list(work.iterdir()) == []
