"""``trial.launcher: torchrun``: one trial on several processes of one node (DDP), or of
``trial.nodes`` nodes.

The runner claims (or asks for) the trial once, as for any trial; then, instead of calling
the entrypoint itself, it starts ``torchrun --standalone --nproc_per_node N`` on
:mod:`trial_runner.rank` (or on the ``trial.command``, whose ``name=value`` lines are then read
from rank 0 only) and waits. Its heartbeat and timeout go on meanwhile; the result comes back
from the leader rank through a file. Whatever happens to the ranks (an exception, a rank killed
by the OOM killer), torchrun ends them all and exits non-zero, and the runner fails the attempt
once.

With ``trial.nodes: N`` (:mod:`sweeper.gang`) this runner is node 0: its torchrun hosts a c10d
rendezvous that the followers of nodes 1..N-1 join (other pods on Kubernetes; locally, process
groups this module starts for each trial). A node that dies ends the trial on every node: the
surviving ranks' collectives fail, or the rendezvous times out."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna

from sweeper._optuna_compat import trial_id_of
from sweeper.gang import ENV_NODE_RANK, Gang
from sweeper.spec import SweepSpec
from trial_runner.context import TrialContext
from trial_runner.processes import StderrTee, die_with_parent, terminate

TORCHRUN = (sys.executable, "-m", "torch.distributed.run")


def torchrun_argv(nproc: int, *rest: str, rank0_output: bool = False,
                  gang: Gang | None = None, rdzv_id: str = "sweeper") -> list[str]:
    """``torchrun --standalone --nproc_per_node N [--local-ranks-filter 0] REST...``; for one
    node of a gang, a c10d rendezvous at node 0's endpoint instead of ``--standalone``."""
    argv = [*TORCHRUN, *(_gang_args(gang, rdzv_id) if gang else ("--standalone",)),
            f"--nproc_per_node={nproc}"]
    if rank0_output:
        argv.append("--local-ranks-filter=0")
    return [*argv, *rest]


def _gang_args(gang: Gang, rdzv_id: str) -> tuple[str, ...]:
    """Node 0 hosts the rendezvous store (``is_host``, not guessed from host names, which
    every pod on one host would match); the rendezvous fails after ``timeout_s`` without
    every node, and no rank is restarted in place: the attempt fails once, for all."""
    return (f"--nnodes={gang.nodes}", f"--node-rank={gang.node_rank}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={gang.endpoint}", f"--rdzv-id={rdzv_id}",
            f"--rdzv-conf=is_host={int(gang.leader)},join_timeout={gang.timeout_s:g}",
            "--max-restarts=0")


def rdzv_id(spec: SweepSpec, gang: Gang) -> str:
    return f"{spec.name}-slot{gang.slot}"


def run_ranks(ctx: TrialContext, spec: SweepSpec, gang: Gang | None = None) -> Any:
    """Run the entrypoint on ``spec.trial.ranks`` processes (of each of the gang's nodes:
    this is node 0, whose local rank 0 holds the launch); the main rank's result."""
    workdir = Path(tempfile.mkdtemp(prefix=f"sweeper-ranks-{ctx.trial_number}-"))
    result_file = workdir / "result.json"
    launch = workdir / "launch.json"
    launch.write_text(json.dumps({
        "spec": spec.to_dict(), "source": spec.source, "trial_id": trial_id_of(ctx.trial),
        "index": ctx.index, "trial_number": ctx.trial_number, "attempt": ctx.attempt,
        "params": ctx.params, "checkpoint_dir": str(ctx.checkpoint_dir),
        "result_file": str(result_file)}))
    if gang is not None and gang.local:  # this trial's own port: gangs share the host
        gang = replace(gang, base_port=free_port(), slot=0)
    argv = torchrun_argv(spec.trial.ranks, "-m", "trial_runner.rank", str(launch),
                         gang=gang, rdzv_id=rdzv_id(spec, gang) if gang else "sweeper")
    followers = start_local_followers(spec, gang, workdir) \
        if gang is not None and gang.local else []
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, errors="replace",
                            preexec_fn=die_with_parent,
                            env=node_env(0, gang.nodes) if gang and gang.local else None)
    assert proc.stderr is not None
    stderr = StderrTee(proc.stderr)
    try:
        code = proc.wait()
    except BaseException:  # SIGTERM to the runner, a timeout: the ranks go with it
        terminate(proc)
        raise
    finally:
        stop_followers(followers, clean=proc.returncode == 0)
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    shutil.rmtree(workdir, ignore_errors=True)
    return _main_result(code, result, stderr)


def _main_result(code: int, result: dict[str, Any] | None, stderr: StderrTee) -> Any:
    """What the main rank returned, from torchrun's exit code and the main rank's result
    file; raises TrialPruned, or RuntimeError naming the rank that failed and why."""
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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def follower_argv(spec: SweepSpec, gang: Gang, result_file: Path) -> list[str]:
    """One follower node's torchrun for one trial: its ranks get the launch from node 0."""
    return torchrun_argv(spec.trial.ranks, "-m", "trial_runner.rank", "--follow",
                         str(result_file), gang=gang, rdzv_id=rdzv_id(spec, gang))


def start_local_followers(spec: SweepSpec, gang: Gang, workdir: Path
                          ) -> list[subprocess.Popen[bytes]]:
    """``nodes: N`` locally: nodes 1..N-1 of this trial, each its own process group (what a
    pod is to the gang), their output in the runner's log."""
    return [subprocess.Popen(follower_argv(spec, gang.for_node(k), workdir / f"node-{k}.json"),
                             preexec_fn=die_with_parent, env=node_env(k, gang.nodes))
            for k in range(1, gang.nodes)]


def node_env(node: int, nodes: int) -> dict[str, str]:
    """A local node's environment: its share of the worker's GPUs (none when it has none)."""
    env = dict(os.environ, **{ENV_NODE_RANK: str(node)})
    gpus = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if gpus:
        share = len(gpus) // nodes
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[node * share:(node + 1) * share])
    return env


def stop_followers(procs: list[subprocess.Popen[bytes]], *, clean: bool) -> None:
    """After node 0's torchrun: followers of a clean round are ending on their own (a few
    seconds); after a failure they may wait on a rendezvous that never completes."""
    deadline = time.monotonic() + (30.0 if clean else 0.0)
    for p in procs:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            terminate(p)


def _describe(code: int) -> str:
    if code < 0:
        return f"{code} ({signal.Signals(-code).name})"
    return str(code)


__all__ = ["TORCHRUN", "follower_argv", "run_ranks", "torchrun_argv"]
