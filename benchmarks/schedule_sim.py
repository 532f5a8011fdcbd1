"""The compute section's schedules replayed in a simulation: which configurations each rule
trains how far, at W workers, without a database, processes or a clock of its own.

The real runs (``benchmarks.compute``) cost minutes a seed, so the section runs a few seeds; the
same rules, simulated, run many seeds and targets in seconds. Each is the rule as sweeper and
Optuna apply it, on a task's measures: the synthetic family (``benchmarks.curves``) with the
same noise, or the digits MLP's learning curves (``benchmarks.digits_curves``):

* ``none``: every configuration trains to ``max_resource``;
* ``stopping``: Optuna's ``SuccessiveHalvingPruner`` (sweeper's ``successive_halving`` and, with
  brackets, ``hyperband``): at a rung's step a trial goes on iff its value is within the top
  ``max(1, n // eta)`` of the n values at that rung so far, its own included (so the first
  trials at a rung always go on); otherwise it stops for good;
* ``promotion``: promotion ASHA (``trial_runner.asha``): a trial goes on iff it is in the top
  ``n // eta`` there, otherwise it pauses; a free worker first resumes the best promotable
  paused trial, top rung first, and only then starts the next configuration.

A program that reports its first epoch as step 0 (digits: epoch e as step e - 1) reaches a
rung's step one epoch later than a program that counts from 1: ``offset`` 1, rungs after 2, 4
and 10 epochs instead of 1, 3 and 9. With ``brackets`` b > 1 configuration i belongs to
bracket k (its first rung at ``min_resource * eta**k``) with the weights of Optuna's
``HyperbandPruner``, and is ranked only among its bracket. Time runs in ticks: every busy
worker trains one step a tick, in worker order; a worker freed in a tick takes its next job at
the next. The figures' validation is :func:`benchmarks.compute_figures.simulation_check`: given
a real run's configurations and seed, the simulation trains the same ones to the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks import curves

POLICIES = ("none", "stopping", "promotion")
#: An index and a step: the value it reports there (noisy) and the score a target judges.
Measure = Callable[[int, int], float]


@dataclass(frozen=True)
class Schedule:
    min_resource: int
    max_resource: int
    eta: int
    brackets: int = 1
    #: The steps trained when the program reports step 0 (see the module's docstring).
    offset: int = 0


def bracket_weights(brackets: int, eta: int) -> list[int]:
    """Optuna's ``HyperbandPruner`` share of trials per bracket (bracket 0: the most
    aggressive): ``ceil(b / (s + 1)) * eta**s`` with ``s = b - 1 - k``."""
    return [math.ceil(brackets / (brackets - k)) * eta ** (brackets - 1 - k)
            for k in range(brackets)]


def bracket_of(index: int, weights: Sequence[int]) -> int:
    """A deterministic, well-spread draw of a bracket with ``weights`` (golden-ratio steps)."""
    u, total, acc = (index * 0.6180339887498949) % 1.0, sum(weights), 0
    for k, w in enumerate(weights):
        acc += w
        if u < acc / total:
            return k
    return len(weights) - 1


def rung_steps(bracket: int, s: Schedule) -> tuple[int, ...]:
    """The steps trained (``offset`` included) at which a trial of ``bracket`` meets a rung."""
    out, step = [], s.min_resource * s.eta ** bracket
    while step < s.max_resource:
        out.append(step + s.offset)
        step *= s.eta
    return tuple(out)


class _Rungs:
    """Every value reported at each (bracket, rung step), and the rule that reads them."""

    def __init__(self, policy: str, eta: int) -> None:
        self.policy, self.eta = policy, eta
        self.values: dict[tuple[int, int], dict[int, float]] = {}

    def add(self, bracket: int, step: int, index: int, value: float) -> None:
        self.values.setdefault((bracket, step), {})[index] = value

    def stops(self, bracket: int, step: int, index: int, value: float) -> bool:
        """``index`` reports ``value`` at a rung's step: whether it stops (or pauses) there."""
        self.add(bracket, step, index, value)
        return not self.goes_on(bracket, step, index)

    def goes_on(self, bracket: int, step: int, index: int) -> bool:
        rung = self.values[(bracket, step)]
        ranked = sorted((v, i) for i, v in rung.items())
        top = len(ranked) // self.eta
        if self.policy == "stopping":
            return rung[index] <= ranked[max(top, 1) - 1][0]
        return top > 0 and (rung[index], index) <= ranked[top - 1]


