"""``python -m trial_runner.rank LAUNCH_FILE``: one rank of a ``launcher: torchrun`` trial.

torchrun starts this module on every rank (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` set). The
runner that claimed the trial wrote ``LAUNCH_FILE``: the spec, the trial, its params. Every
rank gets the same params and calls the user's ``module:function(ctx)``; the process group is
initialised here (NCCL on GPUs, gloo on CPUs), and ``ctx.device`` is ``cuda:LOCAL_RANK``.
The *leader* (``ctx.is_main``: the rank that read the launch file, local rank 0 of node 0;
global rank 0 on one node) alone talks to the study: it writes intermediate values, metrics
and checkpoints, and its return value (or its exception, or the pruning) goes to the runner
through the result file. ``ctx.should_prune()`` is a collective: the leader asks the pruner
and broadcasts the answer, so every rank stops at the same step.

On the other nodes of a ``trial.nodes: N`` gang, ``rank --follow NOTE_FILE``: no file to read,
the ranks receive the launch from the leader (or the word that the gang is done)."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from sweeper import protocol
from sweeper.entrypoint import load_entrypoint
from sweeper.spec import SweepSpec, load_stored
from trial_runner.checkpoints import CheckpointMirror, write_atomically
from trial_runner.context import TrialContext
from trial_runner.data import data_dir

logger = logging.getLogger("trial_runner.rank")


class _NoTrial:
    """What ranks other than 0 have instead of an Optuna trial: they never write."""

    def report(self, value: float, step: int) -> None:
        pass

    def should_prune(self) -> bool:
        return False

    def set_user_attr(self, key: str, value: Any) -> None:
        pass


@dataclass
class RankContext(TrialContext):
    """The TrialContext of one rank: writes only on rank 0, prunes in step on every rank."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    #: The global rank that holds the launch: local rank 0 of node 0 (whose runner claimed
    #: the trial), wherever the rendezvous put it in the world.
    leader: int = 0
    nodes: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == self.leader

    def report(self, step: int, **metrics: float) -> None:
        if self.is_main:
            super().report(step, **metrics)

    def should_prune(self) -> bool:
        """The same answer on every rank: rank 0 asks the pruner and broadcasts it. Call it on
        every rank at the same step (it is a collective)."""
        import torch
        import torch.distributed as dist

        decision = super().should_prune() if self.is_main else False
        flag = torch.tensor([1 if decision else 0], dtype=torch.int32,
                            device=self.device if self.device.startswith("cuda") else "cpu")
        dist.broadcast(flag, src=self.leader)
        return bool(flag.item())

    def set(self, key: str, value: Any) -> None:
        if self.is_main:
            super().set(key, value)

    def _set_attr(self, key: str, value: Any) -> None:
        if self.is_main:
            super()._set_attr(key, value)

    def save_checkpoint(self, state: Any, step: int) -> Path:
        """Rank 0 saves (and uploads); the others' states are the same by construction."""
        if self.is_main:
            return super().save_checkpoint(state, step)
        return self.checkpoint_dir / "checkpoint.pt"

    def save_artifact(self, data: str | os.PathLike[str] | bytes, name: str | None = None
                      ) -> str:
        return super().save_artifact(data, name) if self.is_main else ""

    def load_checkpoint(self) -> tuple[Any, int] | None:
        """On one node every rank reads the file; across nodes (where only node 0 has it) the
        leader reads it and sends it to every rank: then call it on every rank (a
        collective), as ``should_prune``."""
        if self.nodes == 1:
            return super().load_checkpoint()
        import torch.distributed as dist

        box = [super().load_checkpoint() if self.is_main else None]
        dist.broadcast_object_list(box, src=self.leader)
        if box[0] is not None:
            self.resumed_from_step = box[0][1]
        return box[0]


