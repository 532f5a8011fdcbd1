"""Reading a ``trial.command`` program's metrics: from its stdout lines (``name=value`` and
``name: value`` pairs, or the spec's ``trial.metrics.format`` regex) or from the JSON lines it
appends to ``trial.metrics.file``. A ``step`` value makes the others an intermediate report
(what pruners and the dashboard's charts use); the last value of every metric is the result.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity)"
#: ``name=value`` or ``name: value``; a name has letters, digits, _ - . / (as metric names
#: may) and is not the tail of a longer word; the value is not the head of a longer word.
_PAIR_RE = re.compile(
    rf"(?<![\w.\-/])([A-Za-z_][\w.\-/]*)(?:\s*=\s*|:\s*)({_NUMBER})(?![\w.])", re.IGNORECASE)
#: How often the metrics file is read while the program runs.
FILE_POLL_S = 0.25


def parse_metric_line(line: str, fmt: re.Pattern[str] | None = None) -> dict[str, float]:
    """``epoch=3 val/loss=0.41, accuracy: 0.93`` -> {epoch: 3.0, val/loss: 0.41, ...}; with
    ``fmt``, every match of its ``name`` and ``value`` groups instead."""
    if fmt is None:
        return {k: float(v) for k, v in _PAIR_RE.findall(line)}
    out = {}
    for m in fmt.finditer(line):
        try:
            out[m.group("name")] = float(m.group("value"))
        except (TypeError, ValueError):
            continue
    return out


def numeric_items(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of one JSON record, numeric strings included (Katib's hypertune writes
    ``"loss": "0.23"``); booleans, other strings and nested values are not metrics."""
    def numeric(v: Any) -> bool:
        if isinstance(v, str):
            return re.fullmatch(_NUMBER, v.strip(), re.IGNORECASE) is not None
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    return {str(k): float(v) for k, v in record.items() if numeric(v)}


class Metrics:
    """The metrics seen so far: the last value of each, and the intermediate reports made."""

    def __init__(self, report: Callable[[int, dict[str, float]], bool]) -> None:
        #: Called with (step, metrics) for each step; returns True when the trial should stop.
        self._report = report
        self.final: dict[str, float] = {}
        self.pruned = False
        self._lock = threading.Lock()

    def add(self, pairs: dict[str, float]) -> bool:
        """Take one line's metrics; True when this report made the pruner say stop."""
        with self._lock:
            metrics = {k: v for k, v in pairs.items() if k != "step"}
            self.final.update(metrics)
            step = pairs.get("step")
            if step is None or not metrics or self.pruned or not math.isfinite(step) \
                    or step < 0:
                return False
            self.pruned = self._report(int(step), metrics)
            return self.pruned


class JsonLinesTail:
    """Follows a metrics file the program appends to: JSON lines, or text lines read with the
    ``fmt`` regex. Only what is written after the trial started counts (a retry does not
    re-read the killed attempt's lines); a file the program truncates or replaces is read
    again from its start."""

    def __init__(self, path: Path, sink: Metrics, on_prune: Callable[[], None],
                 fmt: re.Pattern[str] | None = None) -> None:
        self.path = path
        self.sink = sink
        self.on_prune = on_prune
        self.fmt = fmt
        self._offset = path.stat().st_size if path.exists() else 0
        self._buffer = b""
        self._warned = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweeper-metrics-file",
                                        daemon=True)

    def start(self) -> JsonLinesTail:
        self._thread.start()
        return self

    def finish(self) -> None:
        """Stop following and read what is left, a last line without a newline included."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.poll(final=True)

    def _run(self) -> None:
        while not self._stop.wait(FILE_POLL_S):
            self.poll()

    def poll(self, final: bool = False) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size < self._offset:  # truncated or replaced: start over
            self._offset, self._buffer = 0, b""
        if size > self._offset:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read(size - self._offset)
            self._offset += len(chunk)
            self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        if final and self._buffer.strip():
            lines.append(self._buffer)
            self._buffer = b""
        for raw in lines:
            self._line(raw)

    def _line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        if self.fmt is not None:
            if self.sink.add(parse_metric_line(raw.decode(errors="replace"), self.fmt)):
                self.on_prune()
            return
        try:
            record = json.loads(raw)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            if not self._warned:
                logger.warning("%s: skipping a line that is not a JSON object: %.80r",
                               self.path, raw)
                self._warned = True
            return
        if self.sink.add(numeric_items(record)):
            self.on_prune()
