"""The multi-node contract (``trial.nodes: N``): what the backends tell each process of a
gang, and what a gang's processes derive from it. Pure; no I/O.

A *gang* is the N nodes (pods, or process groups locally) that run one trial at a time.
Node 0 runs the trial runner: it claims each index, launches its own torchrun agent and
reports the result; nodes 1..N-1 run followers that join each trial's rendezvous and get the
trial's launch (spec, parameters, trial) from node 0 through ``torch.distributed``. On
Kubernetes a sweep has ``parallelism`` gangs (slots); slot ``s`` of ``S`` runs the indexes
``s, s+S, s+2S, ...`` one after another. Locally, node 0 starts its followers itself for
each trial.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ENV_NODES = "SWEEPER_NODES"
ENV_NODE_RANK = "SWEEPER_NODE_RANK"
ENV_SLOT = "SWEEPER_SLOT"
ENV_SLOTS = "SWEEPER_SLOTS"
#: Node 0's address (a pod DNS name on Kubernetes) and the rendezvous port of slot 0: slot
#: ``s`` listens on ``port + s``, so gangs that share a host's network do not collide.
ENV_RDZV_HOST = "SWEEPER_RDZV_HOST"
ENV_RDZV_PORT = "SWEEPER_RDZV_PORT"
#: Seconds a rendezvous waits for every node to join before the attempt fails.
ENV_RDZV_TIMEOUT = "SWEEPER_RDZV_TIMEOUT"
#: Locally: node 0 starts nodes 1..N-1 itself, as separate process groups.
ENV_LOCAL_GANG = "SWEEPER_LOCAL_GANG"
DEFAULT_RDZV_PORT = 29400
DEFAULT_RDZV_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Gang:
    """Where one process of a gang stands."""

    nodes: int
    node_rank: int = 0
    slot: int = 0
    slots: int = 1
    host: str = "127.0.0.1"
    base_port: int = DEFAULT_RDZV_PORT
    timeout_s: float = DEFAULT_RDZV_TIMEOUT_S
    local: bool = False

    @property
    def port(self) -> int:
        return self.base_port + self.slot

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def leader(self) -> bool:
        return self.node_rank == 0

    def indexes(self, n_indexes: int) -> list[int]:
        """The indexes this gang's slot runs, in order."""
        return list(range(self.slot, n_indexes, self.slots))

    def for_node(self, node_rank: int) -> Gang:
        return Gang(self.nodes, node_rank, self.slot, self.slots, self.host, self.base_port,
                    self.timeout_s, self.local)

    def env(self) -> dict[str, str]:
        """The environment that :func:`gang_from_env` reads back."""
        env = {ENV_NODES: str(self.nodes), ENV_NODE_RANK: str(self.node_rank),
               ENV_SLOT: str(self.slot), ENV_SLOTS: str(self.slots), ENV_RDZV_HOST: self.host,
               ENV_RDZV_PORT: str(self.base_port), ENV_RDZV_TIMEOUT: f"{self.timeout_s:g}"}
        if self.local:
            env[ENV_LOCAL_GANG] = "1"
        return env


def _int(env: Mapping[str, str], key: str, default: int, low: int) -> int:
    raw = env.get(key, "")
    value = int(raw) if raw.strip().lstrip("-").isdigit() else default
    if value < low:
        raise ValueError(f"{key} must be >= {low}, got {raw!r}")
    return value


def gang_from_env(env: Mapping[str, str]) -> Gang | None:
    """The gang this process belongs to; None for a single-node trial. ValueError (a line
    for the log) when the environment contradicts itself."""
    nodes = _int(env, ENV_NODES, 1, 1)
    if nodes == 1:
        return None
    rank = _int(env, ENV_NODE_RANK, 0, 0)
    slots = _int(env, ENV_SLOTS, 1, 1)
    slot = _int(env, ENV_SLOT, 0, 0)
    if rank >= nodes or slot >= slots:
        raise ValueError(f"node {rank} of {nodes}, slot {slot} of {slots}: out of range")
    try:
        timeout = float(env.get(ENV_RDZV_TIMEOUT) or DEFAULT_RDZV_TIMEOUT_S)
    except ValueError:
        raise ValueError(f"{ENV_RDZV_TIMEOUT} must be a number of seconds") from None
    return Gang(nodes, rank, slot, slots, env.get(ENV_RDZV_HOST) or "127.0.0.1",
                _int(env, ENV_RDZV_PORT, DEFAULT_RDZV_PORT, 1), timeout,
                env.get(ENV_LOCAL_GANG) == "1")
