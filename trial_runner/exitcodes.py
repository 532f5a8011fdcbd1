"""Runner exit codes: they tell a retry policy (local backend, a Job's podFailurePolicy)
whether another attempt can help. Killed by a signal reads as 128 + signum (retryable)."""

from __future__ import annotations

#: The index is finished: COMPLETE, PRUNED, or already finished by an earlier attempt.
OK = 0
#: This attempt failed (the objective raised, the database went away, ...): retry it.
RETRY = 1
#: The trial failed in a way the same parameters will repeat (NaN, missing metric, timeout):
#: fail this index, keep the others going (podFailurePolicy FailIndex).
NO_RETRY = 3
#: Nothing can run (bad entrypoint, unknown study, index outside the sweep): stop the whole
#: sweep (podFailurePolicy FailJob).
CONFIG = 4

NAMES = {OK: "ok", RETRY: "retryable failure", NO_RETRY: "failed (no retry)",
         CONFIG: "configuration error"}
