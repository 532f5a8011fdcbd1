"""Open-ended search under a budget on both storages (a budget, no ``trials``): one runner
slot runs index after index (:mod:`trial_runner.chain`, what a pod of the open-ended Job
runs) until the budget gate says no; under promotion ASHA a runner with nothing to promote
starts a new configuration instead of ending the sweep, and once the budget is spent the
paused trials end PRUNED."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.accounting import BUDGET_RULE
from sweeper.spec import MAX_INDEXES
from sweeper.study import create_or_resume, open_storage
from sweeper.study.ledger import sweep_ledger
from sweeper.study.record import indexes_to_run
from tests.support.asha_objectives import curve
from tests.support.helpers import make_spec
from trial_runner.chain import run_chain
from trial_runner.outcome import Outcome
from trial_runner.promotion import run_scheduled
from trial_runner.runner import RunnerSettings

ASHA = {"type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9,
        "reduction_factor": 3}


def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=30.0,
                          checkpoint_root=tmp_path / "ckpt")


def _asha_spec(budget: int) -> Any:
    return make_spec(name="open-asha", method="tpe", trials=None, parallelism=1,
                     scheduler=ASHA, budget={"steps": budget},
                     sampler={"n_startup_trials": 4},
                     trial={"entrypoint": "tests.support.asha_objectives:curve",
                            "fixed": {"steps": 9}},
                     parameters={"a": {"type": "int", "low": 0, "high": 8}})


def test_a_spec_without_trials_beside_a_budget_is_open_ended() -> None:
    spec = _asha_spec(60)
    assert spec.open_ended and spec.trials == MAX_INDEXES and spec.index_count is None
    closed = make_spec(name="open-asha", method="tpe", trials=20, budget={"steps": 60})
    assert not closed.open_ended and closed.index_count == 20
    assert spec.spec_hash != closed.spec_hash  # never taken for the same sweep
    from sweeper.spec import load_stored

    assert load_stored(spec.to_dict(), "<study>") == spec


def test_budgeted_asha_starts_new_configurations_and_ends_with_its_paused_trials_pruned(
        storage_url: str, tmp_path: Path) -> None:
    budget = 60
    sweep, _ = create_or_resume(open_storage(storage_url), _asha_spec(budget))
    outcomes: list[Outcome] = []
    # The first index pauses at rung 0 and nothing is promotable: an open-ended sweep is not
    # over (a closed one of 1 trial would end here with it PRUNED): it stays paused.
    first = run_scheduled(sweep, 0, curve, settings(tmp_path))
    assert first.state == protocol.PAUSED
    (t0,) = sweep.study().trials
    assert t0.state == TrialState.WAITING and t0.user_attrs[protocol.PAUSED_ATTR]
    code = run_chain(sweep, range(1, sweep.spec.trials), curve, settings(tmp_path),
                     trial_hook=None, log=outcomes.append, on_index=lambda i: None)
    assert code == protocol.EXIT_OK
    trials = sweep.study().trials
    # new configurations kept coming while paused trials waited: far more than one rung's
    # worth, and the best of them were promoted (to rung 1, some to the end)
    assert len(trials) > 9
    assert max(t.user_attrs.get(protocol.RUNG_ATTR, 0) for t in trials) >= 1
    assert any(t.state == TrialState.COMPLETE for t in trials)
    # the budget ended it: its stop is recorded, nothing is left paused (PRUNED, rung kept)
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.rule == BUDGET_RULE
    assert outcomes[-1].state == protocol.STOPPED
    assert not [t for t in trials if t.state in (TrialState.WAITING, TrialState.RUNNING)]
    assert {t.state for t in trials} <= {TrialState.COMPLETE, TrialState.PRUNED}
    spent = sweep_ledger(sweep).totals.spent.steps
    assert budget <= spent <= budget + 9  # one runner: at most one trial's run past it
    # the indexes started are 0 .. n-1 in order, each once; the table lists just those
    indexes = sorted(t.user_attrs[protocol.INDEX_ATTR] for t in trials)
    assert indexes == list(range(len(trials)))
    table = sweep.storage.index_table(sweep.study_id, sweep.spec.index_count)
    assert [s.index for s in table] == indexes


def test_a_slots_log_holds_each_index_between_its_header_and_end_line(
        sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What a pod's runner writes (trial_runner.main's hooks): before each index's attempt
    its header, after its outcome an end line; ``sweeper logs`` cuts the pod's log there."""
    from sweeper.runlogs import split_attempts
    from trial_runner.main import PodLogParts

    spec = make_spec(name="open-log", method="tpe", trials=None, parallelism=2,
                     budget={"steps": 10},
                     trial={"entrypoint": "tests.support.asha_objectives:curve",
                            "fixed": {"steps": 3}},
                     parameters={"a": {"type": "int", "low": 0, "high": 8}})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    parts = PodLogParts()
    capsys.readouterr()
    code = run_chain(sweep, range(1, spec.trials, 2), curve, settings(tmp_path),
                     trial_hook=parts.started, log=parts.ended, on_index=lambda i: None)
    assert code == protocol.EXIT_OK
    captured = capsys.readouterr()  # headers on stdout; outcome and end lines on stderr
    sections = split_attempts("".join(_merged(captured.out, captured.err)))
    ran = sorted(t.user_attrs[protocol.INDEX_ATTR] for t in sweep.study().trials)
    assert ran == [1, 3, 5, 7] and len(sections) == len(ran)  # 3 steps each: 4th refused
    for index, section in zip(ran, sections, strict=True):
        assert section.header is not None and section.header.index == index
        lines = section.text.splitlines()
        assert protocol.parse_log_header(lines[0]) == section.header
        assert protocol.parse_log_end(lines[-1]) == (index, section.header.trial_number)


