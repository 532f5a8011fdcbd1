"""``trial.nodes: N`` on Kubernetes: what the pods of one gang (a JobSet slot) run.

Node 0 runs the slot's indexes (``s, s+S, ...``) one after another, each to exactly one
finished trial, retrying a failed attempt while the index has retries left (the whole gang
runs each attempt: its torchrun hosts the rendezvous the others join); then one last round
tells the followers that the slot is done, and every pod of the slot exits 0, so the child
Job completes. Nodes 1..N-1 follow: one torchrun per round, until the done round. A pod that
dies is replaced by the Job controller (same completion index, same DNS name): the trial it was
part of fails once for every rank and the retry's rendezvous takes in the replacement; a
replaced node 0 resumes the slot where the study says (see sweeper.backends.jobset).
"""

from __future__ import annotations

import json
import logging
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeper import protocol
from sweeper.gang import Gang
from sweeper.spec import SweepSpec
from sweeper.study import Sweep
from trial_runner.context import TrialContext
from trial_runner.launcher import follower_argv, rdzv_id, torchrun_argv
from trial_runner.outcome import Outcome, OutcomeState, RunnerSettings
from trial_runner.processes import die_with_parent, terminate
from trial_runner.runner import TrialHook, run_index

logger = logging.getLogger("trial_runner.gang")

#: Seconds between a follower's rounds: node 0 needs a moment between trials.
_ROUND_PAUSE_S = 1.0


def run_slot(sweep: Sweep, gang: Gang, objective: Callable[[TrialContext], Any],
             settings: RunnerSettings, log: Callable[[Outcome], None],
             hook: TrialHook) -> int:
    """Node 0: every index of the slot, then the done round. Exit code: 0 once the slot is
    through (failed indexes stay in the study, for ``sweeper resume``); a configuration
    error's code stops the JobSet."""
    retries = sweep.spec.trial.retries
    for index in gang.indexes(sweep.spec.trials):
        outcome = _run_to_end(sweep, index, objective, settings, retries, log, hook)
        if outcome.exit_code == protocol.EXIT_CONFIG:
            return protocol.EXIT_CONFIG
        if outcome.state is OutcomeState.STOPPED:
            break
    return send_done(sweep.spec, gang)


def _run_to_end(sweep: Sweep, index: int, objective: Callable[[TrialContext], Any],
                settings: RunnerSettings, retries: int, log: Callable[[Outcome], None],
                hook: TrialHook) -> Outcome:
    """Attempts of one index until one finishes, it fails for good, or the sweep stops.
    Counted by this node 0: a replaced node 0 (a pod that died) starts the count again,
    bounded by the child Job's backoffLimit; a resumed sweep's gangs retry what failed."""
    outcome = run_index(sweep, index, objective, settings, trial_hook=hook)
    log(outcome)
    for _ in range(retries):
        if outcome.state is not OutcomeState.FAIL \
                or outcome.exit_code in (protocol.EXIT_CONFIG, protocol.EXIT_NO_RETRY):
            break
        outcome = run_index(sweep, index, objective, settings, trial_hook=hook)
        log(outcome)
    return outcome


def send_done(spec: SweepSpec, gang: Gang) -> int:
    """The last round: the followers' ranks receive ``done`` and their pods exit 0."""
    with tempfile.TemporaryDirectory(prefix="sweeper-done-") as d:
        launch = Path(d) / "launch.json"
        launch.write_text(json.dumps({"done": True}))
        argv = torchrun_argv(spec.trial.ranks, "-m", "trial_runner.rank", str(launch),
                             gang=gang, rdzv_id=rdzv_id(spec, gang))
        code = subprocess.run(argv, preexec_fn=die_with_parent, check=False).returncode
    if code != 0:
        logger.error("the followers did not join the last round (torchrun exit code %d)",
                     code)
        return protocol.EXIT_RETRY
    logger.info("slot %d done: the followers were told", gang.slot)
    return protocol.EXIT_OK


def follow(spec: SweepSpec, gang: Gang, sleep: Callable[[float], None] = time.sleep) -> int:
    """Nodes 1..N-1: join each round's rendezvous until node 0 says the slot is done. A
    round that fails (a trial's rank failed, node 0 restarting) is followed by the next; no
    round at all for ``2 * timeout_s`` is an error (node 0 is gone)."""
    last_ok = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sweeper-follow-") as d:
        note = Path(d) / "note.json"
        while True:
            note.unlink(missing_ok=True)
            proc = subprocess.Popen(follower_argv(spec, gang, note),
                                    preexec_fn=die_with_parent)
            try:
                code = proc.wait()
            except BaseException:
                terminate(proc)
                raise
            status = json.loads(note.read_text()).get("status") if note.exists() else None
            if status == "done":
                return protocol.EXIT_OK
            if code == 0:
                last_ok = time.monotonic()
            elif time.monotonic() - last_ok > 2 * gang.timeout_s:
                logger.error("node %d: no round with node 0 for %.0fs; giving up",
                             gang.node_rank, time.monotonic() - last_ok)
                return protocol.EXIT_RETRY
            else:
                logger.warning("node %d: a round ended with torchrun exit code %d; "
                               "joining the next", gang.node_rank, code)
            sleep(_ROUND_PAUSE_S)
