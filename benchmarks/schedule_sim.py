"""The compute section's schedules replayed in a simulation: which configurations each rule
trains how far, at W workers, without a database, processes or a clock of its own.

The real runs (``benchmarks.compute``) cost minutes a seed, so the section runs a few seeds; the
same rules, simulated, run many seeds and targets in seconds. Each is the rule as sweeper and
Optuna apply it, on the synthetic family (``benchmarks.curves``) with the same noise:

* ``none``: every configuration trains to ``max_resource``;
* ``stopping``: Optuna's ``SuccessiveHalvingPruner`` (sweeper's ``successive_halving`` and, with
  brackets, ``hyperband``): at a rung's step a trial goes on iff its value is within the top
  ``max(1, n // eta)`` of the n values at that rung so far, its own included (so the first
  trials at a rung always go on); otherwise it stops for good;
* ``promotion``: promotion ASHA (``trial_runner.asha``): a trial goes on iff it is in the top
  ``n // eta`` there, otherwise it pauses; a free worker first resumes the best promotable
  paused trial, top rung first, and only then starts the next configuration.

With ``brackets`` b > 1 configuration i belongs to bracket k (its first rung at
``min_resource * eta**k``) with the weights of Optuna's ``HyperbandPruner``, and is ranked only
among its bracket. Time runs in ticks: every busy worker trains one step a tick, in worker order;
a worker freed in a tick takes its next job at the next. The figures' validation is
:func:`benchmarks.compute_notes.simulation_check`: given a real run's configurations and seed,
the simulation trains the same ones to the end.
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
    out, step = [], s.min_resource * s.eta ** bracket
    while step < s.max_resource:
        out.append(step)
        step *= s.eta
    return tuple(out)


class _Rungs:
    """Every value reported at each (bracket, rung step), and the rule that reads them."""

    def __init__(self, policy: str, eta: int) -> None:
        self.policy, self.eta = policy, eta
        self.values: dict[tuple[int, int], dict[int, float]] = {}

    def add(self, bracket: int, step: int, index: int, value: float) -> None:
        self.values.setdefault((bracket, step), {})[index] = value

    def goes_on(self, bracket: int, step: int, index: int) -> bool:
        rung = self.values[(bracket, step)]
        ranked = sorted((v, i) for i, v in rung.items())
        top = len(ranked) // self.eta
        if self.policy == "stopping":
            return rung[index] <= ranked[max(top, 1) - 1][0]
        return top > 0 and (rung[index], index) <= ranked[top - 1]


def simulate(n: int, value: Measure, score: Measure, policy: str, s: Schedule,
             workers: int) -> list[curves.Event]:
    """The steps trained, in time order (an event's ``t`` is its tick)."""
    sim = _Simulation(n, value, score, policy, s)
    busy: list[int | None] = [None] * workers
    tick = 0
    while True:
        busy = [b if b is not None else sim.next_job() for b in busy]
        if all(b is None for b in busy):
            return sim.events
        tick += 1
        busy = [None if i is None or sim.train(i, tick) else i for i in busy]


class _Simulation:
    """The trials of one simulated sweep: where each stands, the rungs' table, the events."""

    def __init__(self, n: int, value: Measure, score: Measure, policy: str,
                 s: Schedule) -> None:
        self.n, self.value, self.score, self.policy, self.s = n, value, score, policy, s
        weights = bracket_weights(s.brackets, s.eta)
        self.bracket = [bracket_of(i, weights) if policy != "none" else 0 for i in range(n)]
        self.rungs = [rung_steps(self.bracket[i], s) if policy != "none" else ()
                      for i in range(n)]
        self.table = _Rungs(policy, s.eta)
        self.paused: dict[int, int] = {}  # index -> the rung step it paused at
        self.progress = [0] * n
        self.started = 0
        self.events: list[curves.Event] = []

    def next_job(self) -> int | None:
        """A paused trial the table promotes (the highest rung, then the best value), else
        the next new one; None when there is neither."""
        ready = [(-self.rungs[i].index(at), self.table.values[(self.bracket[i], at)][i], i)
                 for i, at in self.paused.items() if self.table.goes_on(self.bracket[i], at, i)]
        if ready:
            i = min(ready)[2]
            del self.paused[i]
            return i
        if self.started < self.n:
            self.started += 1
            return self.started - 1
        return None

    def train(self, i: int, tick: int) -> bool:
        """One step of trial ``i`` at ``tick``; whether its worker is free after it (the trial
        ended, was stopped, or paused at a rung)."""
        step = self.progress[i] = self.progress[i] + 1
        v = self.value(i, step)
        self.events.append(curves.Event(float(tick), i, step, v, self.score(i, step)))
        done = step >= self.s.max_resource
        if step in self.rungs[i]:
            self.table.add(self.bracket[i], step, i, v)
            if not self.table.goes_on(self.bracket[i], step, i):
                if self.policy == "promotion":
                    self.paused[i] = step
                done = True
        return done


def on_curves(configs: Sequence[dict[str, float]], seed: int, policy: str, s: Schedule,
              workers: int) -> list[curves.Event]:
    """:func:`simulate` on the synthetic family: reported values with the curve task's noise
    (``curves.noise(seed, index, step)``), scores the noise-free curve."""
    return simulate(len(configs),
                    lambda i, k: curves.quality(configs[i], k) + curves.noise(seed, i, k),
                    lambda i, k: curves.quality(configs[i], k), policy, s, workers)


def trained_to_end(events: Sequence[curves.Event], max_resource: int) -> set[int]:
    return {e.index for e in events if e.step == max_resource}
