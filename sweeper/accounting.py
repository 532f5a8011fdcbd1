"""What a sweep's trials consumed, and what its budget lets start: the pure side of the
ledger (no I/O, like :mod:`sweeper.protocol`; the reads and the gate are
:mod:`sweeper.study.ledger`).

Every attempt runs in one or more segments (its first run; under a scheduler each promotion
and each PBT interval). A segment is claimed with an :class:`OpenSegment` written on the
trial (``protocol.SEGMENT_ATTR``: its claim id, the GPUs and CPUs it holds, the step it
starts from, its start on the runner's clock) and closed with a :class:`Usage` under a key
of its own (``protocol.usage_key(claim)``): wall seconds, GPUs, CPUs, the steps it trained
itself, and how it ended (:class:`Ending`). The runner closes its own segments from its own
clock; a segment whose runner died is closed by whoever finds the attempt stale, from its
start to its last heartbeat. A retried write, or both writing, lands on the same key: a
segment counts once.

:class:`Totals` sums usages by ending; :class:`Budget` says how much of the sweep's budget
is spent and whether new work may start (:func:`decide`); :class:`Cost` turns hours into
money.

Closed segments are summed exactly (:class:`UsageSum`: whole milliseconds of wall time, as
stored, and steps, as integers, by ending, GPUs and CPUs), and turned into hours once per
group: the totals are the same bits in any order of the segments, whether they are summed
here or by the database (the budget gate's aggregate, :mod:`sweeper.study.sql.ledger`).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sweeper.protocol import USAGE_ATTR_PREFIX, usage_key

if TYPE_CHECKING:
    from sweeper.spec import SweepSpec

__all__ = ["BUDGET_RULE", "Budget", "BudgetDecision", "Cost", "Ending", "Figures",
           "OpenSegment", "Totals", "Usage", "UsageSum", "budget_of", "committed",
           "committed_after", "cost_of", "decide", "ending_of_signal", "is_usage_key",
           "spec_resources", "trial_record", "trial_resources", "trial_usages", "usage_key",
           "wall_ms"]

#: The stop rule recorded (``protocol.STOP_ATTR``) when the budget is spent.
BUDGET_RULE = "budget"

_SIGTERM, _SIGINT = 15, 2


class Ending(enum.Enum):
    """How a segment ended. ``PAUSED``: stopped on purpose and resumable (a rung's pause, a
    PBT interval's end, the user's Ctrl-C, the budget's ``on_exhausted: stop``);
    ``PREEMPTED``: the pod or process was stopped from outside (evicted, preempted, its node
    drained, a SIGTERM sweeper did not send), retried without using a retry."""

    COMPLETE = "complete"
    PRUNED = "pruned"
    PAUSED = "paused"
    FAILED = "failed"
    PREEMPTED = "preempted"

    @property
    def finished(self) -> bool:
        """Work that counts (the trial got on with it), as opposed to lost to a failure or
        to preemption."""
        return self in (Ending.COMPLETE, Ending.PRUNED, Ending.PAUSED)


def ending_of_signal(signum: int) -> Ending:
    """A runner interrupted by ``signum``: SIGINT is sweeper's own stop (its launcher, the
    user's Ctrl-C), so the segment is paused; SIGTERM came from outside (the kubelet evicting
    or preempting the pod, a drain, ``kill``): preempted."""
    return Ending.PAUSED if signum == _SIGINT else Ending.PREEMPTED


def is_usage_key(key: str) -> bool:
    return key.startswith(USAGE_ATTR_PREFIX)


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _number(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return float(value)


@dataclass(frozen=True)
class OpenSegment:
    """A segment as its claim wrote it (``protocol.SEGMENT_ATTR``)."""

    claim: str
    gpus: float
    cpus: float
    #: The step the segment trains from (0, a checkpoint's step, a rung's step).
    from_step: int
    #: When it started, on the runner's clock (naive UTC).
    started: datetime

    @property
    def key(self) -> str:
        return usage_key(self.claim)

    def encode(self) -> dict[str, Any]:
        return {"claim": self.claim, "gpus": self.gpus, "cpus": self.cpus,
                "from_step": self.from_step, "started": self.started.isoformat()}

    @classmethod
    def parse(cls, value: Any) -> OpenSegment | None:
        """The attribute's stored value (None: not one)."""
        if not isinstance(value, Mapping) or not isinstance(value.get("claim"), str):
            return None
        try:
            started = datetime.fromisoformat(str(value.get("started"))).replace(tzinfo=None)
        except ValueError:
            return None
        return cls(value["claim"], _number(value.get("gpus")), _number(value.get("cpus")),
                   int(_number(value.get("from_step"))), started)

    def close(self, ending: Ending, *, end: datetime | None = None, last_step: int | None,
              by: str = "runner") -> Usage:
        """The usage of this segment ended at ``end`` (default: now, this process's clock),
        having reported up to ``last_step`` (None: no step)."""
        wall = max(0.0, ((end or _now()) - self.started).total_seconds())
        steps = max(0, last_step - self.from_step) if last_step is not None else 0
        return Usage(wall, self.gpus, self.cpus, steps, ending, by)


