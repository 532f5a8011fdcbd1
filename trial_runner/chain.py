"""An open-ended sweep's pod on Kubernetes: one slot of the Job (completions = parallelism),
running its indexes ``j, j+S, j+2S, ...`` one after the other until the budget is spent.

Each index runs as anywhere else (:func:`trial_runner.promotion.run_scheduled`: the index
protocol, then ASHA's promotions), and a failed attempt is retried here, in this pod, up to
``trial.retries`` times, so that the next index is not held up by a pod replacement. The
chain ends when an index is not started (the budget gate, or a stop rule, said no: STOPPED),
on a configuration error, or at the end of the index range. A replaced pod (preempted, its
node lost) replays its slot from the start: a finished index costs one lookup, a running
one's stale attempt is retried, so the slot goes on where its predecessor was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sweeper import protocol
from sweeper.study import Sweep
from trial_runner.context import TrialContext
from trial_runner.outcome import Outcome, RunnerSettings
from trial_runner.promotion import run_scheduled
from trial_runner.runner import TrialHook

#: Exit codes after which an index gets no attempt in this pod.
_FINAL = (protocol.EXIT_OK, protocol.EXIT_CONFIG, protocol.EXIT_NO_RETRY)


def run_chain(sweep: Sweep, indexes: Iterable[int], objective: Callable[[TrialContext], Any],
              settings: RunnerSettings, *, trial_hook: TrialHook | None,
              log: Callable[[Outcome], None], on_index: Callable[[int], None]) -> int:
    """Run ``indexes`` in order until one is not started; the pod's exit code: 0 once the
    slot is through (an index that failed for good stays FAIL in the study, as after its
    retries on any backend), the configuration error's code otherwise. ``on_index`` is
    called before each index (the runner sets ``JOB_ID`` there)."""
    for index in indexes:
        on_index(index)
        outcome = _run_to_end(sweep, index, objective, settings, trial_hook, log)
        if outcome.exit_code == protocol.EXIT_CONFIG:
            return protocol.EXIT_CONFIG
        if outcome.state == protocol.STOPPED:
            break
    return protocol.EXIT_OK


def _run_to_end(sweep: Sweep, index: int, objective: Callable[[TrialContext], Any],
                settings: RunnerSettings, trial_hook: TrialHook | None,
                log: Callable[[Outcome], None]) -> Outcome:
    """Attempts of ``index`` until one finishes, it fails for good, or the sweep stops."""
    outcome = run_scheduled(sweep, index, objective, settings, trial_hook=trial_hook, log=log)
    for _ in range(sweep.spec.trial.retries):
        if outcome.exit_code in _FINAL or outcome.state == protocol.STOPPED:
            break
        outcome = run_scheduled(sweep, index, objective, settings, trial_hook=trial_hook,
                                log=log)
    return outcome
