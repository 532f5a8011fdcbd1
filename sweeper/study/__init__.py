"""The study side of sweeper: opening the storage, the index store's interface and its values,
the sweep record, the stop rules, and a running trial's writes. Shared by the orchestrator and
the trial runner, so it imports neither click nor kubernetes.

- :mod:`.store`: :class:`IndexStore`, every operation of the index protocol and the sweep
  record, the interface callers hold; :mod:`.values`, what its operations take and return;
- :mod:`.open`: ``open_storage``, the one place that picks an implementation: the database
  (:mod:`.sql`, which holds all SQL against Optuna's tables) or the storage proxy
  (:mod:`.remote`, its client and the wire it shares with the server, :mod:`sweeper.proxy`);
- :mod:`.urls`: which storage, its driver, printing it without the password;
- :mod:`.retry`: transient vs permanent database errors, the backoff, the one-line failure;
- :mod:`.record`: the :class:`Sweep` a process holds, creating, resuming and loading one;
  :mod:`.growth`, what may change when a sweep is launched again;
- :mod:`.stop`: the stop rules' decisions;
- :mod:`.trials`: a running trial's batched writes, and its own copy kept in step.

This package's own names are the few every caller needs: open a storage, create, resume or
load the sweep in it. Everything else is imported from the module that defines it.
Optuna's private API is used only in :mod:`sweeper._optuna_compat`.
"""

from __future__ import annotations

from sweeper.study.open import StudyStorage, open_storage
from sweeper.study.record import InheritedSweep, Sweep, create_or_resume, load_sweep
from sweeper.study.store import IndexStore

__all__ = [
    "IndexStore",
    "InheritedSweep",
    "StudyStorage",
    "Sweep",
    "create_or_resume",
    "load_sweep",
    "open_storage",
]
