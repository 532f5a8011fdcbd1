"""A sweep whose ledger has every kind of segment (closed by runners and by the stale closer,
open, finishing, of several GPU and CPU counts), for the tests of the budget gate's sums."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from typing import Any

from optuna.trial import TrialState

from sweeper.accounting import Ending, OpenSegment, Usage
from sweeper.protocol import SEGMENT_ATTR, usage_key
from sweeper.study import create_or_resume, open_storage
from sweeper.study.record import Sweep
from sweeper.study.store import IndexStore
from tests.support.helpers import make_spec

NOW = datetime.now(timezone.utc).replace(tzinfo=None)


def _claimed(store: IndexStore, sweep: Sweep, index: int) -> int:
    (waiting,) = store.attempts(sweep.study_id, index)
    assert store.claim(waiting.trial_id)
    return waiting.trial_id


def _closed(rng: random.Random, ending: str, gpus: float = 1.0, cpus: float = 2.0
            ) -> dict[str, Any]:
    return Usage(round(rng.uniform(0.5, 5000.0), 3), gpus, cpus, rng.randint(0, 300),
                 Ending(ending)).encode()


def _open(store: IndexStore, tid: int, claim: str, from_step: int = 0) -> None:
    segment = OpenSegment(claim, 1.0, 2.0, from_step, NOW - timedelta(seconds=90))
    store.set_trial_user_attrs(tid, {SEGMENT_ATTR: segment.encode()})


def _report(store: IndexStore, tid: int, steps: range) -> None:
    store.write_trial(tid, user_attrs={}, params={}, reports=[(s, float(s)) for s in steps])


def _finish(store: IndexStore, tid: int, state: TrialState) -> None:
    assert store.set_trial_state_values(tid, state, [1.0] if state == TrialState.COMPLETE
                                        else None)  # type: ignore[attr-defined]


def mixed_sweep(url: str, extra: dict[str, Any] | None = None) -> Sweep:
    """A sweep whose ledger has every kind of segment (``extra``: more attributes of its
    first trial, which completes)."""
    rng = random.Random(38)
    store = open_storage(url)
    sweep = create_or_resume(store, make_spec(name="sums", method="random", trials=9,
                                              budget={"steps": 10**9}))[0]
    t = _claimed(store, sweep, 0)  # paused at a rung, promoted, complete
    store.set_trial_user_attrs(t, {usage_key("a0"): _closed(rng, "paused"),
                                   usage_key("a1"): _closed(rng, "complete"), **(extra or {})})
    _finish(store, t, TrialState.COMPLETE)
    t = _claimed(store, sweep, 1)  # failed, closed by its runner
    store.set_trial_user_attrs(t, {usage_key("b0"): _closed(rng, "failed")})
    assert store.mark_failed(t, "objective raised ValueError")
    t = _claimed(store, sweep, 2)  # its runner died: the stale closer closes it
    _open(store, t, "c0")
    _report(store, t, range(1, 41))
    assert store.mark_failed(t, "heartbeat 99s old: the runner died or froze")
    t = _claimed(store, sweep, 3)  # preempted
    store.set_trial_user_attrs(t, {usage_key("d0"): _closed(rng, "preempted", gpus=2.0)})
    assert store.mark_failed(t, "interrupted by SIGTERM (preempted); resumable")
    t = _claimed(store, sweep, 4)  # running after a pause: one closed, one open segment
    store.set_trial_user_attrs(t, {usage_key("e0"): _closed(rng, "paused")})
    _open(store, t, "e1", from_step=5)
    _report(store, t, range(6, 30))
    t = _claimed(store, sweep, 5)  # running, its runner finishing: its close is written
    _open(store, t, "f0")
    store.set_trial_user_attrs(t, {usage_key("f0"): _closed(rng, "complete")})
    t = _claimed(store, sweep, 6)  # pruned, on half a GPU
    store.set_trial_user_attrs(t, {usage_key("g0"): _closed(rng, "pruned", gpus=0.5)})
    _finish(store, t, TrialState.PRUNED)
    t = _claimed(store, sweep, 7)  # many segments, CPU ones among them
    store.set_trial_user_attrs(t, {usage_key(f"h{k}"): _closed(
        rng, rng.choice(["complete", "paused", "failed", "preempted"]),
        gpus=rng.choice([0.0, 1.0]), cpus=rng.choice([0.25, 1.5, 4.0])) for k in range(60)})
    _finish(store, t, TrialState.COMPLETE)
    _open(store, _claimed(store, sweep, 8), "i0")  # running, nothing reported yet
    return sweep
