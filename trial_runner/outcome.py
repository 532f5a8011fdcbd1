"""What a runner is told (its settings) and what it says back about an index (its outcome),
and the signal that interrupts it: the plain values of :mod:`trial_runner.runner`."""

from __future__ import annotations

import enum
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sweeper import protocol
from sweeper.accounting import OpenSegment
from sweeper.study.values import Taken
from trial_runner.ahead import Ahead


@dataclass(frozen=True)
class RunnerSettings:
    heartbeat_interval_s: float = protocol.DEFAULT_HEARTBEAT_INTERVAL_S
    #: A RUNNING attempt whose heartbeat is older than this is presumed dead.
    grace_period_s: float = protocol.DEFAULT_GRACE_PERIOD_S
    checkpoint_root: Path = Path(protocol.DEFAULT_CHECKPOINT_DIR)
    #: Reports are written at most this late, or with the finish (trial_runner.reports).
    report_delay_s: float = protocol.DEFAULT_REPORT_DELAY_S
    #: A local worker's next index, taken with the finish before it (trial_runner.ahead).
    ahead: Ahead | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunnerSettings:
        env = os.environ if env is None else env
        return cls(
            heartbeat_interval_s=protocol.env_float(env, protocol.ENV_HEARTBEAT_INTERVAL,
                                                    protocol.DEFAULT_HEARTBEAT_INTERVAL_S),
            grace_period_s=protocol.grace_period_s(env),
            checkpoint_root=Path(env.get(protocol.ENV_CHECKPOINT_DIR)
                                 or protocol.DEFAULT_CHECKPOINT_DIR),
            report_delay_s=protocol.env_float(env, protocol.ENV_REPORT_DELAY,
                                              protocol.DEFAULT_REPORT_DELAY_S),
        )


class OutcomeState(str, enum.Enum):
    """How a runner's index ended. The value is what the worker's ``done`` message carries
    and what the logs print (a ``str``: it compares equal to its value)."""

    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"
    #: The index already had a finished trial: nothing ran.
    ALREADY_DONE = "ALREADY_DONE"
    #: The sweep is stopped (a stop rule, ``sweeper stop``): nothing ran.
    STOPPED = protocol.STOPPED
    #: The trial paused at a rung (``scheduler:``) until a promotion resumes it.
    PAUSED = protocol.PAUSED

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Outcome:
    index: int
    exit_code: int
    state: OutcomeState
    trial_number: int | None
    message: str = ""
    #: PAUSED (``scheduler:``): the rung the trial paused at.
    rung: int | None = None


@dataclass(frozen=True)
class Claimed:
    """A trial of the index that this runner owns now (steps 1-2 of the protocol)."""

    trial_id: int
    attempt: int
    #: What the first look read of the trial it claimed (PostgreSQL): opened without a query.
    taken: Taken | None = None
    #: The segment the claim opened (written with it); None: the run opens one.
    segment: OpenSegment | None = None


class Interrupted(BaseException):
    """SIGTERM/SIGINT arrived while a trial ran (pod eviction, Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class BudgetSpent(Interrupted):
    """The sweep's budget is spent and ``budget.on_exhausted`` is ``stop``: the trial stops at
    its report, resumable (its checkpoint kept), as after sweeper's own stop."""

    def __init__(self, reason: str) -> None:
        super().__init__(signal.SIGINT)
        self.args = (f"the budget ({reason})",)
        self.reason = reason
