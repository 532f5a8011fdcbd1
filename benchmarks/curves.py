"""The learning-curve tasks of the ``compute`` section, and how their epochs are counted.

* ``curve``: a synthetic learning-curve family with a known optimum. The hyperparameters set
  both where a curve ends (its floor) and how fast it gets there (its time constant), so the
  ranking after a few steps is only partly that of the end: the case where pausing and
  promoting (ASHA) and stopping (hyperband) can differ. The reported value is the noise-free
  curve plus Gaussian noise seeded by (seed, index, step), so a resumed trial reports exactly
  what an uninterrupted one would.
* ``digits``: the digits MLP of ``trial_runner.examples.digits``, its reports counted.

Counting epochs: every step a trial trains appends one line to a ledger (one file per process,
under the fixed param ``ledger``): time, index, step, reported value and the score the target is
judged on. Epochs to a target are the ledger's lines, in time order, up to the first line whose
score reaches the target; a resumed trial continues after its checkpoint, so its steps are
counted once (a step trained twice, after a killed claim, is counted twice: it cost twice).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trial_runner.context import TrialContext

#: The curves start here (about ln 10, a 10-class cross-entropy at chance).
START = 2.3
#: The lowest floor of the family (lr 1e-2, width 1); the optimum at ``steps`` steps is
#: ``quality(OPTIMUM, steps)``.
BEST_FLOOR = 0.05
OPTIMUM = {"lr": 1e-2, "width": 1.0, "warmup": 0.0}
NOISE_SD = 0.03

#: The synthetic family's search space (spec ``parameters:``).
CURVE_SPACE: dict[str, Any] = {
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "width": {"type": "float", "low": 0.0, "high": 1.0},
    "warmup": {"type": "float", "low": 0.0, "high": 1.0},
}
#: The digits MLP's search space.
DIGITS_SPACE: dict[str, Any] = {
    "lr": {"type": "float", "low": 1e-4, "high": 0.3, "log": True},
    "hidden": {"type": "int", "low": 8, "high": 128, "log": True},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
}


def floor(params: Mapping[str, Any]) -> float:
    """Where the curve of ``params`` ends: best at lr 1e-2 and full width."""
    x = math.log10(float(params["lr"]))
    return BEST_FLOOR + 0.9 * ((x + 2.0) / 2.0) ** 2 + 0.6 * (1.0 - float(params["width"])) ** 2


def time_constant(params: Mapping[str, Any]) -> float:
    """Steps to cover 1/e of the way: larger learning rates are faster, wider models and
    warm-up slower (warm-up changes nothing at the end, only early on)."""
    x = math.log10(float(params["lr"]))
    return 2.0 * 10.0 ** (-0.3 * (x + 2.0)) * (1.0 + float(params["width"])) \
        * (1.0 + 2.0 * float(params["warmup"]))


def quality(params: Mapping[str, Any], step: int) -> float:
    """The noise-free validation loss after ``step`` steps (step 0: untrained)."""
    lo = floor(params)
    return lo + (START - lo) * math.exp(-step / time_constant(params))


def noise(seed: int, index: int, step: int, sd: float = NOISE_SD) -> float:
    """The same draw for the same (seed, index, step) in every process and attempt."""
    return random.Random(f"{seed}/{index}/{step}").gauss(0.0, sd)


def random_configuration(rng: random.Random) -> dict[str, float]:
    """A configuration drawn uniformly from ``CURVE_SPACE`` (lr log-uniform)."""
    return {"lr": 10.0 ** rng.uniform(-4.0, 0.0), "width": rng.random(),
            "warmup": rng.random()}


def rank_agreement(steps: Sequence[int], end: int, n: int = 2000,
                   seed: int = 0) -> list[float]:
    """Spearman's correlation of the family's ranking at each of ``steps`` with that at
    ``end``, over ``n`` random configurations: how much an early rung predicts the end."""
    rng = random.Random(seed)
    cfgs = [random_configuration(rng) for _ in range(n)]
    final = [quality(c, end) for c in cfgs]
    return [spearman([quality(c, s) for c in cfgs], final) for s in steps]


# --------------------------------------------------------------------------- the ledger


@dataclass(frozen=True)
class Event:
    """One step trained: when, by which index, which step, the reported value and the score
    the target is judged on (the noise-free curve for ``curve``, the reported loss for
    ``digits``)."""

    t: float
    index: int
    step: int
    value: float
    score: float


def record(ledger: str | os.PathLike[str], index: int, step: int, value: float,
           score: float) -> None:
    """Append one event to this process's ledger file."""
    path = Path(ledger) / f"{os.getpid()}.jsonl"
    line = json.dumps({"t": time.time(), "i": index, "s": step, "v": value, "q": score})
    with open(path, "a") as f:
        f.write(line + "\n")


