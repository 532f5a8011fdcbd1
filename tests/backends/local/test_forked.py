"""Forked local workers (sweeper.backends.local.forked): a forked worker starts like a fresh process
(its own environment, session, name, descriptors, streams and random state), the parent's
database connections are neither used nor held open by it, its exit and signals reach the
backend as ``Popen`` reports them, and a sweep on PostgreSQL runs on forked workers, also
behind the local proxy, which starts after them (SQLite and ``SWEEPER_WORKER_START=exec``: on
exec'd ones)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from sweeper.backends.local.forked import ForkedProcess, fork_worker

PROBE = "tests.support.forkprobe"
REPO = Path(__file__).resolve().parents[3]


def _probe(tmp_path: Path, name: str, env: dict[str, str], keep: tuple[int, ...] = (),
           *args: str) -> tuple[ForkedProcess, Path, Path]:
    out, log = tmp_path / f"{name}.json", tmp_path / f"{name}.log"
    env = {"PYTHONPATH": str(REPO), **env}
    return fork_worker(env, keep, log, f"{PROBE}:main", args=(str(out), *args)), out, log


def test_a_forked_worker_starts_like_a_fresh_process(tmp_path: Path) -> None:
    keep_r, keep_w = os.pipe()
    stray = os.open(tmp_path, os.O_RDONLY)  # a descriptor of the parent's the child must not get
    extra = tmp_path / "extra"
    try:
        proc, out, log = _probe(tmp_path, "p", {"ONLY": "this", "PROBE_EXIT": "3",
                                                "PYTHONPATH": f"{extra}{os.pathsep}{REPO}"},
                                (keep_r,))
        assert proc.wait(timeout=30) == 3
    finally:
        for fd in (keep_r, keep_w, stray):
            os.close(fd)
    state = json.loads(out.read_text())
    assert state["env"] == {"ONLY": "this", "PROBE_EXIT": "3",
                            "PYTHONPATH": f"{extra}{os.pathsep}{REPO}"}
    assert keep_r in state["fds"] and stray not in state["fds"] and keep_w not in state["fds"]
    assert len(state["fds"]) <= 5  # 0, 1, 2, the kept pipe, and the one listing /proc/self/fd
    assert state["comm"] == "sweeper-worker"
    assert state["session_leader"]  # Ctrl-C in the terminal reaches only `sweeper run`
    assert state["stdin"] == "/dev/null"
    assert state["argv"][1:] == [str(out)]
    assert state["sys_path_head"][0] == str(extra)  # PYTHONPATH first, as in a new interpreter
    text = log.read_text()
    assert "probe stdout" in text and "probe log line" in text


def test_forked_workers_do_not_share_random_state(tmp_path: Path) -> None:
    states = []
    for k in range(2):
        proc, out, _ = _probe(tmp_path, f"r{k}", {})
        assert proc.wait(timeout=30) == 0
        states.append(json.loads(out.read_text()))
    assert states[0]["numpy"] != states[1]["numpy"]
    assert states[0]["random"] != states[1]["random"]


def test_a_forked_worker_finds_the_runners_lazy_imports_loaded(tmp_path: Path) -> None:
    """What each worker would import for itself before its first trial (the code snapshot's
    handling, NumPy's random state) is imported once, by the parent, before it forks: in a
    fresh process, where nothing else imported them first."""
    out = tmp_path / "p.json"
    script = textwrap.dedent(f"""
        import sys
        from sweeper.backends.local.forked import fork_worker
        assert "trial_runner.code" not in sys.modules
        proc = fork_worker({{"PYTHONPATH": {str(REPO)!r}}}, (), {str(tmp_path / "p.log")!r},
                           "{PROBE}:main", args=({str(out)!r},))
        sys.exit(proc.wait(timeout=30))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["loaded"] == ["trial_runner.code", "numpy.random"]


def test_signals_and_timeouts_are_reported_as_popen_does(tmp_path: Path) -> None:
    proc, _, _ = _probe(tmp_path, "s", {}, (), "sleep")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.3)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert proc.poll() == -signal.SIGTERM
    proc.kill()  # reaped: nothing is signalled (the pid may belong to another process now)
    assert proc.returncode == -signal.SIGTERM


def test_an_exception_in_the_child_is_logged_and_exits_1(tmp_path: Path) -> None:
    log = tmp_path / "bad.log"
    proc = fork_worker({}, (), log, "tests.support.no_such_module:main", args=())
    assert proc.wait(timeout=30) == 1
    assert "No module named 'tests.support.no_such_module'" in log.read_text()


def test_the_parents_connections_are_neither_used_nor_inherited(tmp_path: Path,
                                                                pg_url: str) -> None:
    parent = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with parent.connect() as conn:
            pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            sock = conn.connection.dbapi_connection.fileno()  # type: ignore[union-attr]
        # The pooled connection is idle in the parent when the worker is forked.
        proc, out, _ = _probe(tmp_path, "c", {})
        assert proc.wait(timeout=30) == 0
        assert sock not in json.loads(out.read_text())["fds"]
        with parent.connect() as conn:  # the child left it as it was: same backend, usable
            assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == pid
    finally:
        parent.dispose()