def main(argv: list[str] | None = None) -> int:
    """``rank LAUNCH_FILE`` on node 0; ``rank --follow NOTE_FILE`` on the other nodes of a
    gang, whose ranks receive the launch from node 0 and whose local rank 0 notes in
    NOTE_FILE whether the round ran a trial or said the gang is done."""
    argv = sys.argv[1:] if argv is None else argv
    follow = argv[0] == "--follow"
    launch = None if follow else json.loads(Path(argv[0]).read_text())
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    logging.basicConfig(level=os.environ.get(protocol.ENV_LOG_LEVEL, "INFO"),
                        format=f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _init_process_group(local_rank)
    try:
        leader, launch = _share_launch(launch, local_rank)
        if not launch.get("done"):
            code = _run(launch, rank, local_rank, world_size, leader)
    finally:
        _destroy_process_group()
    if follow and local_rank == 0:
        write_atomically(Path(argv[-1]), json.dumps(
            {"status": "done" if launch.get("done") else "ran"}).encode())
    return 0 if launch.get("done") else code


def _share_launch(launch: dict[str, Any] | None, local_rank: int
                  ) -> tuple[int, dict[str, Any]]:
    """(the leader's global rank, the launch): every rank learns which rank read the launch
    file and receives its contents from it."""
    import torch.distributed as dist

    holders: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(holders, launch is not None and local_rank == 0)
    if True not in holders:
        raise RuntimeError("no rank holds the trial's launch: node 0 did not join")
    leader = holders.index(True)
    box = [launch]
    dist.broadcast_object_list(box, src=leader)
    assert isinstance(box[0], dict)
    return leader, box[0]


def _run(launch: dict[str, Any], rank: int, local_rank: int, world_size: int,
         leader: int) -> int:
    spec = load_stored(launch["spec"], source=launch["source"])
    result_file = Path(launch["result_file"])
    main_rank = rank == leader
    try:
        ctx = _context(spec, launch, rank, local_rank, world_size, leader)
        assert spec.trial.entrypoint is not None
        objective = load_entrypoint(spec.trial.entrypoint, source=spec.source)
        result = objective(ctx)
    except optuna.TrialPruned:
        _write(result_file, main_rank, {"status": "pruned"})
        return 0
    except Exception as e:  # noqa: BLE001 - the runner fails the attempt with this line
        logger.error("the objective raised:\n%s", traceback.format_exc())
        line = traceback.format_exception_only(type(e), e)[-1].strip()
        _write(result_file, main_rank, {"status": "error", "error": line})
        return protocol.EXIT_RETRY
    _write(result_file, main_rank, {"status": "ok", "result": _plain(result)})
    return 0


def _context(spec: SweepSpec, launch: dict[str, Any], rank: int, local_rank: int,
             world_size: int, leader: int) -> RankContext:
    trial: Any = _NoTrial()
    mirror = None
    factory = None
    if rank == leader:  # the only rank with a database connection
        from sweeper.artifacts import cached_artifact_store
        from sweeper.spec.registry import make_pruner, make_sampler
        from sweeper.study import load_sweep, open_storage

        storage = open_storage(os.environ.get(protocol.ENV_STORAGE, protocol.DEFAULT_STORAGE),
                               connect_deadline_s=30.0, prepared=True)
        sweep = load_sweep(storage, spec.name)
        study = sweep.runner_study(make_sampler(spec, launch["index"]), make_pruner(spec))
        trial = optuna.Trial(study, launch["trial_id"])
        mirror = CheckpointMirror.for_index(spec, storage.url, launch["index"], sweep.state_key)
        url = storage.url
        factory = lambda: cached_artifact_store(spec.artifacts, url)  # noqa: E731
    return RankContext(
        params=dict(launch["params"]), index=launch["index"], trial_number=launch["trial_number"],
        attempt=launch["attempt"], checkpoint_dir=Path(launch["checkpoint_dir"]), trial=trial,
        objective_metrics=tuple(o.metric for o in spec.objectives),
        artifact_store_factory=factory, checkpoint_mirror=mirror,
        data_factory=(lambda: data_dir(spec.data)) if spec.data.configured else None,
        rank=rank, local_rank=local_rank, world_size=world_size, leader=leader,
        nodes=spec.trial.nodes)


def _init_process_group(local_rank: int) -> None:
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
    else:
        dist.init_process_group("gloo")


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _write(path: Path, main_rank: bool, result: dict[str, Any]) -> None:
    if main_rank:
        write_atomically(path, json.dumps(result).encode())


def _plain(value: Any) -> Any:
    """What the objective returned, as JSON the runner reads back (tensors and numpy scalars
    as numbers; anything else as its repr, which the runner then rejects with a reason)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value  # NaN and inf too: JSON as Python writes it, and the runner refuses them
    if hasattr(value, "item") and callable(value.item):
        return _plain(value.item())
    return repr(value)


if __name__ == "__main__":
    sys.exit(main())