def _merged(out: str, err: str) -> list[str]:
    """A pod's log from the two streams: each end line (stderr) right before the next header
    (stdout), as the runner writes them one after the other."""
    ends = [line + "\n" for line in err.splitlines() if protocol.parse_log_end(line)]
    merged: list[str] = []
    for line in out.splitlines(keepends=True):
        if protocol.parse_log_header(line) and merged and ends:
            merged.append(ends.pop(0))
        merged.append(line)
    return merged + ends


def test_a_launch_again_runs_the_unfinished_then_fresh_indexes(storage_url: str,
                                                               tmp_path: Path) -> None:
    sweep, created = create_or_resume(open_storage(storage_url), _asha_spec(1000))
    assert indexes_to_run(sweep, created=created)[:3] == [0, 1, 2]
    for i in range(3):
        run_scheduled(sweep, i, curve, settings(tmp_path))
    again, created = create_or_resume(open_storage(storage_url), _asha_spec(1000))
    todo = indexes_to_run(again, created=created)
    # 0..2 paused (not finished): run again (each finds its trial paused and puts it back)
    assert todo[:4] == [0, 1, 2, 3] and todo[-1] == MAX_INDEXES - 1


@pytest.mark.parametrize("budget", [25])
def test_a_planned_method_with_a_budget_stops_early_in_index_order(
        storage_url: str, tmp_path: Path, budget: int) -> None:
    def ten_steps(ctx: Any) -> float:
        for step in range(1, 11):
            ctx.report(step, loss=1.0 / step)
        return float(ctx.params["a"])

    spec = make_spec(name="planned", method="random", trials=12, parallelism=1,
                     budget={"steps": budget})
    sweep, _ = create_or_resume(open_storage(storage_url), spec)
    outcomes: list[Outcome] = []
    run_chain(sweep, range(12), ten_steps, settings(tmp_path), trial_hook=None,
              log=outcomes.append, on_index=lambda i: None)
    states = {t.user_attrs[protocol.INDEX_ATTR]: t.state for t in sweep.study().trials}
    # 3 trials of 10 steps reach 25; the indexes after them stay WAITING, in index order
    assert [i for i, s in sorted(states.items()) if s == TrialState.COMPLETE] == [0, 1, 2]
    assert [i for i, s in sorted(states.items()) if s == TrialState.WAITING] == \
        list(range(3, 12))
    assert outcomes[-1].state == protocol.STOPPED and len(outcomes) == 4
