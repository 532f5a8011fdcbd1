"""The ledger's arithmetic (sweeper.accounting): a segment's usage from its claim, totals by
ending, money from hours, and the budget's decision with what running trials committed."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from sweeper.accounting import (
    Budget,
    Cost,
    Ending,
    Figures,
    OpenSegment,
    Totals,
    Usage,
    budget_of,
    committed,
    cost_of,
    decide,
    ending_of_signal,
    spec_resources,
    trial_resources,
)
from sweeper.protocol import usage_key
from sweeper.spec import load_stored, parse_spec_dict
from tests.support.helpers import make_spec

T0 = datetime(2026, 1, 1, 12, 0, 0)


def test_a_segment_closes_with_its_own_wall_time_and_only_the_steps_it_trained() -> None:
    seg = OpenSegment("c1", gpus=2.0, cpus=8.0, from_step=30, started=T0)
    usage = seg.close(Ending.COMPLETE, end=T0 + timedelta(seconds=90), last_step=90)
    assert (usage.wall_s, usage.steps, usage.gpu_s, usage.cpu_s) == (90.0, 60, 180.0, 0.0)
    assert seg.key == usage_key("c1") == "sweeper:usage:c1"
    assert OpenSegment.parse(seg.encode()) == seg
    assert Usage.parse(usage.encode()) == usage
    # a clock that went backwards, or no step reported: nothing negative
    odd = seg.close(Ending.FAILED, end=T0 - timedelta(seconds=5), last_step=None)
    assert (odd.wall_s, odd.steps) == (0.0, 0)


@pytest.mark.parametrize("value", [None, 3, "x", {"claim": 1}, {"claim": "c", "started": "x"}])
def test_a_value_that_is_no_segment_parses_to_none(value: object) -> None:
    assert OpenSegment.parse(value) is None
    assert Usage.parse(value) is None


def test_cpu_hours_are_a_cpu_trials_and_gpu_hours_a_gpu_trials() -> None:
    cpu = Usage(3600.0, 0.0, 4.0, 10, Ending.COMPLETE)
    gpu = Usage(1800.0, 2.0, 8.0, 10, Ending.COMPLETE)
    assert (cpu.cpu_s, cpu.gpu_s) == (4 * 3600.0, 0.0)
    assert (gpu.cpu_s, gpu.gpu_s) == (0.0, 3600.0)
    assert trial_resources(1, None) == (1.0, 1.0)
    assert trial_resources(2, "500m", nodes=2) == (4.0, 1.0)
    assert trial_resources(0, "4") == (0.0, 4.0)


def test_totals_split_by_ending_and_count_the_running_as_spent() -> None:
    closed = [Usage(3600, 1, 1, 100, Ending.COMPLETE), Usage(3600, 1, 1, 50, Ending.PAUSED),
              Usage(1800, 1, 1, 20, Ending.FAILED), Usage(900, 2, 1, 5, Ending.PREEMPTED)]
    running = [Usage(360, 1, 1, 7, Ending.COMPLETE)]
    totals = Totals.of(closed, running)
    assert totals.finished.gpu_hours == pytest.approx(2.0)
    assert totals.finished.steps == 150
    assert totals.failed.gpu_hours == pytest.approx(0.5)
    assert totals.preempted.gpu_hours == pytest.approx(0.5)
    assert totals.running.gpu_hours == pytest.approx(0.1)
    assert totals.spent.gpu_hours == pytest.approx(3.1)
    assert totals.spent.steps == 182
    price = Cost(2.5, 0.05)
    assert totals.to_json(price)["spent"]["cost"] == pytest.approx(3.1 * 2.5)
    assert Figures(gpu_hours=1.0, cpu_hours=10.0).amount("cost", price) == pytest.approx(3.0)


def test_new_work_starts_only_below_the_budget_with_what_is_committed() -> None:
    budget = Budget("gpu_hours", 3.0)
    done = [Usage(3600, 1, 1, 10, Ending.COMPLETE)] * 2  # 1 GPU-hour each
    running = [Usage(1800, 1, 1, 5, Ending.COMPLETE)]  # half way through
    totals = Totals.of(done, running)
    owed = committed(running, done, "gpu_hours", None)
    assert owed == pytest.approx(0.5)  # the mean finished segment, less what it used
    decision = decide(budget, totals, owed, None)
    assert not decision.may_start  # 2.5 spent + 0.5 committed: nothing left
    assert decision.reason.startswith("budget spent: 2.5 gpu-hours spent + 0.5 gpu-hours")
    assert decision.left == 0.0
    more = decide(Budget("gpu_hours", 4.0), totals, owed, None)
    assert more.may_start and more.left == pytest.approx(1.0)
    assert decide(None, totals, owed, None).may_start
    # nothing finished yet: nothing to expect from, nothing committed
    assert committed(running, [], "gpu_hours", None) == 0.0


def test_an_outside_sigterm_is_preemption_and_sweepers_own_sigint_a_pause() -> None:
    assert ending_of_signal(15) is Ending.PREEMPTED
    assert ending_of_signal(2) is Ending.PAUSED
    assert [e for e in Ending if e.finished] == [Ending.COMPLETE, Ending.PRUNED, Ending.PAUSED]


def test_budget_and_cost_come_from_the_spec_and_survive_the_record() -> None:
    spec = make_spec(method="random", trials=4, trial={"resources": {"gpu": 2}},
                     budget={"cost": 50, "on_exhausted": "stop"},
                     cost={"per_gpu_hour": 2.5, "per_cpu_hour": 0.05, "currency": "EUR"})
    assert budget_of(spec) == Budget("cost", 50.0, "stop")
    assert cost_of(spec) == Cost(2.5, 0.05, "EUR")
    assert spec_resources(spec) == (2.0, 1.0)
    record = spec.to_dict()
    assert record["budget"] == {"cost": 50.0, "on_exhausted": "stop"}
    for back in (load_stored(record), parse_spec_dict(record)):
        assert (back.budget, back.cost) == (spec.budget, spec.cost)
    # neither is part of what defines the trials: a larger budget is the same sweep
    plain = make_spec(method="random", trials=4, trial={"resources": {"gpu": 2}})
    assert plain.spec_hash == spec.spec_hash
    assert "budget" not in plain.to_dict() and "cost" not in plain.to_dict()
    assert budget_of(plain) is None and cost_of(plain) is None
