"""A local worker's next index, taken in the statement that finishes the trial before it.

The local backend hands a busy worker its next index while its trial runs (the prefetch of
:class:`sweeper.backends.local.run.LocalRun`). When that trial ends COMPLETE or PRUNED, the
statement that finishes it can also take the next index (PostgreSQL,
``IndexStore.riding_with_finish``): one round trip between two trials instead of two. The
worker's loop tells the runner which index comes next (:meth:`Ahead.next_index`); the runner
plans the take (``trial_runner.runner``) and holds it here until the next index's
``acquire`` picks up what it found, or, where its result is not known, takes the index with
the same write token, which finds a claim that landed.
"""

from __future__ import annotations

from collections.abc import Callable

from sweeper.accounting import OpenSegment
from sweeper.study.values import NextTake


class Ahead:
    """The next index of a worker, and the take of it planned with the current finish."""

    def __init__(self, next_index: Callable[[], int | None]) -> None:
        self._next_index = next_index
        self._held: tuple[NextTake, OpenSegment] | None = None

    def next_index(self) -> int | None:
        """The index the worker runs next, where it was handed one already."""
        return self._next_index()

    def hold(self, take: NextTake, opened: OpenSegment) -> None:
        """``take`` rides with the finish now; ``opened``: the segment its claim opens."""
        self._held = (take, opened)

    def held(self, index: int) -> tuple[NextTake, OpenSegment] | None:
        """The take planned for ``index``, once (any other is dropped: not taken ahead)."""
        held, self._held = self._held, None
        return held if held is not None and held[0].index == index else None

    def drop(self) -> NextTake | None:
        """The take planned and not yet picked up, once (a worker stopping before it)."""
        held, self._held = self._held, None
        return held[0] if held is not None else None
