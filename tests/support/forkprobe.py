"""What a forked worker sees (tests/backends/local/test_forked.py): the entry
``tests.support.forkprobe:main`` called with ``[OUT]`` or ``[OUT, "sleep"]`` (or ``python -m
tests.support.forkprobe OUT [sleep]``) writes its process state to OUT as JSON, then exits
with $PROBE_EXIT (or sleeps until a signal ends it)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

#: The attribute a test sets on its sweep's storage object (to the test process's pid) before
#: its workers are forked: a worker sees it only on a storage it took over from that process.
PARENT_MARK = "forkprobe_parent"


def worker_name(ctx: Any) -> float:
    """A trial objective: 1 in a forked worker (named sweeper-worker), 0 in an exec'd one;
    plus 10 where the worker reaches the study through a storage proxy, plus 100 where it
    took over the sweep its parent had open (its storage object carries :data:`PARENT_MARK`)."""
    forked = Path("/proc/self/comm").read_text().strip() == "sweeper-worker"
    proxied = os.environ.get("SWEEPER_STORAGE", "").startswith("grpc://")
    storage = ctx.trial.storage  # Optuna's cache around the sweep's storage, if any
    storage = vars(storage).get("_backend", storage)
    inherited = getattr(storage, PARENT_MARK, None) == os.getppid()
    return float(forked) + 10.0 * proxied + 100.0 * inherited


def main(argv: list[str]) -> int:
    # What the worker found imported (its parent's, before it forked): first, before any import.
    loaded = [m for m in ("trial_runner.code", "numpy.random") if m in sys.modules]
    out, *rest = argv
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
        "loaded": loaded,
    }
    with open(out, "w") as f:
        json.dump(state, f)
    if rest == ["sleep"]:
        while True:
            time.sleep(1)
    return int(os.environ.get("PROBE_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

