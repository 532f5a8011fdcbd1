"""Optuna's own trial path on sweeper's storage survives a dropped connection: the moment
``study.ask()``, ``trial.suggest_float``, a sampler's read, ``study.tell`` or ``best_trial``
talks to the database, the proxy has PostgreSQL terminate that connection
(``pg_terminate_backend``). Each call must succeed, exactly once, with nothing lost: Optuna's
trial cache routes these through private RDBStorage methods that sweeper's retry layer covers
(sweeper._optuna_compat.RDBStoragePrivateRetries)."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.study import open_storage
from tests.support.faultproxy import FaultProxy

pytestmark = pytest.mark.postgres


@pytest.fixture
def study(proxied_url: str) -> optuna.Study:
    return optuna.create_study(study_name="path", storage=open_storage(proxied_url),
                               sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=2))


def _direct(pg_url: str) -> optuna.Study:
    """The same study read past the proxy (what is really stored)."""
    return optuna.load_study(study_name="path", storage=open_storage(pg_url))


def test_ask_claiming_a_waiting_trial(study: optuna.Study, proxy: FaultProxy,
                                      pg_url: str) -> None:
    study.enqueue_trial({"x": 0.25})
    proxy.arm("terminate", r"UPDATE trials SET state = 'RUNNING'", step="ask")
    trial = study.ask()
    assert proxy.kinds_fired() == ["terminate"]
    assert trial.suggest_float("x", 0, 1) == 0.25
    [stored] = _direct(pg_url).get_trials()
    assert stored.state == TrialState.RUNNING and stored.number == trial.number


def test_ask_creating_a_trial(study: optuna.Study, proxy: FaultProxy, pg_url: str) -> None:
    proxy.arm("terminate", r"INSERT INTO trials \(", step="ask")
    trial = study.ask()
    assert proxy.kinds_fired() == ["terminate"]
    [stored] = _direct(pg_url).get_trials()
    assert stored.state == TrialState.RUNNING and stored.number == trial.number == 0


def test_suggest_float(study: optuna.Study, proxy: FaultProxy, pg_url: str) -> None:
    trial = study.ask()
    proxy.arm("terminate", r"INSERT INTO trial_params", step="suggest")
    x = trial.suggest_float("x", -1, 1)
    assert proxy.kinds_fired() == ["terminate"]
    assert _direct(pg_url).get_trials()[0].params == {"x": x}


def test_a_read_of_the_studys_trials(study: optuna.Study, proxy: FaultProxy,
                                     pg_url: str) -> None:
    """What ask and the samplers read (Optuna's cache calls RDBStorage._get_trials)."""
    for v in (0.1, 0.9, 0.5):  # past n_startup_trials: TPE reads every trial to suggest
        t = study.ask()
        study.tell(t, t.suggest_float("x", 0, 1) + v)
    proxy.arm("terminate", r"^SELECT trials\.trial_id .*\sFROM trials\s", step="read trials")
    trial = study.ask()
    x = trial.suggest_float("x", 0, 1)
    assert proxy.kinds_fired() == ["terminate"]
    assert 0 <= x <= 1 and _direct(pg_url).get_trials()[-1].params == {"x": x}


def test_tell(study: optuna.Study, proxy: FaultProxy, pg_url: str) -> None:
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    proxy.arm("terminate", r"UPDATE trials SET state='COMPLETE'", step="tell")
    study.tell(trial, 0.75)
    assert proxy.kinds_fired() == ["terminate"]
    [stored] = _direct(pg_url).get_trials()
    assert stored.state == TrialState.COMPLETE and stored.values == [0.75]


def test_best_trial(study: optuna.Study, proxy: FaultProxy) -> None:
    for v in (3.0, 1.0, 2.0):
        study.tell(study.ask(), v)
    proxy.arm("terminate", r"^SELECT trials\.trial_id AS trials_trial_id\s+FROM trials JOIN "
              r"trial_values", step="best")
    best = study.best_trial
    assert proxy.kinds_fired() == ["terminate"]
    assert best.value == 1.0 and best.number == 1


def test_optimize_end_to_end_with_a_terminated_connection_in_every_trial(
        study: optuna.Study, proxy: FaultProxy, pg_url: str) -> None:
    """study.optimize: each of 6 trials loses its connection once, at a different call."""
    for pattern in (r"INSERT INTO trials \(", r"INSERT INTO trial_params",
                    r"^SELECT trials\.trial_id .*\sFROM trials\s", r"UPDATE trials SET state=",
                    r"INSERT INTO trial_values", r"^SELECT studies\.study_id"):
        proxy.arm("terminate", pattern, step="optimize")

    study.optimize(lambda t: (t.suggest_float("x", -2, 2) - 1) ** 2, n_trials=6)
    assert len(proxy.kinds_fired()) >= 5
    trials = _direct(pg_url).get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 6
    assert all(t.value == (t.params["x"] - 1) ** 2 for t in trials)
