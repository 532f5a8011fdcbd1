"""Objectives for the cluster-readiness tests (issue 10), run by real trial runners (local
processes or fake pods) as ``tests.support.cluster_objectives:NAME``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from trial_runner.context import TrialContext


def stubborn(ctx: TrialContext) -> float:
    """Swallows SIGTERM's Interrupted and keeps going: only the runner's own deadline after
    SIGTERM (the termination grace period) ends it. Writes ``started`` into $MARKER_DIR."""
    Path(os.environ["MARKER_DIR"], "started").write_text(str(os.getpid()))
    while True:
        try:
            time.sleep(0.1)
        except BaseException:  # noqa: BLE001 - the point: user code that ignores SIGTERM
            continue
