"""A sweep's ledger read from its store, and the budget gate: :func:`may_start` is the one
question every starter of new work asks (a runner before a new attempt of an index, before a
promotion, before a PBT member's next interval; the backends before they hand out an index).

What the figures mean and how the gate decides is :mod:`sweeper.accounting` (pure); this
module reads the rows (``IndexStore.ledger``: one query; the gate reads
``IndexStore.ledger_sums`` instead, where the database sums the closed segments and only the
running trials' rows travel) and records the budget's stop
(``protocol.STOP_ATTR``, rule ``budget``) the first time the gate says no, so the runners,
the backends and ``sweeper status`` all see that the sweep ended on its budget, as after a
stop rule. A larger budget launched again lifts that stop (:mod:`sweeper.study.sql.record`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from optuna.trial import TrialState

from sweeper.accounting import (
    BUDGET_RULE,
    Budget,
    BudgetDecision,
    Ending,
    OpenSegment,
    Totals,
    Usage,
    UsageSum,
    budget_of,
    committed_after,
    cost_of,
    decide,
    is_usage_key,
)
from sweeper.protocol import SEGMENT_ATTR
from sweeper.study.record import Sweep
from sweeper.study.store import IndexStore
from sweeper.study.values import FINISHED, LedgerRow, LedgerSums

__all__ = ["BUDGET_RULE", "Balance", "BudgetDecision", "Ledger", "decision_of", "may_start",
           "read_balance", "read_ledger", "sweep_ledger"]


@dataclass(frozen=True)
class Ledger:
    """What a sweep's trials consumed: closed segments and the running ones so far, in all
    and by index, and by trial number (for export and the dashboard's attributes)."""

    closed: tuple[Usage, ...] = ()
    running: tuple[Usage, ...] = ()
    totals: Totals = field(default_factory=Totals)
    by_index: Mapping[int, Totals] = field(default_factory=dict)
    by_trial: Mapping[int, Totals] = field(default_factory=dict)
    #: Trials (numbers) that completed or were pruned.
    finished_trials: int = 0

    @property
    def finished_segments(self) -> tuple[Usage, ...]:
        return tuple(u for u in self.closed if u.ending.finished)

    @property
    def balance(self) -> Balance:
        return Balance(self.totals, self.running, self.finished_trials)


@dataclass(frozen=True)
class Balance:
    """What the budget gate decides from: the sweep's totals, its running segments so far,
    how many trials completed or were pruned. The same from the whole ledger
    (:attr:`Ledger.balance`) as from the database's sums (:func:`read_balance`)."""

    totals: Totals
    running: tuple[Usage, ...]
    finished_trials: int


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _usage_of(row: LedgerRow, now: datetime) -> tuple[Usage | None, bool]:
    """(usage, running) of one row: a closed segment, or an open one up to ``now``."""
    try:
        value = json.loads(row.value)
    except ValueError:
        return None, False
    if is_usage_key(row.key):
        return Usage.parse(value), False
    segment = OpenSegment.parse(value) if row.key == SEGMENT_ATTR else None
    if segment is None:
        return None, False
    if row.resumed_from is not None and row.resumed_from > segment.from_step:
        segment = replace(segment, from_step=row.resumed_from)  # a retry's checkpoint
    # The ending of a running segment is a placeholder: only its figures count.
    return segment.close(Ending.COMPLETE, end=now, last_step=row.last_step), True


def _split(rows: list[LedgerRow], now: datetime
           ) -> tuple[list[tuple[LedgerRow, Usage]], list[tuple[LedgerRow, Usage]]]:
    """(closed, running) usages of the rows; an open segment whose usage is written already
    (its runner is finishing) counts once, closed."""
    closed_keys = {(r.number, r.key) for r in rows if is_usage_key(r.key)}
    closed: list[tuple[LedgerRow, Usage]] = []
    running: list[tuple[LedgerRow, Usage]] = []
    for row in rows:
        usage, is_running = _usage_of(row, now)
        if usage is None:
            continue
        if not is_running:
            closed.append((row, usage))
        elif (row.number, _open_key(row)) not in closed_keys:
            running.append((row, usage))
    return closed, running


def _open_key(row: LedgerRow) -> str | None:
    segment = OpenSegment.parse(json.loads(row.value))
    return segment.key if segment is not None else None


def read_ledger(rows: list[LedgerRow], now: datetime | None = None) -> Ledger:
    """The ledger of a sweep from its rows (``IndexStore.ledger``); open segments count up to
    ``now`` (this process's clock)."""
    closed, running = _split(rows, now or _now())
    return Ledger(
        closed=tuple(u for _, u in closed), running=tuple(u for _, u in running),
        totals=Totals.of((u for _, u in closed), (u for _, u in running)),
        by_index=_grouped(closed, running, lambda r: r.index),
        by_trial=_grouped(closed, running, lambda r: r.number),
        finished_trials=len({r.number for r in rows
                             if r.state in (TrialState.COMPLETE, TrialState.PRUNED)}))


def _grouped(closed: list[tuple[LedgerRow, Usage]], running: list[tuple[LedgerRow, Usage]],
             of: Callable[[LedgerRow], int | None]) -> dict[int, Totals]:
    """Totals by ``of(row)`` (an index, a trial number; None: left out)."""
    groups: dict[int, tuple[list[Usage], list[Usage]]] = {}
    for rows, slot in ((closed, 0), (running, 1)):
        for row, usage in rows:
            k = of(row)
            if k is None:
                continue
            groups.setdefault(k, ([], []))[slot].append(usage)
    return {k: Totals.of(c, r) for k, (c, r) in sorted(groups.items())}


def sweep_ledger(sweep: Sweep) -> Ledger:
    """The sweep's ledger now: one query."""
    return read_ledger(sweep.storage.ledger(sweep.study_id))


def read_balance(sums: LedgerSums, now: datetime | None = None) -> Balance:
    """The gate's balance from ``IndexStore.ledger_sums``: the database's sums of the closed
    segments plus the segments the running trials closed, summed alike; their open segments
    up to ``now``."""
    closed, running = _split(list(sums.rows), now or _now())
    summed = [UsageSum(Ending(c.ending), c.gpus, c.cpus, c.wall_ms, c.steps, c.segments)
              for c in sums.closed]
    totals = Totals.summed([*summed, *(UsageSum.of(u) for _, u in closed)],
                           (u for _, u in running))
    finished = sums.finished_trials + len({r.number for r in sums.rows if r.state in FINISHED})
    return Balance(totals, tuple(u for _, u in running), finished)


def decision_of(sweep: Sweep, book: Ledger) -> BudgetDecision:
    """What the gate would say given ``book``, recording nothing (``status`` asks this)."""
    budget = budget_of(sweep.spec)
    return BudgetDecision(True, "no budget") if budget is None else \
        _decision(budget, book.balance, sweep)


def _decision(budget: Budget, book: Balance, sweep: Sweep) -> BudgetDecision:
    cost = cost_of(sweep.spec)
    decision = decide(budget, book.totals,
                      committed_after(book.running, book.totals.finished, budget.unit, cost),
                      cost)
    if budget.unit == "steps" and book.finished_trials and not book.totals.spent.steps:
        return BudgetDecision(False, "budget.steps: trials finished without reporting a step "
                                     "(ctx.report(step, ...), or a `step` metric of a command): "
                                     "a steps budget cannot be counted", budget,
                              decision.spent, decision.committed)
    if not decision.may_start and not book.finished_trials:
        return BudgetDecision(False, f"{decision.reason}, before any trial finished", budget,
                              decision.spent, decision.committed)
    return decision


def may_start(sweep: Sweep, store: IndexStore | None = None) -> BudgetDecision:
    """Whether new work may start under the sweep's budget (always, without one): what was
    spent plus what the running trials have committed must stay below it. The first "no"
    is recorded as the sweep's stop (rule ``budget``); once recorded it stands (one read)
    until a larger budget is launched. A budget stop ignored with ``--ignore-stop`` lets
    everything start."""
    budget = budget_of(sweep.spec)
    if budget is None:
        return BudgetDecision(True, "no budget")
    store = store or sweep.storage
    state = store.stop_state(sweep.study_id)
    if state is not None and state.rule == BUDGET_RULE:
        if not state.stopped:
            return BudgetDecision(True, "budget ignored (--ignore-stop)", budget)
        return BudgetDecision(False, state.reason, budget)
    decision = _decision(budget, read_balance(store.ledger_sums(sweep.study_id)), sweep)
    if not decision.may_start:
        store.record_stop(sweep.study_id, BUDGET_RULE, decision.reason)
    return decision
