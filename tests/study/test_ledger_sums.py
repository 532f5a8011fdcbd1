"""The budget gate's read (``IndexStore.ledger_sums``): the database sums the closed segments
of the trials that are not RUNNING and sends only the running trials' rows, and the balance
it gives is the whole ledger's, bit for bit, on SQLite and PostgreSQL: closed, open, failed,
preempted, paused and pruned segments, a segment closed by the stale closer, an open segment
whose close is written already, segments of several GPU and CPU counts. A stored segment the
database cannot read as Python does makes it read the whole ledger instead, with the same
result."""

from __future__ import annotations

from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper.accounting import Ending
from sweeper.protocol import usage_key
from sweeper.study.ledger import decision_of, may_start, read_balance, read_ledger, sweep_ledger
from tests.support.ledger_sweeps import NOW, mixed_sweep


def test_the_sums_give_the_whole_ledgers_balance_bit_for_bit(storage_url: str) -> None:
    sweep = mixed_sweep(storage_url)
    store = sweep.storage
    sums = store.ledger_sums(sweep.study_id)
    rows = store.ledger(sweep.study_id)
    # Only the RUNNING trials' rows travel; the others' segments are summed by the database.
    assert {r.state for r in sums.rows} == {TrialState.RUNNING}
    assert len(sums.rows) == 5 and len(rows) == 71
    assert sum(c.segments for c in sums.closed) == 66 and sums.finished_trials == 3

    whole = read_ledger(rows, NOW)
    balance = read_balance(sums, NOW)
    assert balance == whole.balance  # exact: every float the same bits
    totals = balance.totals
    assert [u.steps for u in balance.running] == [24, 0]
    # and the figures are the segments' own, summed
    for ending in Ending:
        mine = [u for u in whole.closed if u.ending == ending]
        fig = totals.ended(ending)
        assert fig.segments == len(mine)
        assert fig.steps == sum(u.steps for u in mine)
        assert fig.gpu_hours == pytest.approx(sum(u.gpu_s for u in mine) / 3600, rel=1e-12)
        assert fig.cpu_hours == pytest.approx(sum(u.cpu_s for u in mine) / 3600, rel=1e-12)
    assert totals.running.steps == 24 and totals.spent.steps == totals.closed.steps + 24
    # the gate says what status says
    assert may_start(sweep).reason == decision_of(sweep, sweep_ledger(sweep)).reason


@pytest.mark.parametrize("odd", [float("nan"), 1e10, "not a number"])
def test_a_segment_sweeper_did_not_write_counts_as_it_always_did(storage_url: str,
                                                                 odd: Any) -> None:
    sweep = mixed_sweep(storage_url, {usage_key("odd"): {
        "wall_s": odd, "gpus": 1.0, "cpus": 1.0, "steps": 3, "ending": "complete"}})
    store = sweep.storage
    sums = store.ledger_sums(sweep.study_id)
    if isinstance(odd, str):  # a string where a number is: 0, in SQL as in Python
        assert sums.closed
    else:  # NaN is not JSON, 10^10 s is not a wall time: the whole ledger, row by row
        assert not sums.closed and len(sums.rows) == 72
    assert read_balance(sums, NOW) == read_ledger(store.ledger(sweep.study_id), NOW).balance
