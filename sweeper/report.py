"""What the CLI shows: live progress lines, tables, best-trial records. Formatting is pure;
``Progress`` polls the study with cheap aggregate queries (never loads every trial)."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.protocol import ATTEMPT_ATTR, ATTR_PREFIX, FAIL_REASON_ATTR, INDEX_ATTR
from sweeper.study import Sweep
from sweeper.study.values import RungTrial

# --------------------------------------------------------------------------- tables


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def ranges_of(indexes: Iterable[int]) -> str:
    """Indexes as short text: sorted, runs of consecutive ones as ``first-last``,
    comma-separated (``0-3,7,9-10``)."""
    out: list[str] = []
    for i in sorted(indexes):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = out[-1].split("-")[0] + f"-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        text = f"{v:.6g}"
        return text if any(c in text for c in ".en") else text + ".0"
    return str(v)


# --------------------------------------------------------------------------- failures


def failure_lines(index: int, attempts: int, reason: str | None, where: str | None,
                  log: str | None, note: str | None, command: str) -> list[str]:
    """What ``run`` says of an index that failed for good: why (the trial's fail reason), the
    last lines of its log (or why they cannot be shown) and the command for the rest."""
    why = " ".join((reason or "no reason recorded").split())
    lines = [f"index {index} failed for good after {attempts} attempt(s): {why}"]
    if where is not None:
        body = (log or "").rstrip("\n").splitlines()
        lines.append(f"  last lines of {where}:" if body else f"  {where} is empty")
        lines.extend(f"    {line}" for line in body)
    elif note:
        lines.append(f"  (no log: {note})")
    lines.append(f"  the rest: {command}")
    return lines


# --------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class Snapshot:
    #: The sweep's indexes; None: open-ended (as many as its budget pays for).
    total: int | None
    counts: dict[str, int]
    best_value: float | None
    best_number: int | None
    elapsed_s: float


def _bar(done: int, total: int | None, width: int) -> str:
    if total is None:  # open-ended: no bar to fill
        return f"{done} finished (open-ended)"
    frac = min(1.0, done / total) if total else 1.0
    filled = round(frac * width)
    return f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}"


def progress_line(s: Snapshot, metric: str, width: int = 24) -> str:
    done = s.counts.get("COMPLETE", 0) + s.counts.get("PRUNED", 0)
    parts = [_bar(done, s.total, width),
             f"complete {s.counts.get('COMPLETE', 0)}",
             f"pruned {s.counts.get('PRUNED', 0)}",
             f"running {s.counts.get('RUNNING', 0)}",
             f"failed {s.counts.get('FAIL', 0)}"]
    if s.best_value is not None:
        parts.append(f"best {metric}={s.best_value:.6g} (#{s.best_number})")
    minutes, seconds = divmod(int(s.elapsed_s), 60)
    parts.append(f"{minutes:02d}:{seconds:02d}")
    return " | ".join(parts)


class Progress:
    """Renders the sweep's state on stderr: one rewritten line on a terminal, a line every
    ``log_interval_s`` (or on change) otherwise, so CI logs stay readable."""

    def __init__(self, sweep: Sweep, stream: IO[str] | None = None,
                 log_interval_s: float = 10.0) -> None:
        self.sweep = sweep
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.log_interval_s = log_interval_s
        self._last_line = ""
        self._last_emitted = ""
        self._last_emit = 0.0

    def snapshot(self) -> Snapshot:
        counts = self.sweep.storage.state_counts(self.sweep.study_id)
        best_value = best_number = None
        spec = self.sweep.spec
        if not spec.is_multi_objective and counts.get("COMPLETE"):
            best = self.sweep.storage.best_so_far(self.sweep.study_id,
                               spec.objectives[0].direction)
            if best is not None:
                best_number, best_value = best
        return Snapshot(self.sweep.spec.index_count, counts, best_value, best_number,
                        time.monotonic() - self.start)

    def tick(self) -> None:
        try:
            line = progress_line(self.snapshot(), self.sweep.spec.objectives[0].metric)
        except Exception:  # noqa: BLE001 - a progress line is never worth failing the sweep
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
        elif (self._changed(line) and now - self._last_emit >= 1.0) \
                or now - self._last_emit >= self.log_interval_s:
            self._emit(line, now)
        self._last_line = line

    def _changed(self, line: str) -> bool:
        """Ignoring the clock at the end of the line."""
        return line.rsplit(" | ", 1)[0] != self._last_emitted.rsplit(" | ", 1)[0]

    def _emit(self, line: str, now: float) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()
        self._last_emit = now
        self._last_emitted = line

    def close(self) -> None:
        """Show the final state: a newline after the live line, or the last line in logs."""
        if self.tty and self._last_line:
            self.stream.write("\n")
            self.stream.flush()
        elif self._last_line and self._changed(self._last_line):
            self._emit(self._last_line, time.monotonic())


# --------------------------------------------------------------------------- trial records


def trial_record(t: FrozenTrial, metrics: Sequence[str]) -> dict[str, Any]:
    """A stable, JSON-able view of one trial (the format of ``best``, ``export``)."""
    values = None
    if t.values is not None:
        values = {m: _num(v) for m, v in zip(metrics, t.values, strict=False)}
    return {
        "number": t.number,
        "index": t.user_attrs.get(INDEX_ATTR),
        "attempt": t.user_attrs.get(ATTEMPT_ATTR),
        "state": t.state.name,
        "values": values,
        "params": dict(t.params),
        "user_attrs": {k: v for k, v in t.user_attrs.items()
                       if not k.startswith(ATTR_PREFIX) and k not in metrics},
        "fail_reason": t.user_attrs.get(FAIL_REASON_ATTR),
        "datetime_start": t.datetime_start.isoformat() if t.datetime_start else None,
        "datetime_complete": t.datetime_complete.isoformat() if t.datetime_complete else None,
        "duration_s": t.duration.total_seconds() if t.duration is not None else None,
    }


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best trial (single objective) or every Pareto-optimal one (multi-objective)."""
    if len(study.directions) > 1:
        return list(study.best_trials)
    try:
        return [study.best_trial]
    except ValueError:
        return []


def top_trials(study: optuna.Study, k: int = 5) -> list[FrozenTrial]:
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(study.directions) > 1:
        return best_trials(study)[:k]
    reverse = study.direction == optuna.study.StudyDirection.MAXIMIZE
    return sorted(complete, key=lambda t: t.value if t.value is not None else math.inf,
                  reverse=reverse)[:k]


def dumps(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    import yaml

    return yaml.safe_dump(data, sort_keys=False).rstrip()


# --------------------------------------------------------------------------- scheduler


@dataclass(frozen=True)
class Rung:
    """One rung of a scheduler's sweep, for ``status``: the trials with a value at its step
    (failed attempts aside) and those paused there now."""

    rung: int
    step: int
    trials: int
    paused: int


def rungs_of(trials: Sequence[RungTrial], steps: Sequence[int]) -> list[Rung]:
    counted = [t for t in trials if t.state != TrialState.FAIL]
    return [Rung(k, step, sum(1 for t in counted if any(s == step for s, _ in t.values)),
                 sum(1 for t in counted if t.paused and t.rung == k))
            for k, step in enumerate(steps)]


def rungs_line(rungs: Sequence[Rung]) -> str:
    """``rungs: 0 (step 1): 9 trials (6 paused), 1 (step 3): 3 trials (2 paused)``."""
    return "rungs: " + ", ".join(f"{r.rung} (step {r.step}): {r.trials} trials "
                                 f"({r.paused} paused)" for r in rungs)


def rung_cell(t: RungTrial | None) -> str:
    """An index's rung for the status table: ``1 paused``, ``1`` (promoted from it), or ``""``."""
    if t is None or t.rung is None:
        return ""
    return f"{t.rung} paused" if t.paused else str(t.rung)
