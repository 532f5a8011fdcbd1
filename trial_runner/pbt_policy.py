"""Population Based Training's decisions (``scheduler: {type: pbt}``), pure: who is in the
bottom and the top quantile at a step, which donor a member copies, and how the donor's params
are perturbed. :mod:`trial_runner.pbt` applies them to the study and the checkpoints.

- Quantiles (Ray Tune's rule): of ``n`` members with a value at the step, ``k = ceil(n * q)``
  but at most ``floor(n / 2)``; fewer than 2 members: nobody. Ties: the older trial (lower
  number) ranks first, as in :mod:`trial_runner.asha`.
- Donor: uniform over the top quantile, seeded by (the spec's seed, the member's index, the
  step): the same sweep makes the same choices.
- Perturbation of each parameter (with ``resample_probability``: a fresh sample from its
  distribution instead): a number times one of ``perturbation_factors``, clipped to its
  bounds and snapped to its step (an int that would not move moves one step that way); a
  choice (``choices`` / ``values``) moves to an adjacent one. A parameter another one's
  ``when:`` names is kept as it is, so the set of active parameters stays the same.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sweeper.spec.model import Parameter
from sweeper.spec.pbt_model import PbtOptions

#: (value, trial number): a member's place at a step.
Entry = tuple[float, int]


def quantile_size(n: int, fraction: float) -> int:
    """How many members are in the bottom (and in the top) quantile of ``n``."""
    if n < 2:
        return 0
    return min(math.ceil(n * fraction), n // 2)


def quantiles(entries: Iterable[Entry], fraction: float, *, maximize: bool
              ) -> tuple[list[int], list[int]]:
    """(bottom, top): the trial numbers in the bottom and the top quantile, best first."""
    ranked = sorted(set(entries), key=lambda e: (-e[0] if maximize else e[0], e[1]))
    numbers = list(dict.fromkeys(n for _, n in ranked))  # one entry per trial
    k = quantile_size(len(numbers), fraction)
    if k == 0:
        return [], []
    return numbers[-k:], numbers[:k]


def rng_for(seed: int, index: int, step: int) -> random.Random:
    """The random stream of the decision of member ``index`` at ``step``."""
    return random.Random(f"pbt:{seed}:{index}:{step}")


def choose_donor(top: Sequence[int], rng: random.Random) -> int:
    """A trial number from ``top``, uniformly (independent of its order)."""
    return sorted(top)[rng.randrange(len(top))]


def perturb(params: Mapping[str, Any], parameters: Sequence[Parameter], options: PbtOptions,
            rng: random.Random) -> dict[str, Any]:
    """The params a member goes on with after copying a donor whose params are ``params``."""
    gates = {name for p in parameters for name, _ in p.when}
    out = dict(params)
    for p in parameters:
        if p.name not in params or p.name in gates:
            continue
        if rng.random() < options.resample_probability:
            out[p.name] = resample(p, rng)
        else:
            out[p.name] = perturb_value(p, params[p.name], rng.choice(
                options.perturbation_factors), rng)
    return out


def _options(p: Parameter) -> tuple[Any, ...] | None:
    return p.values if p.values is not None else p.choices


def perturb_value(p: Parameter, value: Any, factor: float, rng: random.Random) -> Any:
    """``value`` of ``p`` perturbed by ``factor`` (a choice: one step up or down, at random)."""
    options = _options(p)
    if options is not None:
        at = options.index(value) if value in options else 0
        return options[min(max(at + rng.choice((-1, 1)), 0), len(options) - 1)]
    new = snap(p, float(value) * factor)
    if p.type == "int" and new == value and factor != 1.0:  # 2 * 1.2 rounds back to 2
        new = snap(p, float(value) + (1 if factor > 1 else -1) * float(p.step or 1))
    return new


def resample(p: Parameter, rng: random.Random) -> Any:
    """A fresh sample of ``p`` (log-uniform for a log scale)."""
    options = _options(p)
    if options is not None:
        return options[rng.randrange(len(options))]
    assert p.low is not None and p.high is not None
    if p.log:
        return snap(p, math.exp(rng.uniform(math.log(p.low), math.log(p.high))))
    return snap(p, rng.uniform(float(p.low), float(p.high)))


def snap(p: Parameter, x: float) -> Any:
    """``x`` clipped to ``p``'s bounds and put on its grid (``step``; an int: a whole number)."""
    assert p.low is not None and p.high is not None
    low, high = float(p.low), float(p.high)
    x = min(max(x, low), high)
    if p.step is not None:
        step = float(p.step)
        x = min(low + round((x - low) / step) * step, low + math.floor((high - low) / step) * step)
    if p.type == "int":
        return int(min(max(round(x), p.low), p.high))
    return round(x, 12) if p.step is not None else x
