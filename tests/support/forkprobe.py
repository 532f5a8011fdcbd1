"""What a forked worker sees (tests/backends/test_forked.py): ``python -m
tests.support.forkprobe OUT [sleep]`` writes its process state to OUT as JSON, then exits
with $PROBE_EXIT (or sleeps until a signal ends it)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path


def worker_name(ctx: object) -> float:
    """A trial objective: 1 in a forked worker (named sweeper-worker), 0 in an exec'd one;
    plus 10 where the worker reaches the study through a storage proxy, plus 100 where it
    took over the sweep its parent had open."""
    from sweeper.backends.forked import inherited_sweep

    forked = Path("/proc/self/comm").read_text().strip() == "sweeper-worker"
    storage = os.environ.get("SWEEPER_STORAGE", "")
    proxied = storage.startswith("grpc://")
    inherited = inherited_sweep(storage, os.environ.get("SWEEPER_STUDY", "")) is not None
    return float(forked) + 10.0 * proxied + 100.0 * inherited


if __name__ == "__main__":
    out, *rest = sys.argv[1:]
    print("probe stdout")
    logging.basicConfig(level=logging.INFO)
    logging.getLogger("probe").info("probe log line")
    state = {
        "env": dict(os.environ),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "comm": Path("/proc/self/comm").read_text().strip(),
        "session_leader": os.getsid(0) == os.getpid(),
        "stdin": os.readlink("/proc/self/fd/0"),
        "argv": sys.argv,
        "sys_path_head": sys.path[:2],
        "random": __import__("random").random(),
        "numpy": float(__import__("numpy").random.random()),
    }
    with open(out, "w") as f:
        json.dump(state, f)
    if rest == ["sleep"]:
        while True:
            time.sleep(1)
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))

