"""Read-side summaries: the per-index table and what is left to run."""

from __future__ import annotations

from optuna.trial import TrialState

from sweeper.study import create_or_resume, open_storage
from sweeper.study.record import unfinished_indexes
from tests.support.helpers import make_spec


def test_index_table_and_unfinished(storage_url: str) -> None:
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec(method="tpe"))
    table = storage.index_table(sweep.study_id, sweep.spec.trials)
    assert [s.state for s in table] == ["PENDING"] * 6  # adaptive: nothing enqueued
    tid = storage.new_attempt(sweep.study_id, 2, after=None, params=None)
    assert tid is not None
    storage.set_trial_state_values(tid, TrialState.COMPLETE, [0.5])
    table = storage.index_table(sweep.study_id, sweep.spec.trials)
    assert table[2].state == "COMPLETE" and table[2].values == (0.5,)
    assert unfinished_indexes(table) == [0, 1, 3, 4, 5]


def test_index_table_shows_infinite_values(storage_url: str) -> None:
    """Optuna stores +-inf objective values as NULL plus a type column; the table must not
    turn them into None."""
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())
    for i, value in enumerate([float("inf"), float("-inf"), 2.5]):
        tid = storage.attempts(sweep.study_id, i)[0].trial_id
        storage.set_trial_state_values(tid, TrialState.RUNNING)
        storage.set_trial_state_values(tid, TrialState.COMPLETE, [value])
    table = storage.index_table(sweep.study_id, sweep.spec.trials)
    assert [s.values for s in table[:4]] == [(float("inf"),), (float("-inf"),), (2.5,), None]


def test_best_so_far_is_what_optunas_get_best_trial_says(storage_url: str) -> None:
    """One query for the progress line, ordered as Optuna orders (-inf < finite < +inf),
    in both directions; nothing before a trial completes."""
    import math

    import optuna


    storage = open_storage(storage_url)
    for direction, values in (("minimize", [3.0, 1.5, math.inf, 2.0]),
                              ("maximize", [3.0, -math.inf, 7.5, 7.0]),
                              ("minimize", [2.0, -math.inf, 1.0]),
                              ("maximize", [1.0, math.inf, 9.0])):
        study = optuna.create_study(storage=storage, direction=direction)
        sid = study._study_id  # noqa: SLF001
        assert storage.best_so_far(sid, direction) is None
        study.enqueue_trial({})
        study.ask()  # a RUNNING trial is not a candidate
        for v in values:
            study.tell(study.ask(), v)
        study.tell(study.ask(), state=TrialState.FAIL)
        best = study.best_trial
        assert storage.best_so_far(sid, direction) == (best.number, best.value)
    storage.engine.dispose()
