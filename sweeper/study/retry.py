"""Retrying what a database restart interrupts: which errors are transient, and the backoff."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa

logger = logging.getLogger(__name__)

T = TypeVar("T")


def is_transient(e: BaseException) -> bool:
    """Connection loss, server restart, SQLite busy: worth retrying with backoff."""
    for err in (e, e.__cause__):
        if isinstance(err, (sa.exc.OperationalError, sa.exc.InterfaceError)):
            return True
        if isinstance(err, sa.exc.DBAPIError) and err.connection_invalidated:
            return True
    return False


def with_retry(fn: Callable[..., T], *args: Any, deadline_s: float = 300.0,
               what: str | None = None, **kwargs: Any) -> T:
    """Call ``fn``, retrying transient database errors with capped exponential backoff."""
    start = time.monotonic()
    delay = 0.2
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not is_transient(e) or time.monotonic() - start > deadline_s:
                raise
            logger.warning("database unavailable during %s (%s); retrying in %.1fs",
                           what or getattr(fn, "__name__", "a query"),
                           type(e.__cause__ or e).__name__, delay)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)
