"""``python -m trial_runner``: what a pod (or a local worker) runs.

Configuration comes from the environment, never argv (the storage URL holds a password):
  SWEEPER_STORAGE   storage URL (in Kubernetes: from a Secret via secretKeyRef, or the
                    storage proxy's grpc://host:port, which holds no password)
  SWEEPER_STUDY     sweep name
  JOB_ID            the index (fallback JOB_COMPLETION_INDEX, set by Indexed Jobs)
  SWEEPER_INDEXES_PER_POD  a pod works through indexes JOB_ID*N .. JOB_ID*N+N-1 in turn
  SWEEPER_INDEX_MAP comma-separated indexes: JOB_ID k runs the k-th (sparse resume Jobs)
  SWEEPER_SPEC_FILE the normalised spec (the ConfigMap NAME-spec): creates the sweep if absent
``--serve`` is the local backend's long-lived worker: it reads indexes from a pipe and runs
them one after another, so many short trials pay Python + torch start-up once per worker.
A worker the local backend forks from `sweeper run` calls :func:`main` with the sweep
its parent had open (``inherited``), which it takes over instead of opening it again.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import Any

from sweeper import messages, protocol
from sweeper.entrypoint import load_entrypoint
from sweeper.errors import (
    ArtifactError,
    CodeError,
    SpecError,
    StorageError,
    StorageUnavailableError,
)
from sweeper.gang import Gang, gang_from_env
from sweeper.spec import SweepSpec
from sweeper.study import InheritedSweep, Sweep, open_storage
from trial_runner import beside
from trial_runner.ahead import Ahead
from trial_runner.chain import run_chain
from trial_runner.commands import Commands
from trial_runner.context import TrialContext
from trial_runner.gang import run_slot
from trial_runner.outcome import Interrupted, Outcome, RunnerSettings
from trial_runner.promotion import run_scheduled
from trial_runner.runner import release_taken_ahead
from trial_runner.startup import open_sweep, read_spec_file

logger = logging.getLogger("trial_runner")


def load_objective(spec: SweepSpec) -> Callable[[TrialContext], Any]:
    """The trial's objective; relative paths resolve against the spec file's directory when
    the local backend names it (``SWEEPER_SPEC_DIR``), else against the working directory."""
    base_dir = os.environ.get(protocol.ENV_SPEC_DIR) or None
    torchrun = spec.trial.launcher == "torchrun"
    if spec.trial.command is not None:
        from sweeper.spec.paths import resolve_command
        from trial_runner.command import command_objective

        return command_objective(resolve_command(spec.trial.command, base_dir),
                                 spec.trial.timeout, spec.trial.metrics,
                                 spec.trial.ranks if torchrun else None)
    assert spec.trial.entrypoint is not None
    objective = load_entrypoint(spec.trial.entrypoint, source=spec.source, base_dir=base_dir)
    if not torchrun:
        return objective
    from trial_runner.launcher import run_ranks

    gang = gang_from_env(os.environ) if spec.trial.nodes > 1 else None
    # Imported here too: a bad entrypoint is a configuration error before any rank starts.
    return lambda ctx: run_ranks(ctx, spec, gang)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    _exit_by_deadline(signum)
    raise Interrupted(signum)


_deadline_armed = threading.Event()


def _exit_by_deadline(signum: int) -> None:
    """After SIGTERM the pod has ``terminationGracePeriodSeconds`` before SIGKILL: the runner
    fails its trial (resumable) in that time, and if that hangs (a database that is down) it
    exits on its own shortly before the kill, with the signal's exit code."""
    if _deadline_armed.is_set():
        return
    _deadline_armed.set()
    grace = protocol.env_float(os.environ, protocol.ENV_TERMINATION_GRACE_PERIOD,
                               protocol.DEFAULT_TERMINATION_GRACE_PERIOD_S)
    deadline = max(0.5, grace - min(5.0, grace * 0.2))

    def expire() -> None:
        logger.error("still stopping %.0fs after %s; exiting before the grace period ends",
                     deadline, signal.Signals(signum).name)
        logging.shutdown()
        os._exit(protocol.EXIT_SIGNAL_BASE + signum)

    timer = threading.Timer(deadline, expire)
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None, *, inherited: InheritedSweep | None = None) -> int:
    """The runner; ``inherited``: an open sweep handed over by the process that forked this
    one (sweeper.study.InheritedSweep), taken over if it is the one this runner must open.
    In the split pod of a command trial (:mod:`trial_runner.beside`) the shim in the user's
    container ends with the code the runner ends with, and the runner, a sidecar, waits for
    the kubelet to stop it."""
    exchange = beside.current()
    if exchange is None:
        return _main(argv, inherited)
    if exchange.recover():  # restarted after it had given the shim its exit code
        beside.wait_for_the_end(exchange)
        return protocol.EXIT_OK
    try:
        code = _main(argv, inherited)
    except BaseException:  # a crash: the trial's container fails and the Job retries the pod
        exchange.finish(protocol.EXIT_RETRY)  # (restarted, this sidecar then only waits)
        raise
    exchange.finish(code)
    if not _deadline_armed.is_set():  # else the kubelet is stopping this sidecar already
        beside.wait_for_the_end(exchange)
    return protocol.EXIT_OK


