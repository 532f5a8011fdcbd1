"""The application layer: one typed function per user action, callable from Python and
notebooks as from the CLI. Each takes typed options and returns a frozen view model; the
functions beside it render it as the CLI prints it (a table for people, a JSON document for
``--format json``: :func:`status_record`, :func:`list_record`, ``BestView.document``). Errors
are :class:`sweeper.errors.SweeperError` subclasses, turned into exit codes by the CLI alone.

- :mod:`.options`: the shared options (:class:`StorageOptions`, :class:`ClusterOptions`,
  :class:`LaunchOptions`);
- :mod:`.sweeps`: a NAME (or spec file) resolved to its stored sweep;
- :mod:`.backends`: the one place that picks a backend;
- :mod:`.launch`: :func:`launch`, :func:`resume`, :func:`conclude` (``run``, ``resume``);
- :mod:`.manage`: :func:`logs`, :func:`follow_logs`, :func:`cancel`,
  :func:`plan_deletion` and :func:`delete`;
- :mod:`.specs`: :func:`~.specs.validate`, :func:`~.specs.plan`, :func:`~.specs.render`;
- :mod:`.proxy`: :func:`serve_proxy` (``sweeper proxy``);
- :mod:`.status`: :func:`status` -> :class:`StatusView`, rendered by :func:`status_record`
  (JSON) and :func:`status_lines` (text);
- :mod:`.listing`: :func:`list_sweeps` -> :class:`SweepList` (``list``);
- :mod:`.results`: :func:`best` -> :class:`BestView` (:func:`best_table`), :func:`export`,
  :func:`write_export`, :func:`serve_dashboard`;
- :mod:`.importing`: :func:`import_config` -> :class:`ImportView` (``import katib|wandb``).
"""

from __future__ import annotations

from sweeper.app.importing import ImportView, import_config, import_lines
from sweeper.app.launch import Launched, conclude, launch, resume, summary_record, summary_text
from sweeper.app.listing import SweepList, list_record, list_sweeps, list_table
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
from sweeper.app.results import (
    BestView,
    best,
    best_table,
    export,
    serve_dashboard,
    write_export,
)
from sweeper.app.status import (
    IndexView,
    StatusOptions,
    StatusView,
    status,
    status_lines,
    status_record,
)

__all__ = [
    "BestView",
    "CancelView",
    "ClusterOptions",
    "DeleteOptions",
    "DeletionPlan",
    "DeletionReport",
    "ImportView",
    "IndexView",
    "JobOverrides",
    "LaunchOptions",
    "Launched",
    "LogRequest",
    "LogView",
    "ProxyOptions",
    "SecurityOptions",
    "StatusOptions",
    "StatusView",
    "StorageOptions",
    "SweepList",
    "best",
    "best_table",
    "cancel",
    "conclude",
    "delete",
    "export",
    "follow_logs",
    "import_config",
    "import_lines",
    "launch",
    "list_record",
    "list_sweeps",
    "list_table",
    "logs",
    "plan_deletion",
    "resume",
    "serve_dashboard",
    "serve_proxy",
    "status",
    "status_lines",
    "status_record",
    "summary_record",
    "summary_text",
    "write_export",
]
