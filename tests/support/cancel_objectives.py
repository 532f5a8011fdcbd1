"""An objective for cancelling a promotion ASHA sweep on Kubernetes: the learning curve of
:mod:`tests.support.asha_objectives`, except that a trial with ``a >= 3`` holds before its
first step for as long as the file ``$HOLD`` exists, so that its pod keeps the Job running
(and its trial RUNNING, in its first run) until the test cancels the sweep."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support.asha_objectives import curve
from trial_runner.context import TrialContext


def curve_or_hold(ctx: TrialContext) -> float:
    hold = os.environ.get("HOLD")
    if hold and float(ctx.params["a"]) >= 3:
        while Path(hold).exists():
            time.sleep(0.2)
    return curve(ctx)
