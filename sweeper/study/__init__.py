"""The study side of sweeper: opening the storage, the index store's interface and its values,
the sweep record, the stop rules, and a running trial's writes. Shared by the orchestrator and
the trial runner, so it imports neither click nor kubernetes.

- :mod:`.store`: :class:`IndexStore`, every operation of the index protocol and the sweep
  record, the interface callers hold; :mod:`.values`, what its operations take and return;
- :mod:`.open`: ``open_storage``, the one place that picks an implementation: the database
  (:mod:`.sql`, which holds all SQL against Optuna's tables) or the storage proxy
  (:mod:`sweeper.proxy.client`);
- :mod:`.urls`: which storage, its driver, printing it without the password;
- :mod:`.retry`: transient vs permanent database errors, the backoff, the one-line failure;
- :mod:`.record`: the :class:`Sweep` a process holds, creating, resuming and loading one;
  :mod:`.growth`, what may change when a sweep is launched again;
- :mod:`.stop`: the stop rules' decisions;
- :mod:`.trials`: a running trial's batched writes, and its own copy kept in step.

Optuna's private API is used only in :mod:`sweeper._optuna_compat`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from sweeper.study.record import (
    InheritedSweep,
    Sweep,
    create_or_resume,
    indexes_to_run,
    load_sweep,
    unfinished_indexes,
)
from sweeper.study.retry import with_retry
from sweeper.study.sql.trials import attach_trial, open_claimed, open_trial
from sweeper.study.store import IndexStore
from sweeper.study.trials import set_trial_user_attrs, unwritten, write_trial
from sweeper.study.urls import driver_url, redact, resolve_storage_url, scrub
from sweeper.study.values import (
    FINISHED,
    Attempt,
    IndexStatus,
    StopState,
    SweepSummary,
    Taken,
)

if TYPE_CHECKING:
    from sweeper.study.open import StudyStorage, open_storage


def __getattr__(name: str) -> Any:
    # The factory imports the proxy client, which imports this package's interface: loaded on
    # first use, so that importing sweeper.proxy.client first works.
    if name in ("open_storage", "StudyStorage"):
        from sweeper.study import open as opening

        return getattr(opening, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "IndexStore",
    "InheritedSweep",
    "StopState",
    "StudyStorage",
    "Sweep",
    "SweepSummary",
    "Taken",
    "UnsupportedOptunaError",
    "attach_trial",
    "create_or_resume",
    "driver_url",
    "fixed_params_of",
    "indexes_to_run",
    "load_sweep",
    "open_claimed",
    "open_storage",
    "open_trial",
    "redact",
    "resolve_storage_url",
    "scrub",
    "set_trial_user_attrs",
    "trial_id_of",
    "unfinished_indexes",
    "unwritten",
    "with_retry",
    "write_trial",
]
