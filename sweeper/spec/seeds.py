"""The seed of index i: what a runner seeds its sampler with and a random sweep draws set i
from, so both are a pure function of (spec seed, index)."""

from __future__ import annotations

import hashlib


def index_seed(seed: int, index: int) -> int:
    """A 32-bit seed (what numpy-based samplers accept) that is a pure function of
    (seed, index), stable across Python versions and machines."""
    digest = hashlib.sha256(f"sweeper:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")
