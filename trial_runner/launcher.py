"""``trial.launcher: torchrun``: one trial on several processes of one node (DDP).

The runner claims (or asks for) the trial once, as for any trial; then, instead of calling
the entrypoint itself, it starts ``torchrun --standalone --nproc_per_node N`` on
:mod:`trial_runner.rank` (or on the ``trial.command``, whose ``name=value`` lines are then read
from rank 0 only) and waits. Its heartbeat and timeout go on meanwhile; the result comes back
from rank 0 through a file. Whatever happens to the ranks (an exception, a rank killed by the
OOM killer), torchrun ends them all and exits non-zero, and the runner fails the attempt once.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import optuna

from sweeper.spec import SweepSpec
from sweeper.study import trial_id_of
from trial_runner.command import _die_with_parent, _StderrTee, _terminate
from trial_runner.context import TrialContext

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone")


def torchrun_argv(nproc: int, *rest: str, rank0_output: bool = False) -> list[str]:
    """``torchrun --standalone --nproc_per_node N [--local-ranks-filter 0] REST...``."""
    argv = [*TORCHRUN, f"--nproc_per_node={nproc}"]
    if rank0_output:
        argv.append("--local-ranks-filter=0")
    return [*argv, *rest]


def run_ranks(ctx: TrialContext, spec: SweepSpec) -> Any:
    """Run the entrypoint on ``spec.trial.ranks`` processes; rank 0's result."""
    workdir = Path(tempfile.mkdtemp(prefix=f"sweeper-ranks-{ctx.trial_number}-"))
    result_file = workdir / "result.json"
    launch = workdir / "launch.json"
    launch.write_text(json.dumps({
        "spec": spec.to_dict(), "source": spec.source, "trial_id": trial_id_of(ctx.trial),
        "index": ctx.index, "trial_number": ctx.trial_number, "attempt": ctx.attempt,
        "params": ctx.params, "checkpoint_dir": str(ctx.checkpoint_dir),
        "result_file": str(result_file)}))
    argv = torchrun_argv(spec.trial.ranks, "-m", "trial_runner.rank", str(launch))
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, errors="replace",
                            preexec_fn=_die_with_parent)
    assert proc.stderr is not None
    stderr = _StderrTee(proc.stderr)
    try:
        code = proc.wait()
    except BaseException:  # SIGTERM to the runner, a timeout: the ranks go with it
        _terminate(proc)
        raise
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    for path in (result_file, launch):
        path.unlink(missing_ok=True)
    workdir.rmdir()
    if result is not None and result.get("status") == "pruned":
        raise optuna.TrialPruned()
    why = stderr.reason()  # also waits until all of torchrun's stderr is read
    error = result.get("error") if result is not None else None
    if code != 0 or result is None:
        cause = root_cause(list(stderr.tail))
        if error and (cause is None or cause[0] == 0):
            raise RuntimeError(f"rank 0 raised {error}")
        what = f"rank {cause[0]} failed ({cause[1]})" if cause else "a rank failed"
        raise RuntimeError(f"torchrun exited with code {_describe(code)}: {what}"
                           + (f": {why}" if cause is None and why else ""))
    if error:
        raise RuntimeError(f"rank 0 raised {error}")
    return result["result"]


_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXIT_RE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:.*\((SIG\w+)\))?")


def root_cause(lines: list[str]) -> tuple[int, str] | None:
    """(rank, "exit code -9, SIGKILL") from the failure summary torchrun prints, or None."""
    try:
        start = max(i for i, line in enumerate(lines) if "Root Cause" in line)
    except ValueError:
        return None
    rank = code = None
    for line in lines[start:]:
        if (m := _RANK_RE.match(line)) and rank is None:
            rank = int(m.group(1))
        elif (m := _EXIT_RE.match(line)) and code is None:
            code = f"exit code {m.group(1)}" + (f", {m.group(2)}" if m.group(2) else "")
    return (rank, code or "exit code unknown") if rank is not None else None


def _describe(code: int) -> str:
    if code < 0:
        return f"{code} ({signal.Signals(-code).name})"
    return str(code)


__all__ = ["TORCHRUN", "run_ranks", "torchrun_argv"]
