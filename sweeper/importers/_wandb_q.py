"""W&B's quantised distributions (``q_uniform``, ``q_log_uniform(_values)``, ``q_normal``,
``q_log_normal``) as sweeper parameters that keep their type and their grid.

W&B draws X from the distribution and passes ``round(X / q) * q``: with an integer ``q`` the
program gets integers (``--batch_size=240``), never ``238.692``. So the values are the
multiples of ``q`` between the bounds, and:

- on a linear scale: an ``int`` parameter with ``step: q`` (a ``float`` one for a fractional
  ``q``), exactly W&B's grid;
- on a log scale with ``q: 1``: an ``int`` parameter with ``log: true`` (Optuna rounds a
  log-uniform draw too);
- on a log scale with any other ``q``: Optuna cannot combine a step with a log scale, so the
  parameter is a ``values:`` list of multiples of ``q`` spaced evenly on a log scale between
  the bounds (``32, 40, 48, ..., 208, 232, 256`` for ``q: 8`` from 32 to 256),
  as many as stay distinct at the grid's coarse bottom end, at most ``LOG_POINTS``. Each is equally
  likely, so the log scale is kept on W&B's grid; W&B's draw can also land on the multiples
  in between.

Each choice is a note, with the grid it kept.
"""

from __future__ import annotations

import math
from typing import Any

from sweeper.importers._common import Importer, number
from sweeper.spec import Path_

#: At most this many log-spaced points stand in for a log-scale quantised distribution.
LOG_POINTS = 32
_EPS = 1e-9


def quantised(im: Importer, p: dict[str, Any], where: Path_, full: str, dist: str,
              low: float, high: float, *, log: bool) -> dict[str, Any]:
    """The parameter for ``dist`` (a ``q_*`` distribution) whose draws before rounding lie in
    [``low``, ``high``]: its values are the multiples of ``q`` in that range."""
    q = float(number(im, p.get("q", 1), (*where, "q")))
    if q <= 0:
        raise im.err((*where, "q"), f"q must be positive, got {q:g}")
    first, last = math.ceil(low / q - _EPS), math.floor(high / q + _EPS)
    if log:
        first = max(first, 1)  # a log scale has no 0
    if first > last:
        raise im.err(where, f"no multiple of q={q:g} lies between {low:.6g} and {high:.6g}")
    what = f"parameters.{full}"
    integer = q.is_integer()
    if not log:
        out = {"type": "int" if integer else "float", "low": _value(first, q),
               "high": _value(last, q), "step": _value(1, q)}
        im.note(what, f"{dist}(q={q:g}): {out['type']} parameter from {out['low']} to "
                      f"{out['high']} step {out['step']}, the multiples of q W&B draws")
        return out
    if q == 1:
        im.note(what, f"{dist}(q=1): int parameter from {first} to {last} with log: true")
        return {"type": "int", "low": first, "high": last, "log": True}
    values = [_value(k, q) for k in log_spaced(first, last, LOG_POINTS)]
    im.note(what, f"{dist}(q={q:g}): Optuna cannot combine a step with a log scale, so values: "
                  f"{len(values)} multiples of {q:g} from {values[0]} to {values[-1]} spaced "
                  "evenly on a log scale, each equally likely (W&B weights each multiple of q "
                  "by the log scale)")
    return {"type": "int" if integer else "float", "values": values}


def log_spaced(first: int, last: int, points: int) -> list[int]:
    """Integers in [first, last] (first >= 1), both ends included, nearest to points spaced
    evenly on a log scale: as many as round to distinct integers (the grid is coarsest at the
    bottom on a log scale), at most ``points``."""
    span = math.log(last / first)
    for n in range(min(points, last - first + 1), 1, -1):
        ks = [round(first * math.exp(span * i / (n - 1))) for i in range(n)]
        if len(set(ks)) == n:
            return ks
    return sorted({first, last})


def _value(k: int, q: float) -> int | float:
    """The ``k``-th multiple of ``q``: an int for an integer ``q``, else a float without the
    binary noise of ``k * q`` (``3 * 0.1`` is 0.30000000000000004)."""
    return k * int(q) if q.is_integer() else float(f"{k * q:.12g}")
