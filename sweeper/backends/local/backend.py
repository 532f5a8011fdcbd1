"""Local backend: long-lived worker processes on this machine, at most ``parallelism`` at once.

Each worker is ``python -m trial_runner --serve`` (forked from ``sweeper run`` where that is
safe, see sweeper.backends.local.forked): it pays interpreter + torch start-up once and then runs
index after index handed to it over a pipe, with ``JOB_ID`` set per index and one GPU slot
(``CUDA_VISIBLE_DEVICES``) per worker. The parent retries failed indexes up to ``trial.retries``
times, fails the trials of workers that die or freeze, and on Ctrl-C stops
the workers so that their trials end FAIL (resumable by running the same command again).

This module sets a run up (logs, GPU slots, the proxy, the workers' environment); the run
itself, and its state, is a sweeper.backends.local.run.LocalRun built per ``run`` call.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeper import protocol
from sweeper.backends.base import (
    Cancelled,
    Deleted,
    Description,
    Holding,
    IndexLog,
    LogTail,
    RunResult,
    SweepRef,
    Tick,
    Write,
)
from sweeper.backends.local.forked import fork_safe
from sweeper.backends.local.gpus import detect_gpus, gpu_slots
from sweeper.backends.local.ops import file_log, follow_log, own_directories
from sweeper.backends.local.proxy import LocalProxy
from sweeper.backends.local.run import LocalRun, RunSettings
from sweeper.backends.local.worker import Launcher
from sweeper.gang import Gang
from sweeper.spec.registry import make_pruner, make_sampler
from sweeper.study import InheritedSweep, Sweep

#: Seconds between the first indexes of forked workers. Started together, W workers run
#: their trials in step: equal trials end together and all W reach the database and the
#: CPUs at the same moment, each waiting for the others (a 0.5 s trial's round cost 20 ms
#: at first, 10 ms once they had drifted apart; 8 workers, 2 cores). Spread out, they take
#: turns; the sweep ends (W - 1) * STAGGER_S later at most.
STAGGER_S = 0.01


def checkpoint_root() -> Path:
    """Where local workers keep checkpoints (each sweep under its state key): absolute, so
    that every worker and ``sweeper delete`` agree whatever their working directory."""
    return Path(os.environ.get(protocol.ENV_CHECKPOINT_DIR)
                or protocol.DEFAULT_CHECKPOINT_DIR).resolve()


class LocalBackend:
    name = "local"
    #: What one ``run`` call builds and runs; a subclass of LocalRun that notes when things
    #: happen (a benchmark's timings, a test's) goes here.
    run_type: type[LocalRun] = LocalRun

    def __init__(self, log_dir: Path, *, keyed: bool = False,
                 grace_period_s: float | None = None,
                 stop_timeout_s: float = 15.0, max_starting: int | None = None,
                 stagger_s: float = STAGGER_S,
                 proxy: bool | None = None, metrics: Any = None) -> None:
        #: ``keyed``: ``log_dir`` is the root under which each sweep logs in the directory of its
        #: identity (protocol.state_key: a new sweep under an old name starts a clean log).
        self._log_root = log_dir if keyed else None
        self.log_dir = log_dir
        #: Workers reach the study through an in-process storage proxy: True, False, or None
        #: (when it pays: sweeper.proxy.server.proxy_pays). A Prometheus registry in
        #: ``metrics`` turns it on: claim, tell and heartbeat metrics are observed there.
        self.proxy = proxy
        self.metrics = metrics
        self.grace_period_s = grace_period_s if grace_period_s is not None else \
            protocol.grace_period_s(os.environ)
        self.stop_timeout_s = stop_timeout_s
        #: Workers starting (importing, connecting) at once: W interpreters started together
        #: share the CPUs and all become ready late; in waves of one per core the first ones
        #: run trials while the rest start (on 2 cores and W=8: ~1 s sooner on average).
        self.max_starting = max(1, max_starting or os.cpu_count() or 1)
        self.stagger_s = stagger_s
        #: Whether the last run forked its workers (sweeper.backends.local.forked) or exec'd them.
        self.forked = False

    # ---------------------------------------------------------------- public

    def run(self, sweep: Sweep, indexes: Sequence[int], *, storage_url: str,
            tick: Tick) -> RunResult:
        todo = list(indexes)
        if not todo:
            return RunResult()
        if self._log_root is not None:
            self.log_dir = self._log_root / sweep.state_key
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._record_launch(sweep)
        n = min(sweep.spec.parallelism, len(todo))
        slots = gpu_slots(detect_gpus(), sweep.spec.trial.resources.gpu, n)
        proxy = self._plan_proxy(storage_url, n)
        inherit = InheritedSweep(storage_url, self._inheritable(sweep)) \
            if self.forked and proxy.url == storage_url else None
        launcher = Launcher(self._env(sweep, proxy.url, n), self.log_dir, tuple(slots), inherit)
        settings = RunSettings(self.grace_period_s, self.stop_timeout_s, self.max_starting,
                               self.stagger_s, fork=self.forked)
        return self.run_type(sweep, settings, launcher, proxy).run(todo, tick)

    def log_tail(self, sweep: Sweep, index: int, lines: int) -> LogTail:
        from sweeper.runlogs import last_lines, read_local_log

        log = read_local_log(self.log_dir, index)
        return LogTail(f"file {log.path}", last_lines(log.section.text, lines))

    def logs(self, ref: SweepRef, index: int, *, attempt: int | None,
             tail: int | None) -> IndexLog:
        """From the index's log file in :attr:`log_dir` (the sweep's own directory)."""
        return file_log(self.log_dir, index, attempt, tail)[0]

    def follow(self, ref: SweepRef, index: int, *, tail: int | None, write: Write,
               say: Write) -> None:
        follow_log(ref, self.log_dir, index, tail, write, say)

    def cancel(self, ref: SweepRef, *, wait_s: float) -> Cancelled:
        """Nothing runs detached here: a local sweep runs inside the ``sweeper run`` that
        started it, which Ctrl-C or SIGTERM stops (its running trials then end FAIL)."""
        return Cancelled((f"sweep {ref.name} runs on this machine only inside the `sweeper "
                          "run` that started it: stop that one (Ctrl-C, or SIGTERM)",))

    def holding(self, sweep: Sweep, *, required: bool) -> Holding:
        """The sweep's own directories here (logs, checkpoints); not named in the question
        (what a local launch leaves is the sweep's, nobody else's)."""
        return Holding(items=own_directories(sweep))

    def delete(self, sweep: Sweep, holding: Holding, *, wait_s: float,
               required: bool) -> Deleted:
        import shutil

        removed = []
        for what, path in holding.items:
            if Path(path).is_dir():
                shutil.rmtree(path)
                removed.append(f"removed the local {what} {path}")
        return Deleted(tuple(removed))

    def describe(self, sweep: Sweep, *, required: bool,
                 indexes: Sequence[int] = ()) -> Description:
        """Nothing: a local sweep runs only inside the command that runs it."""
        return Description()

    def _record_launch(self, sweep: Sweep) -> None:
        """Where this sweep ran and logged (``sweeper logs`` and ``resume`` read it); an
        earlier launch's cancel mark no longer applies."""
        for key, value in ((protocol.BACKEND_ATTR, self.name), (protocol.CANCELLED_ATTR, None),
                           (protocol.LOG_DIR_ATTR, str(self.log_dir.resolve())),
                           (protocol.CHECKPOINT_DIR_ATTR,
                            str(checkpoint_root() / sweep.state_key))):
            sweep.storage.set_study_user_attr(sweep.study_id, key, value)

    # ---------------------------------------------------------------- a run's set-up

    def _plan_proxy(self, storage_url: str, n_workers: int) -> LocalProxy:
        """The run's proxy (sweeper.backends.local.proxy), and whether its first workers are
        forked. Forking is decided here: gRPC's threads must not be inherited, so a proxy
        starts after the first workers are forked, and replacements for workers that die
        later are exec'd."""
        from sweeper.study.remote.client import proxy_pays

        wanted = self.proxy if self.proxy is not None else \
            self.metrics is not None or proxy_pays(storage_url, n_workers)
        self.forked = fork_safe(os.environ, storage_url)
        return LocalProxy.plan(storage_url, self.metrics, wanted=wanted, fork=self.forked)

    @staticmethod
    def _inheritable(sweep: Sweep) -> Sweep:
        """What a forked worker takes over (sweeper.study.InheritedSweep): a Sweep
        of its own on this process's storage, the runner's study already loaded in it (each
        worker would otherwise spend its first trial's queries and CPU on that)."""
        mine = Sweep(sweep.storage, sweep.study_id, sweep.spec)
        mine.runner_study(make_sampler(sweep.spec, 0), make_pruner(sweep.spec))
        return mine

    def _env(self, sweep: Sweep, storage_url: str, n_workers: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update({protocol.ENV_STORAGE: storage_url, protocol.ENV_STUDY: sweep.name,
                    protocol.ENV_LOG_DIR: str(self.log_dir), "PYTHONUNBUFFERED": "1",
                    protocol.ENV_CHECKPOINT_DIR: str(checkpoint_root()),
                    protocol.ENV_PARENT_PID: str(os.getpid())})
        code = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.CODE_ATTR)
        if isinstance(code, str) and sweep.spec.trial.code is not None:
            env[protocol.ENV_CODE] = code  # what each trial records (the code is on disk)
        else:
            env.pop(protocol.ENV_CODE, None)
        env.pop(protocol.ENV_CODE_STORE, None)
        if sweep.spec.trial.nodes > 1:  # each worker is node 0 of its gang (sweeper.gang)
            env.update(Gang(sweep.spec.trial.nodes, local=True).env())
        threads = str(max(1, (os.cpu_count() or 1) // n_workers))
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, threads)
        # The spec's directory first: relative paths in the spec resolve against it.
        base = sweep.spec.base_dir
        if base:
            env[protocol.ENV_SPEC_DIR] = base
        path = [base, os.getcwd(), *(env.get("PYTHONPATH") or "").split(os.pathsep)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in path if p))
        return env