@dataclass(frozen=True)
class Usage:
    """One closed segment (``protocol.usage_key``). ``by``: ``runner`` (its own clock) or
    ``stale`` (closed by whoever found it stale: from its start to its last heartbeat)."""

    wall_s: float
    gpus: float
    cpus: float
    steps: int
    ending: Ending
    by: str = "runner"

    @property
    def gpu_s(self) -> float:
        return self.wall_s * self.gpus

    @property
    def cpu_s(self) -> float:
        """CPU-seconds of a CPU trial (a GPU trial's CPUs are part of its GPU-hours)."""
        return self.wall_s * self.cpus if not self.gpus else 0.0

    def encode(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), "gpus": self.gpus, "cpus": self.cpus,
                "steps": self.steps, "ending": self.ending.value, "by": self.by}

    @classmethod
    def parse(cls, value: Any) -> Usage | None:
        """The attribute's stored value (None: not one)."""
        if not isinstance(value, Mapping):
            return None
        try:
            ending = Ending(value.get("ending"))
        except ValueError:
            return None
        return cls(max(0.0, _number(value.get("wall_s"))), _number(value.get("gpus")),
                   _number(value.get("cpus")), int(_number(value.get("steps"))), ending,
                   str(value.get("by", "runner")))


_CPU_RE = re.compile(r"^(\d+(?:\.\d+)?)(m?)$")


def trial_resources(gpu: float, cpu: str | None, nodes: int = 1) -> tuple[float, float]:
    """(GPUs, CPUs) one trial holds: ``trial.resources.gpu`` and ``.cpu`` (a Kubernetes
    quantity, ``500m`` is 0.5; 1 when unset), each times ``trial.nodes``."""
    cpus = 1.0
    match = _CPU_RE.match(cpu.strip()) if cpu else None
    if match is not None:
        cpus = float(match[1]) / (1000.0 if match[2] else 1.0)
    return float(gpu) * nodes, cpus * nodes


def spec_resources(spec: SweepSpec) -> tuple[float, float]:
    """(GPUs, CPUs) one trial of ``spec`` holds."""
    t = spec.trial
    return trial_resources(t.resources.gpu, t.resources.cpu, t.nodes)


@dataclass(frozen=True)
class Cost:
    """A price (``cost:``): money per GPU-hour and per CPU-hour of a CPU trial."""

    per_gpu_hour: float
    per_cpu_hour: float
    currency: str = "USD"

    def of(self, gpu_hours: float, cpu_hours: float) -> float:
        return gpu_hours * self.per_gpu_hour + cpu_hours * self.per_cpu_hour

    def format(self, amount: float) -> str:
        return f"{amount:,.2f} {self.currency}"


@dataclass(frozen=True)
class Figures:
    """What some segments consumed, summed."""

    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    steps: int = 0
    wall_hours: float = 0.0
    segments: int = 0

    def __add__(self, other: Figures) -> Figures:
        return Figures(self.gpu_hours + other.gpu_hours, self.cpu_hours + other.cpu_hours,
                       self.steps + other.steps, self.wall_hours + other.wall_hours,
                       self.segments + other.segments)

    @classmethod
    def of(cls, usage: Usage) -> Figures:
        return cls(usage.gpu_s / 3600.0, usage.cpu_s / 3600.0, usage.steps,
                   usage.wall_s / 3600.0, 1)

    def amount(self, unit: str, cost: Cost | None) -> float:
        """This much in a budget's unit (``gpu_hours``, ``cpu_hours``, ``steps``, ``cost``)."""
        if unit == "cost":
            return cost.of(self.gpu_hours, self.cpu_hours) if cost is not None else 0.0
        return float(getattr(self, unit))

    def to_json(self, cost: Cost | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"gpu_hours": self.gpu_hours, "cpu_hours": self.cpu_hours,
                               "steps": self.steps, "wall_hours": self.wall_hours,
                               "segments": self.segments}
        if cost is not None:
            out["cost"] = cost.of(self.gpu_hours, self.cpu_hours)
        return out


