"""``trial.launcher``, ``trial.nproc`` and ``trial.nodes``: how many processes, on how many
pods, one trial runs as. ``resources.gpu`` is the trial's total: each of its ``nodes`` pods
gets an equal share and runs one rank per GPU of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweeper.spec.checks import Checks
from sweeper.spec.model import LAUNCHERS, Resources
from sweeper.spec.yamldoc import Path_


def launcher_fields(v: Checks, m: Mapping[str, Any], path: Path_, resources: Resources,
                    has_command: bool) -> tuple[str, int | None, int]:
    """(launcher, nproc, nodes), checked against each other and ``resources.gpu``."""
    launcher = v.choice(m.get("launcher", "process"), (*path, "launcher"), LAUNCHERS)
    nodes = v.integer(m.get("nodes", 1), (*path, "nodes"), 1)
    if nodes > 1:
        _check_nodes(v, path, launcher, nodes, resources, has_command)
    per_node_gpu = resources.gpu / nodes
    nproc = m.get("nproc")
    if nproc is None:
        if launcher == "torchrun" and resources.gpu < 1:
            raise v.err((*path, "launcher"), "torchrun needs resources.gpu: N (one rank "
                                             "per GPU) or nproc: N (ranks on CPUs)")
        return launcher, None, nodes
    nproc = v.integer(nproc, (*path, "nproc"), 1)
    if launcher != "torchrun":
        raise v.err((*path, "nproc"), "nproc applies to launcher: torchrun only")
    if resources.gpu >= 1 and nproc != per_node_gpu:
        per = f"resources.gpu / trial.nodes ({resources.gpu:g} / {nodes})" if nodes > 1 \
            else f"resources.gpu ({resources.gpu:g})"
        raise v.err((*path, "nproc"), f"one rank per GPU: nproc must equal {per}, got {nproc}")
    return launcher, nproc, nodes


def _check_nodes(v: Checks, path: Path_, launcher: str, nodes: int, resources: Resources,
                 has_command: bool) -> None:
    if launcher != "torchrun":
        raise v.err((*path, "nodes"), f"nodes: {nodes} needs launcher: torchrun (only "
                                      "torchrun's ranks can rendezvous across pods)")
    if has_command:
        raise v.err((*path, "nodes"), f"nodes: {nodes} runs a trial.entrypoint, not a "
                                      "trial.command (the ranks on other pods receive the "
                                      "parameters from rank 0 through torch.distributed)")
    gpu = resources.gpu
    if gpu and (gpu < 1 or int(gpu) % nodes):
        raise v.err((*path, "resources", "gpu"),
                    f"resources.gpu ({gpu:g}) is the trial's total and must divide evenly "
                    f"across trial.nodes ({nodes}): use a multiple of {nodes}")
