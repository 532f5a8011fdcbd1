"""A study as a sampler sees it: Optuna's samplers read trials through ``Study._get_trials``
(private); :class:`PrunedView` overrides it, as Optuna's own ``_BracketStudy`` (Hyperband's
view of a study for its pruners) does."""

from __future__ import annotations

import copy
from collections.abc import Callable, Container

import optuna
from optuna.trial import FrozenTrial, TrialState


class PrunedView(optuna.Study):
    """``study`` (the same storage, id, directions and trial cache) whose WAITING trials for
    which ``as_pruned`` is true are listed as PRUNED copies (their params, intermediate values
    and attributes kept); nothing is written, and ``study``'s own trials are not changed."""

    def __init__(self, study: optuna.Study, as_pruned: Callable[[FrozenTrial], bool]) -> None:
        # Not Study.__init__ (it would open the study again): the view shares its state.
        vars(self).update(vars(study))
        self._as_pruned = as_pruned

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        wanted = list(TrialState) if states is None else [s for s in TrialState if s in states]
        if TrialState.PRUNED not in wanted and TrialState.WAITING not in wanted:
            return super()._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        asked = None if states is None else list({*wanted, TrialState.WAITING})
        out: list[FrozenTrial] = []
        for t in super()._get_trials(deepcopy=False, states=asked, use_cache=use_cache):
            if t.state == TrialState.WAITING and self._as_pruned(t):
                if TrialState.PRUNED in wanted:
                    shown = copy.deepcopy(t) if deepcopy else copy.copy(t)  # never t itself
                    shown.state = TrialState.PRUNED
                    out.append(shown)
            elif t.state in wanted:
                out.append(copy.deepcopy(t) if deepcopy else t)
        return out