def wall_ms(wall_s: float) -> int:
    """A closed segment's wall time in whole milliseconds (:meth:`Usage.encode` stores it
    rounded to them), the unit closed segments are summed in: integers add up exactly, in any
    order. The database's aggregate computes the same (``w * 1000.0 + 0.5``, truncated)."""
    return int(wall_s * 1000.0 + 0.5)


#: Hours per millisecond's count: ``ms / MS_PER_HOUR``.
MS_PER_HOUR = 3_600_000.0


@dataclass(frozen=True)
class UsageSum:
    """Closed segments of one ending and one (GPUs, CPUs), summed exactly: their wall time in
    whole milliseconds (:func:`wall_ms`), their steps, how many. The figures follow from
    these integers (GPU-hours: GPUs times hours), so a sum made by the database, one made
    here, or parts of each added together, give the same bits."""

    ending: Ending
    gpus: float
    cpus: float
    wall_ms: int = 0
    steps: int = 0
    segments: int = 0

    @classmethod
    def of(cls, usage: Usage) -> UsageSum:
        return cls(usage.ending, usage.gpus, usage.cpus, wall_ms(usage.wall_s), usage.steps, 1)

    @property
    def key(self) -> tuple[Ending, float, float]:
        return self.ending, self.gpus, self.cpus

    def __add__(self, other: UsageSum) -> UsageSum:
        return UsageSum(self.ending, self.gpus, self.cpus, self.wall_ms + other.wall_ms,
                        self.steps + other.steps, self.segments + other.segments)

    @property
    def figures(self) -> Figures:
        hours = self.wall_ms / MS_PER_HOUR
        return Figures(self.gpus * self.wall_ms / MS_PER_HOUR,
                       0.0 if self.gpus else self.cpus * self.wall_ms / MS_PER_HOUR,
                       self.steps, hours, self.segments)


def _by_ending(sums: Iterable[UsageSum]) -> dict[Ending, Figures]:
    """The figures of ``sums`` by ending: sums of the same group merged (exactly), then each
    group's figures added in one fixed order (ending, GPUs, CPUs)."""
    merged: dict[tuple[Ending, float, float], UsageSum] = {}
    for s in sums:
        merged[s.key] = merged[s.key] + s if s.key in merged else s
    order = {e: k for k, e in enumerate(Ending)}
    by: dict[Ending, Figures] = {}
    for s in sorted(merged.values(), key=lambda s: (order[s.ending], s.gpus, s.cpus)):
        by[s.ending] = by.get(s.ending, Figures()) + s.figures
    return by


def trial_usages(user_attrs: Mapping[str, Any]) -> list[Usage]:
    """The closed segments a trial's user attrs hold."""
    got = (Usage.parse(v) for k, v in user_attrs.items() if is_usage_key(k))
    return [u for u in got if u is not None]


def trial_record(user_attrs: Mapping[str, Any], cost: Cost | None) -> dict[str, Any]:
    """One trial's figures for ``export`` (its closed segments): GPU-hours, CPU-hours,
    steps, wall hours, segments, how its last segment ended, and (with a price) the cost."""
    usages = trial_usages(user_attrs)
    fig = _sum(Figures.of(u) for u in usages)
    endings = [u.ending.value for u in usages]
    return {**fig.to_json(cost), "endings": endings}


def _sum(items: Iterable[Figures]) -> Figures:
    total = Figures()
    for item in items:
        total = total + item
    return total


