"""What a sweep spent, as ``sweeper status`` shows it: the totals by how the work ended, the
budget and what is left of it, whether the sweep ended on its budget, and the figures of each
index (``--format json``). Read-only: nothing is recorded here (the gate records the budget's
stop, :mod:`sweeper.study.ledger`). The CLI only renders what these functions return."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sweeper.accounting import (
    BUDGET_RULE,
    Budget,
    BudgetDecision,
    Cost,
    Figures,
    Totals,
    budget_of,
    cost_of,
)
from sweeper.study.ledger import Ledger, decision_of, sweep_ledger
from sweeper.study.record import Sweep
from sweeper.study.values import IndexStatus

__all__ = ["Spending", "index_record", "shown_state", "spending_of", "summary_lines",
           "summary_record"]


@dataclass(frozen=True)
class Spending:
    """A sweep's ledger with its budget and price."""

    book: Ledger
    budget: Budget | None
    decision: BudgetDecision
    cost: Cost | None
    #: The budget's stop as recorded (its reason), when the sweep ended on its budget.
    ended_on_budget: str | None = None


def spending_of(sweep: Sweep) -> Spending:
    """The sweep's spending now: one query for the ledger, one for the stop."""
    book = sweep_ledger(sweep)
    state = sweep.storage.stop_state(sweep.study_id)
    ended = state.reason if state is not None and state.stopped and \
        state.rule == BUDGET_RULE else None
    return Spending(book, budget_of(sweep.spec), decision_of(sweep, book), cost_of(sweep.spec),
                    ended)


def _figures(fig: Figures, cost: Cost | None) -> str:
    parts = []
    if fig.gpu_hours or not fig.cpu_hours:
        parts.append(f"{fig.gpu_hours:,.3g} GPU-hours")
    if fig.cpu_hours:
        parts.append(f"{fig.cpu_hours:,.3g} CPU-hours")
    parts.append(f"{fig.steps:,} steps")
    if cost is not None:
        parts.append(cost.format(cost.of(fig.gpu_hours, fig.cpu_hours)))
    return ", ".join(parts)


def summary_lines(sp: Spending) -> list[str]:
    """status's lines: what was spent (and on what), the budget, the end on it."""
    t = sp.book.totals
    lines = [f"spent: {_figures(t.spent, sp.cost)} (finished {_figures(t.finished, None)}; "
             f"failed {_figures(t.failed, None)}; preempted {_figures(t.preempted, None)}; "
             f"running {_figures(t.running, None)})"]
    if sp.budget is not None:
        d = sp.decision
        left = d.left or 0.0
        lines.append(f"budget: {sp.budget.describe(sp.budget.limit, sp.cost)}"
                     f" ({sp.budget.unit.replace('_', '-')}, on_exhausted: "
                     f"{sp.budget.on_exhausted}); {sp.budget.describe(d.spent, sp.cost)} spent"
                     + (f" + {sp.budget.describe(d.committed, sp.cost)} committed"
                        if d.committed else "")
                     + f"; {sp.budget.describe(left, sp.cost)} left")
    if sp.ended_on_budget is not None:
        lines.append(f"the sweep ended on its budget: {sp.ended_on_budget}")
    return lines


def _totals_record(t: Totals, cost: Cost | None) -> dict[str, Any]:
    return t.to_json(cost)


def summary_record(sp: Spending) -> dict[str, Any]:
    """status --format json's ``spending``: the totals, the budget, its end."""
    d = sp.decision
    return {
        "totals": _totals_record(sp.book.totals, sp.cost),
        "currency": sp.cost.currency if sp.cost is not None else None,
        "budget": None if sp.budget is None else {
            "unit": sp.budget.unit, "limit": sp.budget.limit,
            "on_exhausted": sp.budget.on_exhausted, "spent": d.spent,
            "committed": d.committed, "left": d.left or 0.0,
            "may_start": d.may_start},
        "ended_on_budget": sp.ended_on_budget is not None,
        "budget_stop_reason": sp.ended_on_budget,
    }


def index_record(sp: Spending, index: int) -> dict[str, Any]:
    """One index's figures (every attempt of it), for status --format json."""
    t = sp.book.by_index.get(index, Totals())
    return _totals_record(t, sp.cost)


def shown_state(sp: Spending, s: IndexStatus) -> str:
    """The state status shows for an index: PREEMPTED where its latest attempt ended so (a
    preempted attempt is not a failure), else the attempt's own state."""
    if s.state != "FAIL" or s.trial_number is None:
        return s.state
    t = sp.book.by_trial.get(s.trial_number)
    if t is not None and t.preempted.segments and not t.failed.segments:
        return "PREEMPTED"
    return s.state
