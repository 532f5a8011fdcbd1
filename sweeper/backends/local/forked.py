"""Starting a local worker by forking ``sweeper run`` instead of exec'ing a new interpreter.

``sweeper run`` has already imported Optuna, SQLAlchemy and NumPy. A worker started as
``python -m trial_runner --serve`` imports them again: about half a second of CPU each, W of
them at once on a machine with fewer cores, before the first trial can start. A forked worker
starts with them loaded (the pages shared copy-on-write) and runs the same ``main`` the exec
path runs, after setting up what a fresh process would have: its own session, its
environment, stdin from /dev/null, stdout and stderr on its log, no other descriptor of the
parent, fresh logging and random state. The child then calls the runner's entry function,
named by a string (:data:`RUNNER_ENTRY`, ``trial_runner.main:main``): the orchestrator's own
code never imports the runner's.

Forking is safe only from a process with one thread and nothing a child must not inherit:
no gRPC channel or server (a ``grpc://`` storage; the local storage proxy therefore starts
after the workers are forked), no Prometheus server thread, no CUDA context, and a
client-server database: SQLite keeps each file's locks in per-process tables that a forked
child inherits and gets wrong, even on a new connection ("locking protocol").
:func:`fork_safe` checks that; otherwise, or with ``SWEEPER_WORKER_START=exec``, the local
backend execs workers as before.

The parent's database connections and other objects stay untouched in the child: it never
returns from :func:`fork_worker` (``os._exit``), its garbage collector never sees them
(``gc.freeze`` across the fork), and it closes its copies of their descriptors, so the
database sees each connection closed only when the parent closes it.

A worker for the parent's own storage also takes over a sweep the parent opened for it
instead of opening the storage and reading the sweep again: the parent's storage object with a
fresh, empty connection pool, its compiled statements, Optuna's state and the runner's study
already loaded. The backend builds that :class:`~sweeper.study.InheritedSweep` and the child
passes it to the entry function as an argument (``main(argv, inherited=...)``). The parent's
pool, with its connections, is kept referenced (never closed or collected) in the child until
it exits.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeper.study import InheritedSweep

#: ``SWEEPER_WORKER_START``: ``fork`` (the default where :func:`fork_safe` holds) or ``exec``.
ENV_WORKER_START = "SWEEPER_WORKER_START"
#: The process name (``/proc/PID/comm``, ``ps -o comm``) of a forked worker.
WORKER_NAME = b"sweeper-worker"
#: The runner module the exec path runs (``python -m trial_runner --serve``), and the function
#: (``MODULE:FUNCTION``, called with the arguments) a forked worker calls: the same ``main``.
RUNNER_MODULE = "trial_runner"
RUNNER_ENTRY = "trial_runner.main:main"
RUNNER_ARGS = ("--serve",)
_PR_SET_NAME = 15
_SERVER_SCHEMES = ("postgresql", "postgres", "mysql")


class ForkedProcess:
    """A forked worker, with the part of ``subprocess.Popen``'s interface the backend uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is gone
                self.returncode = 255
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired([RUNNER_MODULE, *RUNNER_ARGS], timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not yet reaped: the pid is still this worker's
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_safe(env: Mapping[str, str], storage_url: str) -> bool:
    """Whether workers for ``storage_url`` may be forked from this process now."""
    if env.get(ENV_WORKER_START, "fork").strip().lower() == "exec":
        return False
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return False
    if not storage_url.startswith(_SERVER_SCHEMES):
        return False  # SQLite (and grpc://, whose channel has threads)
    if "grpc" in sys.modules and _grpc_in_use():
        return False
    if threading.active_count() != 1:
        return False
    torch = sys.modules.get("torch")
    return not (torch is not None and torch.cuda.is_initialized())


def _grpc_in_use() -> bool:
    """gRPC starts its threads with the first channel or server; importing it is harmless,
    but after any of them a child may deadlock in it. Those threads are not Python's, so
    ``threading`` does not see them: the process's own thread count does."""
    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        return True


def fork_worker(env: Mapping[str, str], keep_fds: Sequence[int], log_path: Path,
                entry: str = RUNNER_ENTRY, args: Sequence[str] = RUNNER_ARGS, *,
                inherit: InheritedSweep | None = None) -> ForkedProcess:
    """Fork a worker that calls ``entry`` (``MODULE:FUNCTION``, the trial runner's ``main``)
    with ``args`` (``--serve``), its exit code the function's return value, with ``env`` as its
    whole environment, ``keep_fds`` (its pipes) open, and its output appended to ``log_path``.
    ``inherit``: the open sweep the worker may take over, passed to the function as
    ``inherited=`` (only where given: any ``FUNCTION(argv)`` can be the entry)."""
    module, _, function = entry.partition(":")
    _preload(module)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    gc.freeze()  # the child's collector never touches what the parent holds
    try:
        pid = os.fork()
    except OSError:
        gc.unfreeze()
        raise
    if pid:
        gc.unfreeze()
        return ForkedProcess(pid)
    code = 1
    try:
        # Held until os._exit: the parent's pool is never closed or collected here.
        _parent_pool = _take_over(inherit)
        code = _run_child(env, keep_fds, log_path, (module, function), args, inherit)
    except SystemExit as e:
        code = _exit_status(e.code)
    except BaseException:  # noqa: BLE001 - anything: report it in the log, never return
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _exit_status(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives: an int as it is, None 0, anything else 1."""
    if isinstance(code, int):
        return code
    return 0 if code is None else 1


def _take_over(inherit: InheritedSweep | None) -> Any:
    """In the child, first thing: the inherited storage gets a new, empty pool of its own.
    Returns the parent's pool (None: nothing inherited), which the caller keeps referenced
    until the child exits (its connections are the parent's; their descriptors are closed
    here)."""
    engine = getattr(inherit.sweep.storage, "engine", None) if inherit is not None else None
    if engine is None:
        return None
    parent_pool = engine.pool
    engine.pool = engine.pool.recreate()  # what Engine.dispose(close=False) does, kept here
    return parent_pool


#: Imported lazily by a worker: before its first index (the code snapshot's handling, with
#: tarfile and gzip: about 10 ms of CPU), and by its first trial (Optuna's samplers seed from
#: NumPy's RandomState). Once here rather than once per worker.
_WARM = ("trial_runner.code", "numpy.random")


@functools.cache
def _preload(module: str) -> None:
    """Import the entry's module (and :data:`_WARM`) here, once per process, so that every
    child finds them loaded. By name: the orchestrator's own code never imports the runner's."""
    for name in (module, *_WARM):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _run_child(env: Mapping[str, str], keep_fds: Sequence[int], log_path: Path,
               entry: tuple[str, str], args: Sequence[str],
               inherit: InheritedSweep | None) -> int:
    os.setsid()  # like start_new_session: Ctrl-C reaches only `sweeper run`
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _set_files(log_path, keep_fds)
    os.environ.clear()
    os.environ.update(env)
    # What the interpreter does with PYTHONPATH at start: its entries come first.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    _set_name(WORKER_NAME)
    _reseed()
    module, function = entry
    sys.argv = [module, *args]
    run = getattr(importlib.import_module(module), function)
    code = run(list(args)) if inherit is None else run(list(args), inherited=inherit)
    return code if isinstance(code, int) else 0


def _set_files(log_path: Path, keep_fds: Sequence[int]) -> None:
    """stdin /dev/null, stdout and stderr on the log, every other inherited descriptor but
    ``keep_fds`` closed; Python's streams and logging rebuilt on them."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    keep = {0, 1, 2, *keep_fds}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    old = {id(sys.stdout): 1, id(sys.stderr): 2, id(sys.__stdout__): 1, id(sys.__stderr__): 2}
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = _text_stream(1)
    sys.stderr = _text_stream(2)
    root = logging.getLogger()
    root.handlers.clear()  # the worker's basicConfig sets its own
    for logger in [root, *logging.Logger.manager.loggerDict.values()]:
        for h in getattr(logger, "handlers", []):
            if isinstance(h, logging.StreamHandler) and id(h.stream) in old:
                h.setStream(sys.stdout if old[id(h.stream)] == 1 else sys.stderr)


def _text_stream(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), line_buffering=True,
                            write_through=True)


def _set_name(name: bytes) -> None:
    """``/proc/PID/comm``: how ``ps`` and the tests tell a forked worker from its parent."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reseed() -> None:
    """Python's ``random`` reseeds itself after a fork; NumPy's global state does not."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
