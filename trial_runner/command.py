"""``trial.command`` trials: run any program (someone else's training script) as a trial.

The argv gets ``{param}`` placeholders filled in (never through a shell); the params are also
in the environment (``SWEEPER_PARAMS`` JSON, ``SWEEPER_PARAMS_FILE``). Metrics come from the
program's stdout as ``name=value`` / ``name: value`` pairs (Katib's StdOut format; a line with
``step=N`` is an intermediate report), or the spec's ``trial.metrics`` (a regex for stdout
lines, or a JSON-lines file; see :mod:`trial_runner.metrics`), or the program's ``wandb.log``
calls (``trial.metrics.wandb``, :mod:`trial_runner.wandb_bridge`; in the runner's own
container only: a split pod's user image does not have the bridge), and/or a JSON object
written to ``$SWEEPER_METRICS_FILE``.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from sweeper import protocol
from sweeper.spec import MetricsSpec
from trial_runner import beside
from trial_runner.beside import RemoteProgram
from trial_runner.context import InvalidResult, ProgramFailed, TrialContext, TrialTimeout
from trial_runner.metrics import JsonLinesTail, Metrics, parse_metric_line
from trial_runner.processes import StderrTee, die_with_parent, terminate
from trial_runner.wandb_bridge import wandb_env

#: Environment variables never passed on to the user's program (the storage URL has a password).
_SECRET_ENV = protocol.SECRET_ENV


def render_argv(template: Sequence[str], values: dict[str, Any]) -> list[str]:
    """Fill ``{name}`` placeholders in each argv element; the result is passed to exec as is."""
    return [arg.format_map(values) for arg in template]


def command_objective(template: Sequence[str], timeout_s: float | None,
                      metrics: MetricsSpec | None = None, ranks: int | None = None
                      ) -> Callable[[TrialContext], dict[str, float]]:
    """``ranks``: run the program under ``torchrun --nproc_per_node RANKS`` (rank 0's stdout
    carries the metrics)."""
    def objective(ctx: TrialContext) -> dict[str, float]:
        return run_command(ctx, template, timeout_s, metrics or MetricsSpec(), ranks)

    return objective


def run_command(ctx: TrialContext, template: Sequence[str], timeout_s: float | None,
                metrics: MetricsSpec | None = None, ranks: int | None = None
                ) -> dict[str, float]:
    how = metrics or MetricsSpec()
    values = {**ctx.params, "index": ctx.index, "trial_number": ctx.trial_number,
              "checkpoint_dir": str(ctx.checkpoint_dir)}
    argv = render_argv(template, values)
    if ranks is not None:
        from trial_runner.launcher import torchrun_argv

        argv = torchrun_argv(ranks, "--no-python", sys.executable, "-c", _RANK_FILES, *argv,
                             rank0_output=True)
    exchange = beside.current()
    if exchange is not None:  # the split pod: the shim in the user's container runs it
        return _run_in(exchange.workdir(), ctx, argv, values, timeout_s, how)
    with tempfile.TemporaryDirectory(prefix=f"sweeper-trial-{ctx.trial_number}-") as workdir:
        return _run_in(Path(workdir), ctx, argv, values, timeout_s, how)


#: Under torchrun, ranks other than 0 get their own ``$SWEEPER_METRICS_FILE`` (rank 0's is the
#: one read, as its stdout is the one followed), then the program replaces this shim.
_RANK_FILES = (
    f"import os, sys; r = os.environ.get('RANK', '0'); k = {protocol.ENV_METRICS_FILE!r}\n"
    "if r != '0' and k in os.environ: os.environ[k] += '.rank' + r\n"
    "os.execvp(sys.argv[1], sys.argv[1:])")


def _run_in(workdir: Path, ctx: TrialContext, argv: list[str], values: dict[str, Any],
            timeout_s: float | None, how: MetricsSpec) -> dict[str, float]:
    seen = Metrics(lambda step, m: _report(ctx, step, m))
    fmt = re.compile(how.format) if how.format is not None else None
    followed = _followed_file(workdir, how, values)
    tail = JsonLinesTail(followed, seen, lambda: stop(), fmt) if followed is not None else None
    params_file = workdir / "params.json"
    params_file.write_text(json.dumps(ctx.params))
    metrics_file = workdir / "metrics.json"
    ctx.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    wandb = None if how.wandb is None else \
        _WandbEnv(ctx.params, how.wandb, workdir / WANDB_LOG_FILE)
    proc, stop = _start(argv, trial_vars(ctx, params_file, metrics_file), wandb)
    assert proc.stderr is not None
    stderr = StderrTee(proc.stderr)
    if tail is not None:
        tail.start()

    timed_out = threading.Event()
    timer = _expire_after(stop, timeout_s, timed_out)
    last: deque[str] = deque(maxlen=3)
    try:
        # Only a trial.metrics.file replaces stdout: a W&B program's name=value lines count.
        _follow(proc, None if how.file is not None else seen, fmt, last, stop)
        code = proc.wait()
    except BaseException:
        stop()
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if tail is not None:
            tail.finish()
    sys.stdout.flush()
    if timed_out.is_set():
        raise TrialTimeout(f"timed out after {timeout_s:g}s (trial.timeout)")
    if seen.pruned:
        raise optuna.TrialPruned()
    if code != 0:
        why = stderr.reason()
        raise ProgramFailed(f"the program exited with code {code}" + (f": {why}" if why else ""))
    return _result(ctx, {**seen.final, **_metrics_file(metrics_file)}, how, list(last))


def _result(ctx: TrialContext, final: dict[str, Any], how: MetricsSpec,
            last: list[str]) -> dict[str, float]:
    """The trial's metrics: every objective metric must be there; NaN only for those."""
    missing = [m for m in ctx.objective_metrics if m not in final]
    if missing:
        raise InvalidResult(_no_metric(missing[0], how, last))
    return {k: v for k, v in final.items() if not (isinstance(v, float) and math.isnan(v))
            or k in ctx.objective_metrics}