def _main(argv: list[str] | None, inherited: InheritedSweep | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trial_runner", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", help="sweep name (default: $SWEEPER_STUDY)")
    parser.add_argument("--index", type=int, help="run this index (default: from $JOB_ID)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get(protocol.ENV_LOG_LEVEL, "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    name = args.study or os.environ.get(protocol.ENV_STUDY)
    if not name:
        logger.error("no sweep given: set SWEEPER_STUDY or pass --study")
        return protocol.EXIT_CONFIG
    try:
        gang = gang_from_env(os.environ)
    except ValueError as e:
        logger.error("%s", e)
        return protocol.EXIT_CONFIG
    if gang is not None and not gang.leader:
        return _follow(name, gang)
    url = os.environ.get(protocol.ENV_STORAGE, protocol.DEFAULT_STORAGE)
    sweep = _taken_over(inherited, url, name)
    try:
        storage = sweep.storage if sweep is not None else open_storage(
            url, connect_deadline_s=protocol.env_float(os.environ, protocol.ENV_CONNECT_DEADLINE,
                                                       protocol.DEFAULT_CONNECT_DEADLINE_S),
            prepared=True)
    except StorageError as e:
        logger.error("%s", e)
        return protocol.EXIT_RETRY  # the database may come back; the Job retries the pod
    ready = _sweep_and_objective(sweep, storage, name, url)
    if isinstance(ready, int):
        return ready
    sweep, objective = ready
    settings = RunnerSettings.from_env()
    signal.signal(signal.SIGTERM, _raise_interrupted)
    signal.signal(signal.SIGINT, _raise_interrupted)

    if args.serve:
        try:
            return serve(sweep, objective, settings)
        finally:
            storage.close()  # close connections cleanly: __main__ skips the final GC
    if gang is not None and not gang.local and args.index is None:
        try:
            parts = PodLogParts()
            return run_slot(sweep, gang, objective, settings, parts.ended, parts.started)
        except Interrupted as e:
            logger.error("interrupted by %s; the trial is marked FAIL and will be retried", e)
            return protocol.EXIT_SIGNAL_BASE + e.signum
        finally:
            storage.close()
    return _run_indexes(sweep, storage, args.index, objective, settings)


def _run_indexes(sweep: Sweep, storage: Any, only: int | None,
                 objective: Callable[[TrialContext], Any], settings: RunnerSettings) -> int:
    """The indexes this process runs (``--index``, else from the environment), one after the
    other; the storage is closed once they ran."""
    try:
        indexes = [only] if only is not None else \
            protocol.job_indexes_from_env(os.environ, sweep.spec.trials)
    except ValueError as e:
        logger.error("%s", e)
        storage.close()
        return protocol.EXIT_CONFIG
    codes = []
    try:
        exchange = beside.current()
        if exchange is not None:
            exchange.wait_ready()  # the user's container is up: nothing is claimed before
        parts = PodLogParts()
        if only is None and os.environ.get(protocol.ENV_INDEX_STRIDE):
            return run_chain(sweep, indexes, objective, settings, trial_hook=parts.started,
                             log=parts.ended, on_index=_set_job_id)
        for index in indexes:
            os.environ[protocol.ENV_JOB_ID] = str(index)
            outcome = run_scheduled(sweep, index, objective, settings,
                                    trial_hook=parts.started, log=parts.ended)
            codes.append(outcome.exit_code)
    except Interrupted as e:
        logger.error("interrupted by %s; the trial is marked FAIL and will be retried", e)
        return protocol.EXIT_SIGNAL_BASE + e.signum
    finally:
        storage.close()
    return protocol.combine_exit_codes(codes)


def _set_job_id(index: int) -> None:
    os.environ[protocol.ENV_JOB_ID] = str(index)


def _exit_code_of(e: SpecError | StorageError) -> int:
    """A storage that stayed unreachable may come back (retryable); a spec or sweep that is
    wrong will not (configuration error)."""
    return protocol.EXIT_RETRY if isinstance(e, StorageUnavailableError) else \
        protocol.EXIT_CONFIG


def _sweep_and_objective(sweep: Sweep | None, storage: Any, name: str, url: str
                         ) -> tuple[Sweep, Callable[[TrialContext], Any]] | int:
    """The sweep and its objective, imported from the pod's code snapshot
    (trial_runner.code) when it has one; else the exit code: no sweep, a bad entrypoint, a
    missing or corrupted snapshot is a configuration error, a store that did not answer (or
    stayed unreachable) is retried."""
    from trial_runner.code import enter_code

    try:
        sweep = sweep or open_sweep(storage, name, os.environ)
    except (SpecError, StorageError) as e:
        logger.error("%s", e)
        return _exit_code_of(e)
    try:
        enter_code(os.environ, sweep.spec, storage, sweep.study_id, url)
    except CodeError as e:
        logger.error("%s", e)
        return protocol.EXIT_CONFIG
    except (ArtifactError, StorageError) as e:
        logger.error("%s", e)
        return protocol.EXIT_RETRY
    try:
        return sweep, _with_fixed_paths(load_objective(sweep.spec), sweep.spec)
    except (SpecError, StorageError) as e:
        logger.error("%s", e)
        return _exit_code_of(e)


def _taken_over(inherited: InheritedSweep | None, url: str, name: str) -> Sweep | None:
    """A local worker forked from `sweeper run` takes over its open sweep (warm, no queries);
    never with a spec file (the runner may have to create the sweep from it)."""
    if inherited is None or protocol.ENV_SPEC_FILE in os.environ:
        return None
    return inherited.sweep_for(url, name)


def _follow(name: str, gang: Gang) -> int:
    """A follower node of a gang: the spec from the file every pod mounts (no database)."""
    from trial_runner.gang import follow

    path = os.environ.get(protocol.ENV_SPEC_FILE)
    if not path:
        logger.error("node %d of sweep %s: %s is not set (the follower reads the spec from "
                     "it)", gang.node_rank, name, protocol.ENV_SPEC_FILE)
        return protocol.EXIT_CONFIG
    try:
        spec = read_spec_file(path)
    except SpecError as e:
        logger.error("%s", e)
        return protocol.EXIT_CONFIG
    code = _follower_code(spec)
    if code is not None:
        return code
    signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        return follow(spec, gang)
    except Interrupted as e:
        return protocol.EXIT_SIGNAL_BASE + e.signum


def _follower_code(spec: SweepSpec) -> int | None:
    """Enter the pod's code snapshot, as node 0's runner does, so that the follower's ranks
    import the trial's module from it (the only time a follower opens the storage: a snapshot
    may be kept in the study); None when done or there is none, else the exit code."""
    from trial_runner.code import code_of, enter_code

    if code_of(os.environ) is None:
        return None
    url = os.environ.get(protocol.ENV_STORAGE, protocol.DEFAULT_STORAGE)
    try:
        storage = open_storage(url, connect_deadline_s=protocol.env_float(
            os.environ, protocol.ENV_CONNECT_DEADLINE, protocol.DEFAULT_CONNECT_DEADLINE_S),
            prepared=True)
    except StorageError as e:
        logger.error("%s", e)
        return protocol.EXIT_RETRY
    try:
        enter_code(os.environ, spec, storage, storage.get_study_id_from_name(spec.name), url)
    except CodeError as e:
        logger.error("%s", e)
        return protocol.EXIT_CONFIG
    except (ArtifactError, StorageError, KeyError) as e:
        logger.error("the code snapshot of sweep %s: %s", spec.name, e)
        return protocol.EXIT_RETRY
    finally:
        storage.close()
    return None


class PodLogParts:
    """A pod's runner cuts its log into its indexes' parts: a header before each attempt (or
    promoted segment), the outcome's line and an end line after it (``sweeper logs`` shows
    one index's parts of a pod that ran several: an open-ended sweep's slot, a promoter)."""

    def __init__(self) -> None:
        self._open: protocol.LogHeader | None = None  # the part begun, not yet ended

    def started(self, trial_id: int, header: protocol.LogHeader) -> None:
        """The trial hook: the trial's ``JOB_ID`` (a promoted trial's own index, not this
        pod's) and its log header."""
        os.environ[protocol.ENV_JOB_ID] = str(header.index)
        _write_log_header(header)
        self._open = header

    def ended(self, outcome: Outcome) -> None:
        """The outcome's line, then the end line of the part it ends (none for an index that
        ran nothing: already finished, not started). Both on stderr: the container runtime
        reads stdout and stderr apart, so only lines of one stream keep their order in the
        pod's log."""
        _log_outcome(outcome)
        part, self._open = self._open, None
        if part is not None and part.index == outcome.index:
            sys.stdout.flush()
            sys.stderr.write(protocol.encode_log_end(part))
            sys.stderr.flush()


def _log_outcome(outcome: Outcome) -> None:
    level = logging.INFO if outcome.exit_code == protocol.EXIT_OK else logging.ERROR
    logger.log(level, "%s", outcome.message)


def serve(sweep: Sweep, objective: Callable[[TrialContext], Any],
          settings: RunnerSettings) -> int:
    """Worker loop for the local backend: ``run I`` lines in, ``start``/``done`` lines out, on
    two inherited pipes; each index's output goes to its own log file, a promoted trial's
    (``scheduler:``) to its own index's file too, from its header to its outcome's line. What
    comes between them (looking for promotions, the sweep's end) goes to the worker's log."""
    if protocol.ENV_PARENT_PID in os.environ:
        _exit_with_parent(int(os.environ[protocol.ENV_PARENT_PID]))
    commands = Commands(int(os.environ[protocol.ENV_CMD_FD]))
    settings = replace(settings, ahead=Ahead(commands.next_index))
    res = os.fdopen(int(os.environ[protocol.ENV_RESULT_FD]), "w", buffering=1)
    log_dir = os.environ.get(protocol.ENV_LOG_DIR)
    own_log = os.dup(1)  # the worker's log (worker-N.log)

    def send(msg: messages.Message) -> None:
        res.write(messages.encode_message(msg))

    current: list[int] = []  # the index whose log has the output now (empty: the worker's)

    def output_to(index: int) -> None:
        if log_dir and current != [index]:  # a trial's header finds its index's log open
            _redirect_output(os.path.join(log_dir, protocol.index_log_name(index)))
            current[:] = [index]

    def to_own_log() -> None:
        _redirect_output(own_log)
        current.clear()

    send(messages.Ready())
    try:
        while isinstance(msg := commands.next(), messages.Run):
            index = msg.index
            os.environ[protocol.ENV_JOB_ID] = str(index)
            output_to(index)

            def started(trial_id: int, header: protocol.LogHeader, index: int = index) -> None:
                output_to(header.index)  # a promoted trial's too: its index keeps its log
                _write_log_header(header)
                send(messages.Start(index, trial_id, header.trial_number))

            def ended(outcome: Outcome) -> None:
                _log_outcome(outcome)  # the last line of the trial's part of its index log
                to_own_log()  # what comes until the next header is the worker's

            outcome = run_scheduled(sweep, index, objective, settings, trial_hook=started,
                                    log=ended)
            to_own_log()
            if outcome.exit_code == protocol.EXIT_CONFIG:  # the reason first: it stops the run
                send(messages.Error(outcome.message))
            send(messages.Done(index, outcome.exit_code, outcome.state.value,
                               outcome.trial_number))
    except Interrupted as e:
        release_taken_ahead(sweep, settings, e)
        return protocol.EXIT_SIGNAL_BASE + e.signum
    return protocol.EXIT_OK


def _exit_with_parent(parent_pid: int) -> None:
    """Linux: SIGINT this worker when the `sweeper run` that started it dies, even by SIGKILL,
    so no orphan keeps a trial RUNNING (its handler marks the trial FAIL, resumable). SIGINT,
    sweeper's own stop: a SIGTERM is preemption from outside."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGINT)


def _write_log_header(header: protocol.LogHeader) -> None:
    """The line that starts an attempt's (or a promoted segment's) part of the log
    (``sweeper logs --attempt``)."""
    sys.stderr.flush()
    sys.stdout.write(protocol.encode_log_header(header))
    sys.stdout.flush()


def _redirect_output(target: str | int) -> None:
    """stdout and stderr (the descriptors: the user's subprocesses inherit them) to the file
    at path ``target``, appended to, or to the open descriptor ``target``."""
    sys.stdout.flush()
    sys.stderr.flush()
    if isinstance(target, int):
        os.dup2(target, 1)
        os.dup2(target, 2)
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _with_fixed_paths(objective: Callable[[TrialContext], Any],
                      spec: SweepSpec) -> Callable[[TrialContext], Any]:
    """The objective, given ``trial.fixed`` values that name files next to the spec as
    absolute paths (the local backend names its directory, ``SWEEPER_SPEC_DIR``), as the
    command's own paths are (:mod:`sweeper.spec.paths`); the sweep record keeps them as
    written."""
    from sweeper.spec.paths import resolve_fixed

    resolved = resolve_fixed(spec.trial.fixed, os.environ.get(protocol.ENV_SPEC_DIR) or None)
    if not resolved:
        return objective

    def run(ctx: TrialContext) -> Any:
        ctx.params.update(resolved)
        return objective(ctx)

    return run
