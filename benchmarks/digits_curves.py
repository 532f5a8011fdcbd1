"""The digits task's learning curves for the ``compute`` section's simulation
(:mod:`benchmarks.schedule_sim`): the validation loss after each epoch of each configuration a
seed's runs train, trained in this process with the example's own code
(``trial_runner.examples.digits.build`` and ``fit``, one thread, as the runs' trials), each
configuration continuously, one epoch when the simulation first asks for it, and kept.

A configuration's curve is that of a real trial that is never paused: the same weights from
``seed + index``, the same batch order from ``index``, dropout from torch's generator, which is
kept per configuration here (configurations trained by turns draw from their own). A trial
that promotion ASHA pauses and resumes reseeds at the resume (its dropout and its batch order
start again), so after a resume the real losses differ from the curve's: there the replay is
an approximation, which :func:`benchmarks.compute_figures.curve_check` measures.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

from trial_runner.context import TrialContext


class _Context:
    """The part of the trial context ``build`` and ``fit`` read: params, index, a CPU."""

    device = "cpu"

    def __init__(self, params: dict[str, Any], index: int) -> None:
        self.params, self.index = params, index

    def autocast(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def grad_scaler(self) -> Any:
        import torch

        return torch.amp.GradScaler("cuda", enabled=False)


@dataclass
class _Run:
    """One configuration in training: its epochs to come, torch's generator state between
    them, and how many it has trained."""

    epochs: Iterator[Any]
    rng: Any
    done: int = 0


class DigitsCurves:
    """Validation losses by (seed, index, epoch), trained on first use. ``configs(seed)``: the
    seed's configurations (budgeted ASHA's pool, whose first N every other variant trains);
    ``fixed(seed)``: the fixed params of the seed's trials (epochs, seed, threads).

    Only the current seed's configurations are held in training (a request for another seed
    drops them); a later request past a dropped one's last epoch trains it again from the
    start, to the same losses."""

    def __init__(self, configs: Callable[[int], list[dict[str, Any]]],
                 fixed: Callable[[int], dict[str, Any]]) -> None:
        self.configs, self.fixed = configs, fixed
        self.losses: dict[tuple[int, int], list[float]] = {}
        #: Seconds spent training, and epochs trained (replays included).
        self.seconds, self.epochs = 0.0, 0
        self._seed: int | None = None
        self._pool: list[dict[str, Any]] = []
        self._runs: dict[int, _Run] = {}

    def loss(self, seed: int, index: int, epochs: int) -> float:
        """The validation loss of configuration ``index`` of ``seed`` after ``epochs`` epochs
        (1: after the first; the trial reports it as step ``epochs - 1``)."""
        got = self.losses.setdefault((seed, index), [])
        if len(got) < epochs:
            self._use(seed)
            started = time.perf_counter()
            while len(got) < epochs:
                got.append(self._next(seed, index, len(got)))
            self.seconds += time.perf_counter() - started
        return got[epochs - 1]

    def _use(self, seed: int) -> None:
        if seed != self._seed:
            self._seed, self._pool = seed, self.configs(seed)
            self._runs.clear()

    def _next(self, seed: int, index: int, epoch: int) -> float:
        """Epoch ``epoch`` (from 0) of the configuration's continuous training."""
        import torch

        from trial_runner.examples import digits

        outer = torch.get_rng_state()
        try:
            run = self._runs.get(index)
            if run is None or run.done > epoch:
                ctx = cast(TrialContext, _Context({**self.fixed(seed), **self._pool[index]},
                                                  index))
                model, net, opt = digits.build(ctx)  # seeds torch: seed + index
                run = self._runs[index] = _Run(digits.fit(ctx, model, net, opt, 0),
                                               torch.get_rng_state())
            torch.set_rng_state(run.rng)
            while True:
                loss = float(next(run.epochs).val_loss)
                run.done += 1
                self.epochs += 1
                if run.done > epoch:
                    run.rng = torch.get_rng_state()
                    return loss
        finally:
            torch.set_rng_state(outer)

    def measures(self, seed: int) -> tuple[Callable[[int, int], float],
                                            Callable[[int, int], float]]:
        """The seed's (value, score) for :func:`benchmarks.schedule_sim.simulate`: both the
        reported validation loss (the digits target is judged on what the trial reports)."""
        def measure(index: int, epochs: int) -> float:
            return self.loss(seed, index, epochs)

        return measure, measure