#: Where a W&B program's ``wandb.log`` calls go, in the trial's scratch directory.
WANDB_LOG_FILE = "wandb-log.jsonl"


def _followed_file(workdir: Path, how: MetricsSpec, values: dict[str, Any]) -> Path | None:
    """The file whose lines are the metrics, followed while the program runs (None: stdout)."""
    if how.wandb is not None:
        return workdir / WANDB_LOG_FILE
    return Path(how.file.format_map(values)) if how.file is not None else None


@dataclass(frozen=True)
class _WandbEnv:
    """What a W&B program's environment gets (:mod:`trial_runner.wandb_bridge`)."""

    params: dict[str, Any]
    names: tuple[tuple[str, str], ...]  # trial.metrics.wandb: (param, W&B key)
    log: Path

    def of(self, env: dict[str, str]) -> dict[str, str]:
        return wandb_env(env, self.params, self.names, self.log)


def _start(argv: list[str], trial: dict[str, str], wandb: _WandbEnv | None = None
           ) -> tuple[subprocess.Popen[str] | RemoteProgram, Callable[[], None]]:
    """Start the program, here (a child of the runner, with the runner's environment less its
    secrets, and for a W&B program the bridge) or, in the split pod, in the user's container
    (with that container's environment); it and what stops it."""
    exchange = beside.current()
    if exchange is not None:
        remote = exchange.start(argv, trial)
        return remote, remote.stop
    env = {k: v for k, v in os.environ.items() if k not in _SECRET_ENV}
    env.update(trial)
    if wandb is not None:
        env.update(wandb.of(env))
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                text=True, bufsize=1, errors="replace",
                                preexec_fn=die_with_parent)
    except OSError as e:
        raise ProgramFailed(f"cannot start {argv[0]!r}: {e.strerror}") from None
    return proc, lambda: terminate(proc)


def trial_vars(ctx: TrialContext, params_file: Path, metrics_file: Path) -> dict[str, str]:
    """What the program's environment has of the trial (its params, its files)."""
    env = {
        protocol.ENV_PARAMS: json.dumps(ctx.params), protocol.ENV_PARAMS_FILE: str(params_file),
        protocol.ENV_METRICS_FILE: str(metrics_file), protocol.ENV_JOB_ID: str(ctx.index),
        protocol.ENV_TRIAL_NUMBER: str(ctx.trial_number),
        protocol.ENV_CHECKPOINT_DIR: str(ctx.checkpoint_dir), "PYTHONUNBUFFERED": "1",
    }
    data = ctx.data_dir
    if data is not None:
        env[protocol.ENV_DATA_DIR] = str(data)
    return env


def _expire_after(stop: Callable[[], None], timeout_s: float | None,
                  timed_out: threading.Event) -> threading.Timer | None:
    """trial.timeout: a timer that sets ``timed_out`` and terminates the program."""
    if timeout_s is None:
        return None

    def expire() -> None:
        timed_out.set()
        stop()

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    return timer


def _no_metric(metric: str, how: MetricsSpec, last: list[str]) -> str:
    """Why a command trial has no objective value: which lines were expected, none seen."""
    if how.wandb is not None:
        expected = f"a wandb.log call with {metric!r} (wandb.log({{{metric!r}: 0.25}}))"
    elif how.file is not None:
        expected = f"a JSON line with {metric!r} in {how.file}"
    elif how.format is not None:
        expected = f"a stdout line matching metrics.format {how.format!r} for {metric!r}"
    else:
        expected = (f"a stdout line like '{metric}=0.25' or '{metric}: 0.25' (or "
                    f"{metric!r} in the JSON file ${protocol.ENV_METRICS_FILE})")
    shown = " | ".join(line.rstrip("\n") for line in last) or "(nothing)"
    return f"the program reported no {metric!r}: expected {expected}, saw none; the last " \
           f"lines of its stdout: {shown}"


def _follow(proc: subprocess.Popen[str] | RemoteProgram, seen: Metrics | None,
            fmt: re.Pattern[str] | None, last: deque[str], stop: Callable[[], None]) -> None:
    """Echo the program's stdout (keeping its ``last`` lines); unless its metrics come from a
    file, read them from each line (``seen`` reports steps and stops the program when the
    pruner says so)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        if line.strip():
            last.append(line)
        if seen is not None and seen.add(parse_metric_line(line, fmt)):
            stop()


def _report(ctx: TrialContext, step: int, metrics: dict[str, float]) -> bool:
    """One intermediate report; True when the pruner says the trial should stop."""
    ctx.report(step, **metrics)
    return ctx.should_prune()


def _metrics_file(path: Path) -> dict[str, Any]:
    """The JSON object a program may write to ``$SWEEPER_METRICS_FILE`` (nothing if absent)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise RuntimeError(f"$SWEEPER_METRICS_FILE is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RuntimeError("$SWEEPER_METRICS_FILE must hold a JSON object")
    return data