@dataclass(frozen=True)
class Totals:
    """A sweep's (or an index's) consumption: closed segments by ending, and the running
    segments so far."""

    by_ending: Mapping[Ending, Figures] = field(default_factory=dict)
    running: Figures = Figures()

    @classmethod
    def of(cls, closed: Iterable[Usage], running: Iterable[Usage] = ()) -> Totals:
        return cls.summed((UsageSum.of(u) for u in closed), running)

    @classmethod
    def summed(cls, closed: Iterable[UsageSum], running: Iterable[Usage] = ()) -> Totals:
        """The totals of closed segments summed already (by the database, or here) and of
        the running ones."""
        return cls(_by_ending(closed), _sum(Figures.of(u) for u in running))

    def ended(self, *endings: Ending) -> Figures:
        return _sum(self.by_ending.get(e, Figures()) for e in endings)

    @property
    def finished(self) -> Figures:
        """Spent on trials that got on: completed, pruned or paused segments."""
        return self.ended(Ending.COMPLETE, Ending.PRUNED, Ending.PAUSED)

    @property
    def failed(self) -> Figures:
        return self.ended(Ending.FAILED)

    @property
    def preempted(self) -> Figures:
        return self.ended(Ending.PREEMPTED)

    @property
    def closed(self) -> Figures:
        return self.ended(*Ending)

    @property
    def spent(self) -> Figures:
        """Everything: closed segments and the running ones so far."""
        return self.closed + self.running

    def to_json(self, cost: Cost | None = None) -> dict[str, Any]:
        return {"finished": self.finished.to_json(cost), "failed": self.failed.to_json(cost),
                "preempted": self.preempted.to_json(cost),
                "running": self.running.to_json(cost), "spent": self.spent.to_json(cost)}


@dataclass(frozen=True)
class Budget:
    """A sweep's budget (``budget:``): ``limit`` in ``unit``."""

    unit: str
    limit: float
    on_exhausted: str = "finish"

    def describe(self, amount: float, cost: Cost | None) -> str:
        """``amount`` of this budget's unit, for a person."""
        if self.unit == "cost" and cost is not None:
            return cost.format(amount)
        if self.unit == "steps":
            return f"{amount:,.0f} steps"
        return f"{amount:,.3g} {self.unit.replace('_', '-')}"


def budget_of(spec: SweepSpec) -> Budget | None:
    """``spec``'s budget (None: it has none)."""
    b = spec.budget
    if b.unit is None or b.limit is None:
        return None
    return Budget(b.unit, b.limit, b.on_exhausted)


def cost_of(spec: SweepSpec) -> Cost | None:
    """``spec``'s price (None: no ``cost:``)."""
    c = spec.cost
    return None if c is None else Cost(c.per_gpu_hour, c.per_cpu_hour, c.currency)


def committed(running: Sequence[Usage], finished: Sequence[Usage], unit: str,
              cost: Cost | None) -> float:
    """What the running segments are expected to use still, in ``unit``, after the
    ``finished`` segments (:func:`committed_after`)."""
    return committed_after(running, Totals.of(finished).closed, unit, cost)


def committed_after(running: Sequence[Usage], finished: Figures, unit: str,
                    cost: Cost | None) -> float:
    """What the running segments are expected to use still, in ``unit``: each as much as
    the finished segments (their figures summed: ``Totals.finished``) used on average, less
    what it used so far (nothing while no segment has finished: there is nothing to expect
    from)."""
    if not running or not finished.segments:
        return 0.0
    mean = finished.amount(unit, cost) / finished.segments
    return sum(max(0.0, mean - Figures.of(u).amount(unit, cost)) for u in running)


@dataclass(frozen=True)
class BudgetDecision:
    """Whether new work may start, and one line saying why. Without a budget it always may
    (``budget`` None)."""

    may_start: bool
    reason: str
    budget: Budget | None = None
    #: Spent so far (closed and running segments) and committed by the running ones, in the
    #: budget's unit.
    spent: float = 0.0
    committed: float = 0.0

    @property
    def left(self) -> float | None:
        """What is left to start new work with (None: no budget)."""
        if self.budget is None:
            return None
        return max(0.0, self.budget.limit - self.spent - self.committed)


def decide(budget: Budget | None, totals: Totals, committed_amount: float,
           cost: Cost | None) -> BudgetDecision:
    """New work starts only while what was spent plus what the running trials have
    committed stays below the budget."""
    if budget is None:
        return BudgetDecision(True, "no budget")
    spent = totals.spent.amount(budget.unit, cost)
    used = spent + committed_amount
    of = (f"{budget.describe(spent, cost)} spent"
          + (f" + {budget.describe(committed_amount, cost)} committed" if committed_amount
             else "") + f" of {budget.describe(budget.limit, cost)}")
    if used < budget.limit:
        return BudgetDecision(True, f"{of}; {budget.describe(budget.limit - used, cost)} left",
                              budget, spent, committed_amount)
    return BudgetDecision(False, f"budget spent: {of}", budget, spent, committed_amount)
