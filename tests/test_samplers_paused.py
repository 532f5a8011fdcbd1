"""sweeper.samplers.PausedAsPruned: under promotion ASHA a paused trial (WAITING, with values up
to its rung) is shown to the sampler as PRUNED at its rung. Early in such a sweep nothing has
completed, so TPE without it sees no trial at all and samples at random; with it, TPE ranks the
paused trials by their rung values and proposes near the best of them."""

from __future__ import annotations

from statistics import median

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from sweeper._optuna_compat import storage_of, study_id_of
from sweeper.protocol import PAUSED_ATTR, RUNG_ATTR
from sweeper.samplers import PausedAsPruned
from sweeper.spec.registry import METHOD_INFO

SPACE: dict[str, BaseDistribution] = {"x": FloatDistribution(0.0, 1.0)}
BEST = 0.8  # the rung value (x - BEST)**2 is lowest there
N = 12


def _paused_sweep() -> optuna.Study:
    """N trials paused at rung 0 (step 1), x spread over [0, 1]; one enqueued trial that never
    ran (WAITING too, not paused); nothing finished."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize")
    for i in range(N):
        x = (i + 0.5) / N
        study.add_trial(create_trial(state=TrialState.WAITING, params={"x": x},
                                     distributions=SPACE, intermediate_values={0: 1.0,
                                                                               1: (x - BEST) ** 2},
                                     user_attrs={PAUSED_ATTR: True, RUNG_ATTR: 0}))
    study.enqueue_trial({"x": 0.05})
    return study


def _proposal(sampler: optuna.samplers.BaseSampler) -> float:
    """What a new trial of the paused sweep gets (a fresh sweep each time: one ask, alone; not
    ``study.ask()``, which would take a WAITING trial)."""
    study = _paused_sweep()
    study.sampler = sampler
    trial = optuna.Trial(study, storage_of(study).create_new_trial(study_id_of(study)))
    return float(trial.suggest_float("x", 0.0, 1.0))


def _tpe(seed: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(seed=seed, **METHOD_INFO["tpe"].defaults)


def test_tpe_proposes_near_the_best_paused_trials_it_otherwise_does_not_see() -> None:
    seeds = range(10)
    shown = [_proposal(PausedAsPruned(_tpe(s))) for s in seeds]
    unseen = [_proposal(_tpe(s)) for s in seeds]
    # Without the wrapper: no finished trial, so TPE's random start-up, all over [0, 1].
    assert median(abs(x - BEST) for x in unseen) > 0.2
    # With it: 12 "pruned" trials, the best near x = 0.8: every proposal near there.
    assert max(abs(x - BEST) for x in shown) < 0.15


def test_the_view_shows_paused_trials_as_pruned_and_changes_nothing() -> None:
    from sweeper._optuna_compat._views import PrunedView
    from sweeper.samplers import is_paused

    study = _paused_sweep()
    view = PrunedView(study, is_paused)
    pruned = view.get_trials(states=(TrialState.PRUNED,))
    assert [t.number for t in pruned] == list(range(N))
    assert pruned[3].intermediate_values == study.trials[3].intermediate_values
    assert pruned[3].params == study.trials[3].params
    # The trial that never ran stays WAITING; nothing else is listed as PRUNED or WAITING.
    assert [t.number for t in view.get_trials(states=(TrialState.WAITING,))] == [N]
    assert [t.state for t in view.get_trials()] == [TrialState.PRUNED] * N + [TrialState.WAITING]
    assert view.get_trials(states=(TrialState.COMPLETE,)) == []
    # The study itself still has them WAITING (the view copies; it writes nothing).
    assert {t.state for t in study.trials} == {TrialState.WAITING}
    assert {t.state for t in study.get_trials(deepcopy=False)} == {TrialState.WAITING}
