"""Compute to a target (issue 29): total training epochs to reach a validation score.

Placeholder while the measurement is written; it measures nothing yet."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.common import Row


def run(sizes: dict[str, Any], log: Callable[[str], None]) -> tuple[list[Row], dict[str, Any]]:
    return [], {"notes": []}
