"""Studies and trials: the private names of ``optuna.Study`` and ``optuna.Trial`` sweeper uses
(see the package's docstring)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial, TrialState

__all__ = ["FrozenStudy"]


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes through (Optuna's cache over an RDBStorage)."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    return study._study_id


def trial_id_of(trial: optuna.Trial | FrozenTrial) -> int:
    """The storage's id of a trial (``number`` counts within a study, this across studies)."""
    return trial._trial_id


def trial_from_frozen(study: optuna.Study, frozen: FrozenTrial) -> optuna.Trial:
    """``optuna.Trial(study, trial_id)`` given the trial its constructor would read (six
    queries): the same attributes, the sampler's ``before_trial`` hook called the same way."""
    from optuna import pruners

    trial = optuna.Trial.__new__(optuna.Trial)
    trial.study = study
    trial._trial_id = frozen._trial_id
    trial.storage = study._storage
    trial._cached_frozen_trial = frozen
    study.sampler.before_trial(pruners._filter_study(study, frozen), frozen)
    trial.relative_search_space = None
    trial._relative_params = None
    trial._fixed_params = frozen.system_attrs.get("fixed_params", {})
    return trial


def reset_trials_cache(study: optuna.Study) -> None:
    """Forget the per-thread list of all trials that samplers read, as ``Study.ask`` does, so
    the next sampler call reads the trials again."""
    study._thread_local.cached_all_trials = None


def tell(study: optuna.Study, number: int, values: Sequence[float] | None,
         state: TrialState) -> None:
    """Finish trial ``number`` as ``study.optimize`` does, without ``Study.tell``'s re-read and
    deep copy. UpdateFinishedTrialError or ValueError when it is finished already."""
    from optuna.study._tell import _tell_with_warning

    _tell_with_warning(study, number, values, state=state, skip_if_finished=False)


def tell_trial(study: optuna.Study, trial: optuna.Trial, values: Sequence[float] | None,
               state: TrialState) -> None:
    """:func:`tell` for a trial this process is running, COMPLETE or PRUNED: what
    ``_tell_with_warning`` does, with the trial's own up-to-date copy instead of re-reading it
    (six queries). UpdateFinishedTrialError when it was finished behind our back (the storage
    checks the state in the statement that writes it)."""
    from optuna import pruners
    from optuna.study._tell import _check_state_and_values, _check_values_are_feasible

    study._thread_local.cached_all_trials = None
    frozen = copy.copy(trial._cached_frozen_trial)
    _check_state_and_values(state, values)
    if state == TrialState.COMPLETE:
        assert values is not None
        problem = _check_values_are_feasible(study, values)
        if problem is not None:
            raise ValueError(problem)
    elif state == TrialState.PRUNED and frozen.last_step is not None:
        last = frozen.intermediate_values[frozen.last_step]
        if _check_values_are_feasible(study, [last]) is None:
            values = [last]
    else:
        raise ValueError(f"tell_trial does not finish a trial as {state.name}")
    floats = [float(v) for v in values] if values is not None else None
    try:
        study.sampler.after_trial(pruners._filter_study(study, frozen), frozen, state, floats)
    finally:
        study._storage.set_trial_state_values(frozen._trial_id, state, floats)


def update_cached_trial(trial: optuna.Trial, *, user_attrs: Mapping[str, Any] | None = None,
                        params: Mapping[str, tuple[Any, BaseDistribution]] | None = None,
                        reports: Sequence[tuple[int, float]] = ()) -> None:
    """Make the trial's own copy show what was written behind Optuna's back (as ``suggest_*``,
    ``report`` and ``set_user_attr`` keep it): its params and steps are not written again."""
    frozen = trial._cached_frozen_trial
    frozen.user_attrs.update(user_attrs or {})
    for name, (value, distribution) in (params or {}).items():
        frozen.distributions[name] = distribution
        frozen.params[name] = value
    for step, value in reports:
        frozen.intermediate_values.setdefault(step, value)


def own_copy(trial: optuna.Trial) -> FrozenTrial:
    """The trial's own copy (its params, reports and user attrs, without a query); not to edit."""
    return trial._cached_frozen_trial


def fixed_params_of(trial: optuna.Trial) -> dict[str, Any]:
    """The params the trial was enqueued with (``enqueue_trial``), which ``suggest_*`` returns."""
    return dict(trial._fixed_params)


def distribution_contains(distribution: BaseDistribution, value: Any) -> bool:
    """Whether ``value`` is one of the distribution's points (TypeError etc. if no such kind)."""
    return distribution._contains(distribution.to_internal_repr(value))