class _Gate:
    """sweeper's budget gate (:func:`sweeper.accounting.decide`) in steps: new work starts
    while spent plus what the running segments have committed (the finished segments' mean,
    less what each has used so far) stays below the budget; None: no budget."""

    def __init__(self, budget: int | None) -> None:
        self.budget = budget
        self.finished: list[int] = []  # steps of each finished segment
        self.running: dict[int, int] = {}  # index -> steps of its running segment so far

    def may_start(self, spent: int) -> bool:
        if self.budget is None:
            return True
        mean = sum(self.finished) / len(self.finished) if self.finished else 0.0
        committed = sum(max(0.0, mean - used) for used in self.running.values())
        return spent + committed < self.budget

    def step(self, index: int) -> None:
        self.running[index] = self.running.get(index, 0) + 1

    def end(self, index: int) -> None:
        self.finished.append(self.running.pop(index, 0))


def _promotable(paused: dict[int, int], rungs: Sequence[tuple[int, ...]],
                bracket: Sequence[int], table: _Rungs) -> list[tuple[int, float, int]]:
    """The paused trials that may go on, as (minus rung, value, index): the least first."""
    return [(-rungs[i].index(at), table.values[(bracket[i], at)][i], i)
            for i, at in paused.items() if table.goes_on(bracket[i], at, i)]


def _placed(n: int, policy: str, s: Schedule) -> tuple[list[int], list[tuple[int, ...]]]:
    """Each configuration's bracket and its rungs' steps (none without a rule)."""
    if policy == "none":
        return [0] * n, [()] * n
    weights = bracket_weights(s.brackets, s.eta)
    bracket = [bracket_of(i, weights) for i in range(n)]
    return bracket, [rung_steps(b, s) for b in bracket]


def simulate(n: int, value: Measure, score: Measure, policy: str, s: Schedule,
             workers: int, budget: int | None = None) -> list[curves.Event]:
    """The steps trained, in time order (an event's ``t`` is its tick). ``budget`` (steps):
    ``n`` is then the pool of configurations; nothing new starts or is promoted once the
    gate says no (the running segments finish, as with ``on_exhausted: finish``)."""
    gate = _Gate(budget)
    bracket, rungs = _placed(n, policy, s)
    table = _Rungs(policy, s.eta)
    paused: dict[int, int] = {}  # index -> the rung step it paused at
    progress = [0] * n
    started = 0

    def next_job() -> int | None:
        nonlocal started
        if not gate.may_start(len(events)):
            return None
        ready = _promotable(paused, rungs, bracket, table)
        if ready:
            i = min(ready)[2]
            del paused[i]
            return i
        if started < n:
            started += 1
            return started - 1
        return None

    events: list[curves.Event] = []
    busy: list[int | None] = [None] * workers
    tick = 0
    while True:
        busy = [b if b is not None else next_job() for b in busy]
        if all(b is None for b in busy):  # nothing runs, nothing may start: the end
            return events
        tick += 1
        for w, i in enumerate(busy):
            if i is None:
                continue
            step = progress[i] = progress[i] + 1
            gate.step(i)
            v = value(i, step)
            events.append(curves.Event(float(tick), i, step, v, score(i, step)))
            done = step >= s.max_resource
            if step in rungs[i] and table.stops(bracket[i], step, i, v):
                if policy == "promotion":
                    paused[i] = step
                done = True
            if done:
                gate.end(i)
                busy[w] = None


def curve_measures(configs: Sequence[dict[str, float]], seed: int) -> tuple[Measure, Measure]:
    """The synthetic family's measures: reported values with the curve task's noise
    (``curves.noise(seed, index, step)``), scores the noise-free curve."""
    return (lambda i, k: curves.quality(configs[i], k) + curves.noise(seed, i, k),
            lambda i, k: curves.quality(configs[i], k))


def on_curves(configs: Sequence[dict[str, float]], seed: int, policy: str, s: Schedule,
              workers: int, budget: int | None = None) -> list[curves.Event]:
    """:func:`simulate` on the synthetic family (:func:`curve_measures`)."""
    return simulate(len(configs), *curve_measures(configs, seed), policy, s, workers, budget)


def trained_to_end(events: Sequence[curves.Event], max_resource: int) -> set[int]:
    return {e.index for e in events if e.step == max_resource}
