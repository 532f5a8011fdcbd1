"""The proxy's limits on what one caller may send: the size of one message and the rate of
calls (a token bucket per caller). Defaults are far above what a runner needs (a heartbeat
every few seconds, a few calls per trial); ``sweeper proxy --max-message-mb / --rate /
--burst`` raise them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: One request at most (gRPC's own default is 4 MiB; a sweep's spec record or a trial's
#: attributes are far smaller).
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Calls per second one caller may make on average, and in a burst.
DEFAULT_RATE = 200.0
DEFAULT_BURST = 1000


@dataclass(frozen=True)
class Limits:
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    #: Calls per second per caller (0: unlimited).
    rate: float = DEFAULT_RATE
    burst: int = DEFAULT_BURST


class RateLimiter:
    """A token bucket per caller name: ``allow(name)`` spends one call, False when the
    caller is over its rate."""

    def __init__(self, rate: float, burst: int,
                 clock: Callable[[], float] = time.monotonic, max_callers: int = 100_000
                 ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)
        self._max = max_callers
        self._lock = threading.Lock()

    def allow(self, name: str) -> bool:
        if self.rate <= 0:
            return True
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(name, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._buckets[name] = (tokens, now)
                return False
            if len(self._buckets) >= self._max and name not in self._buckets:
                self._buckets.clear()  # a flood of names: start over rather than grow
            self._buckets[name] = (tokens - 1.0, now)
            return True


def message_options(limits: Limits | None) -> list[tuple[str, int]]:
    """The server's gRPC options for the message size: gRPC refuses a larger request
    (RESOURCE_EXHAUSTED) before any of the proxy's code sees it."""
    size = (limits or Limits()).max_message_bytes
    return [("grpc.max_receive_message_length", size)]
