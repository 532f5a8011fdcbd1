"""A running trial's writes as the runner makes them: several user attrs, params and reports
in one call of the index store (Optuna commits each separately: a commit, an fsync on
PostgreSQL, per param and per report), then the trial's own copy updated as Optuna's calls
would have left it. Which store holds the trial is the store's business."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

import optuna
from optuna.distributions import BaseDistribution

from sweeper._optuna_compat import backend_of, own_copy, trial_id_of, update_cached_trial

if TYPE_CHECKING:
    from sweeper.study.store import IndexStore
    from sweeper.study.values import NextTake


def store_of(trial: optuna.Trial) -> IndexStore:
    """The index store a trial writes through (under Optuna's trial cache, if any): every
    storage sweeper opens is one (``sweeper.study.open.open_storage``)."""
    return cast("IndexStore", backend_of(trial.storage))


def set_trial_user_attrs(trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """``trial.set_user_attr`` for several keys in one transaction."""
    if not attrs:
        return
    store_of(trial).set_trial_user_attrs(trial_id_of(trial), dict(attrs))
    update_cached_trial(trial, user_attrs=attrs)


def write_trial(trial: optuna.Trial, *, user_attrs: Mapping[str, Any] | None = None,
                params: Mapping[str, tuple[Any, BaseDistribution]] | None = None,
                report: tuple[int, float] | None = None) -> None:
    """What ``suggest_*`` (known values: a planned trial's), ``report(value, step)`` (a finite
    value) and ``set_user_attr`` write for a running trial, in one transaction. Every
    statement is an upsert, so a retry after a lost acknowledgement writes nothing twice."""
    report = new_report(trial, report)
    store(trial, user_attrs=user_attrs, params=params,
          reports=[report] if report is not None else [])


def store(trial: optuna.Trial, *, user_attrs: Mapping[str, Any] | None = None,
          params: Mapping[str, tuple[Any, BaseDistribution]] | None = None,
          reports: Sequence[tuple[int, float]] = ()) -> None:
    """:func:`write_trial`'s one call (no check of the steps: the caller made them new), then
    the trial's own copy updated."""
    if user_attrs or params or reports:
        store_of(trial).write_trial(trial_id_of(trial), user_attrs=dict(user_attrs or {}),
                                    params=dict(params or {}), reports=list(reports))
    update_cached_trial(trial, user_attrs=user_attrs, params=params, reports=reports)


def new_report(trial: optuna.Trial, report: tuple[int, float] | None
               ) -> tuple[int, float] | None:
    """``report``, or None when its step is reported already (Optuna's warning then, as
    ``Trial.report`` keeps the first value)."""
    if report is not None and report[0] in own_copy(trial).intermediate_values:
        trial.report(report[1], report[0])  # the warning; nothing is written
        return None
    return report


def riding_with_finish(trial: optuna.Trial, user_attrs: Mapping[str, Any],
                       reports: Sequence[tuple[int, float]],
                       then: NextTake | None = None) -> AbstractContextManager[bool]:
    """While in the block, a finish of ``trial`` (COMPLETE or PRUNED) writes ``user_attrs`` and
    ``reports`` too, in its one statement, and takes ``then``'s index; yields False when it
    cannot (write them first; nothing is taken)."""
    return store_of(trial).riding_with_finish(trial_id_of(trial), user_attrs, reports, then)


def unwritten(trial: optuna.Trial, *, user_attrs: Mapping[str, Any],
              params: Mapping[str, tuple[Any, BaseDistribution]]
              ) -> tuple[dict[str, Any], dict[str, tuple[Any, BaseDistribution]]]:
    """What of ``user_attrs`` and ``params`` the trial does not have yet, by its own copy
    (what opening it read: a claim may have set the attrs, the enqueue stored a planned
    trial's params). A param it has keeps its value, as a second ``suggest_*`` returns it."""
    own = own_copy(trial)
    return ({k: v for k, v in user_attrs.items() if k not in own.user_attrs
             or own.user_attrs[k] != v},
            {k: v for k, v in params.items() if k not in own.distributions})
