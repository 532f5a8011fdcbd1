"""The application layer: one typed function per user action, callable from Python and
notebooks as from the CLI. Each takes typed options and returns a frozen view model that the
CLI renders (a table for people, the view model's ``asdict`` for ``--format json``); errors are
:class:`sweeper.errors.SweeperError` subclasses, turned into exit codes by the CLI alone.

- :mod:`.options`: the shared options (:class:`StorageOptions`, :class:`ClusterOptions`,
  :class:`LaunchOptions`);
- :mod:`.sweeps`: a NAME (or spec file) resolved to its stored sweep;
- :mod:`.backends`: the one place that picks a backend;
- :mod:`.launch`: :func:`launch`, :func:`resume`, :func:`conclude` (``run``, ``resume``);
- :mod:`.manage`: :func:`logs`, :func:`follow_logs`, :func:`cancel`,
  :func:`plan_deletion` and :func:`delete`;
- :mod:`.specs`: :func:`~.specs.validate`, :func:`~.specs.plan`, :func:`~.specs.render`;
- :mod:`.proxy`: :func:`serve_proxy` (``sweeper proxy``).
"""

from __future__ import annotations

from sweeper.app.launch import Launched, conclude, launch, resume, summary_record, summary_text
from sweeper.app.manage import (
    CancelView,
    DeleteOptions,
    DeletionPlan,
    DeletionReport,
    LogRequest,
    LogView,
    cancel,
    delete,
    follow_logs,
    logs,
    plan_deletion,
)
from sweeper.app.options import ClusterOptions, JobOverrides, LaunchOptions, StorageOptions
from sweeper.app.proxy import ProxyOptions, SecurityOptions, serve_proxy

__all__ = [
    "CancelView",
    "ClusterOptions",
    "DeleteOptions",
    "DeletionPlan",
    "DeletionReport",
    "JobOverrides",
    "LaunchOptions",
    "Launched",
    "LogRequest",
    "LogView",
    "ProxyOptions",
    "SecurityOptions",
    "StorageOptions",
    "cancel",
    "conclude",
    "delete",
    "follow_logs",
    "launch",
    "logs",
    "plan_deletion",
    "resume",
    "serve_proxy",
    "summary_record",
    "summary_text",
]
