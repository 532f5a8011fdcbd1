"""Storage URLs, opening the storage, the sweep record, the index protocol's queries and claims,
and read-side summaries. Shared by the orchestrator and the trial runner, so it imports
neither click nor kubernetes.

- :mod:`.urls`: which storage, its driver, printing it without the password;
- :mod:`.retry`: transient vs permanent database errors, the backoff, the one-line failure;
- :mod:`.storage`: the retrying RDBStorage sweeper hands to Optuna, and ``open_storage``;
- :mod:`.writes`: what "already done" looks like for writes a retry must recognise (tokens);
- :mod:`.record`: the sweep record (create, resume, load), and an open one handed to a
  forked worker;
- :mod:`._bulk`: the locked bulk insert that enqueues plans and creates attempts;
- :mod:`.index`: an index's attempts, claiming one, the next attempt, failing stale ones;
- :mod:`.trials`: batched user attrs, and registering a trial in Optuna's cache;
- :mod:`.summaries`: counts and the per-index table for status and resume, every sweep of
  a storage for list;
- :mod:`._optuna_compat`: the only module that touches Optuna's private API.
"""

from __future__ import annotations

from sweeper._optuna_compat import UnsupportedOptunaError, fixed_params_of, trial_id_of

# Attribute keys and defaults live in sweeper.protocol; re-exported here for existing imports.
from sweeper.protocol import (
    ATTEMPT_ATTR,
    DEFAULT_STORAGE,
    ENQUEUED_ATTR,
    ENV_STORAGE,
    FAIL_REASON_ATTR,
    FIXED_PARAMS_ATTR,
    HASH_ATTR,
    INDEX_ATTR,
    METRIC_NAMES_ATTR,
    RETRY_OF_ATTR,
    SPEC_ATTR,
)
from sweeper.study.index import (
    FINISHED,
    Attempt,
    Taken,
    attempts,
    claim,
    fail_stale_trials,
    mark_failed,
    new_attempt,
    take,
)
from sweeper.study.record import InheritedSweep, Sweep, create_or_resume, load_sweep
from sweeper.study.retry import with_retry
from sweeper.study.storage import RetryingRDBStorage, open_storage
from sweeper.study.summaries import (
    IndexStatus,
    SweepSummary,
    best_so_far,
    index_table,
    indexes_to_run,
    list_sweeps,
    state_counts,
    study_names,
    unfinished_indexes,
)
from sweeper.study.trials import (
    attach_trial,
    open_claimed,
    open_trial,
    set_trial_user_attrs,
    unwritten,
    write_trial,
)
from sweeper.study.urls import driver_url, redact, resolve_storage_url, scrub

__all__ = [
    "ATTEMPT_ATTR",
    "DEFAULT_STORAGE",
    "ENQUEUED_ATTR",
    "ENV_STORAGE",
    "FAIL_REASON_ATTR",
    "FINISHED",
    "FIXED_PARAMS_ATTR",
    "HASH_ATTR",
    "INDEX_ATTR",
    "METRIC_NAMES_ATTR",
    "RETRY_OF_ATTR",
    "SPEC_ATTR",
    "Attempt",
    "IndexStatus",
    "InheritedSweep",
    "RetryingRDBStorage",
    "Sweep",
    "SweepSummary",
    "Taken",
    "UnsupportedOptunaError",
    "attach_trial",
    "attempts",
    "best_so_far",
    "claim",
    "create_or_resume",
    "driver_url",
    "fail_stale_trials",
    "fixed_params_of",
    "index_table",
    "indexes_to_run",
    "list_sweeps",
    "load_sweep",
    "mark_failed",
    "new_attempt",
    "open_claimed",
    "open_storage",
    "open_trial",
    "redact",
    "resolve_storage_url",
    "scrub",
    "set_trial_user_attrs",
    "state_counts",
    "study_names",
    "take",
    "trial_id_of",
    "unfinished_indexes",
    "unwritten",
    "with_retry",
    "write_trial",
]