def _fresh(code: str, **env: str) -> list[str]:
    """``code`` in a new interpreter (this one may hold gRPC threads of earlier tests, which
    rightly turn forking off): its printed lines."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), **env},
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_fork_safe_only_for_a_server_database_and_one_thread() -> None:
    got = _fresh("""
        import threading
        from sweeper.backends.local.forked import fork_safe
        pg = "postgresql://u:p@db/sweeps"
        print(fork_safe({}, pg), fork_safe({"SWEEPER_WORKER_START": "exec"}, pg),
              fork_safe({}, "sqlite:///sweeps.db"), fork_safe({}, "grpc://proxy:13000"))
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        print(fork_safe({}, pg))
        stop.set()
        t.join()
        print(fork_safe({}, pg))
        from sweeper.proxy.server import start_local_proxy  # gRPC starts its own threads
        start_local_proxy("sqlite:///:memory:").stop()
        print(fork_safe({}, pg))
    """)
    assert got == ["True", "False", "False", "False", "False", "True", "False"]


@pytest.mark.parametrize(("start", "url", "proxy", "forked"), [
    ("fork", "postgresql", False, 1.0),
    # The proxy starts after the workers are forked, on a port reserved for it.
    ("fork", "postgresql", True, 1.0),
    ("exec", "postgresql", False, 0.0),  # SWEEPER_WORKER_START=exec
    ("fork", "sqlite", False, 0.0),  # SQLite: never forked
])
def test_a_sweep_runs_on_forked_workers_where_that_is_safe(
        start: str, url: str, proxy: bool, forked: float, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    storage_url = request.getfixturevalue("pg_url") if url == "postgresql" else \
        f"sqlite:///{tmp_path / 'sweeps.db'}"
    got = _fresh("""
        import os
        from pathlib import Path
        from sweeper.backends.local.backend import LocalBackend
        from sweeper.study import create_or_resume, open_storage
        from tests.support.helpers import make_spec
        url, tmp = os.environ["TEST_URL"], Path(os.environ["TEST_TMP"])
        spec = make_spec(name="forked", parallelism=2,
                         trial={"entrypoint": "tests.support.forkprobe:worker_name",
                                "fixed": {}, "retries": 0},
                         parameters={"x": {"type": "float", "values": [0.0, 1.0, 2.0, 3.0]}})
        sweep, _ = create_or_resume(open_storage(url), spec)
        # Seen by a worker only on a storage object it took over from this process.
        setattr(sweep.storage, "forkprobe_parent", os.getpid())

        def session():  # the database session behind the parent's pooled connection
            if not url.startswith("postgresql"):
                return 0
            with sweep.storage.engine.connect() as conn:
                return conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()

        before = session()
        backend = LocalBackend(tmp / "logs", proxy=os.environ["TEST_PROXY"] == "1")
        result = backend.run(sweep, range(4), storage_url=url, tick=lambda: None)
        print(backend.forked, *result.finished)
        # The parent's own storage still works after its workers were forked (taking over
        # the same storage object) and exited, on the same connection.
        print(*sorted(f"{t.state.name}:{t.value}" for t in sweep.study().get_trials()))
        print(session() == before)
    """, TEST_URL=storage_url, TEST_TMP=str(tmp_path), SWEEPER_WORKER_START=start,
        TEST_PROXY=str(int(proxy)),
        CUDA_VISIBLE_DEVICES="", SWEEPER_CHECKPOINT_DIR=str(tmp_path / "ckpt"))
    # Forked for the parent's own storage: the worker took over the parent's open sweep.
    value = forked + 10.0 * proxy + 100.0 * (forked == 1.0 and not proxy)
    assert got == [str(forked == 1.0), "0", "1", "2", "3", *[f"COMPLETE:{value}"] * 4, "True"]


def test_forked_workers_get_their_first_indexes_spread_out(tmp_path: Path, pg_url: str) -> None:
    """Workers started together would run their equal trials in step, all reaching the
    database at the same moment: worker k gets its first index no sooner than k stagger
    intervals after the workers were forked (its later ones as soon as it is free)."""
    got = _fresh("""
        import os, time
        from pathlib import Path
        from sweeper.backends.local.backend import LocalBackend
        from sweeper.backends.local.run import LocalRun
        from sweeper.study import create_or_resume, open_storage
        from tests.support.helpers import make_spec
        url, tmp = os.environ["TEST_URL"], Path(os.environ["TEST_TMP"])
        spec = make_spec(name="stagger", parallelism=3,
                         trial={"entrypoint": "trial_runner.examples.synthetic:sleep",
                                "fixed": {"duration": 1.0}, "retries": 0},
                         parameters={"x": {"type": "float", "values": [0.0, 1.0, 2.0]}})
        sweep, _ = create_or_resume(open_storage(url), spec)
        handed = {}

        class Noted(LocalRun):
            def start_first(self):
                super().start_first()
                handed["start"] = time.monotonic()  # just after the forks

            def dispatch(self, w, index):
                handed.setdefault(w.slot, time.monotonic())
                return super().dispatch(w, index)

        backend = LocalBackend(tmp / "logs", proxy=False, stagger_s=0.4)
        backend.run_type = Noted
        result = backend.run(sweep, range(3), storage_url=url, tick=lambda: None)
        print(backend.forked, *result.finished)
        print(*(round(handed[k] - handed["start"], 3) for k in range(3)))
    """, TEST_URL=pg_url, TEST_TMP=str(tmp_path), CUDA_VISIBLE_DEVICES="",
        SWEEPER_CHECKPOINT_DIR=str(tmp_path / "ckpt"))
    assert got[:4] == ["True", "0", "1", "2"]
    firsts = [float(x) for x in got[4:]]
    assert firsts[1] >= 0.4 - 0.01 and firsts[2] >= 0.8 - 0.01, firsts  # never sooner