def read_ledger(ledger: str | os.PathLike[str]) -> list[Event]:
    """Every event of a run, in time order."""
    events = []
    for path in sorted(Path(ledger).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            d = json.loads(line)
            events.append(Event(d["t"], d["i"], d["s"], d["v"], d["q"]))
    return sorted(events, key=lambda e: e.t)


def epochs_to_target(events: Sequence[Event], target: float) -> int | None:
    """Steps trained by all trials together (in time order) until one reached ``target``
    (a loss: lower is better), or None when none did."""
    for n, e in enumerate(sorted(events, key=lambda e: e.t), start=1):
        if e.score <= target:
            return n
    return None


def best_by_index(events: Iterable[Event]) -> dict[int, float]:
    """Each index's best score at any step."""
    best: dict[int, float] = {}
    for e in events:
        best[e.index] = min(e.score, best.get(e.index, math.inf))
    return best


def top_fraction_score(scores: Iterable[float], fraction: float) -> float:
    """The score of the ceil(fraction * n)-th best (lowest) of ``scores``: reaching it means
    doing as well as the best ``fraction`` of them."""
    ordered = sorted(scores)
    if not ordered:
        raise ValueError("no scores")
    k = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(k, len(ordered)) - 1]


def steps_per_index(events: Iterable[Event]) -> dict[int, int]:
    out: dict[int, int] = {}
    for e in events:
        out[e.index] = out.get(e.index, 0) + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (no ties expected: continuous values)."""
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda k: v[k])
        r = [0.0] * len(v)
        for rank, k in enumerate(order):
            r[k] = float(rank)
        return r

    n = len(xs)
    if n < 2:
        return float("nan")
    rx, ry = ranks(xs), ranks(ys)
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry, strict=True))
    return 1.0 - 6.0 * d2 / (n * (n * n - 1))


# --------------------------------------------------------------------------- entrypoints


def advance(params: Mapping[str, Any], loss: float) -> float:
    """One step of training from ``loss`` under ``params``: a share 1 - e^(-1/tau) of the way
    to the floor. From ``START`` with fixed params, step s gives ``quality(params, s)``; params
    that change on the way (PBT's perturbations) bend the curve from where it is."""
    lo = floor(params)
    return lo + (loss - lo) * math.exp(-1.0 / time_constant(params))


def curve(ctx: TrialContext) -> float:
    """One trial of the synthetic family: ``steps`` steps of ``step_s`` seconds each, a report
    and a checkpoint (step and loss) per step, resumed from its checkpoint when it has one: the
    loss goes on from the checkpoint's under the params the trial has now."""
    p = ctx.params
    steps, step_s, seed = int(p["steps"]), float(p.get("step_s", 0.0)), int(p.get("seed", 0))
    start, score = 1, START
    resumed = ctx.load_checkpoint()
    if resumed is not None:
        state, last = resumed
        start, score = last + 1, float(state.get("loss", quality(p, last)))
    value = math.nan
    for step in range(start, steps + 1):
        if step_s > 0:
            time.sleep(step_s)  # the "training" of this step
        score = advance(p, score)
        value = score + noise(seed, ctx.index, step)
        record(p["ledger"], ctx.index, step, value, score)
        ctx.report(step, val_loss=value)
        ctx.save_checkpoint({"step": step, "loss": score}, step=step)
        if ctx.should_prune():
            from optuna import TrialPruned

            raise TrialPruned()
    return value


class _Ledgered:
    """A trial context whose reports are also written to the ledger (one per epoch)."""

    def __init__(self, ctx: TrialContext) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def report(self, step: int, **metrics: float) -> None:
        loss = float(metrics["val_loss"])
        record(self._ctx.params["ledger"], self._ctx.index, step, loss, loss)
        self._ctx.report(step, **metrics)


def digits(ctx: TrialContext) -> dict[str, Any]:
    """The digits MLP example, each epoch's report counted."""
    from typing import cast

    from trial_runner.examples.digits import train

    return train(cast(TrialContext, _Ledgered(ctx)))
