"""Kubernetes backend: one Indexed Job per launch, submitted and watched with the official client.

- :mod:`.client`: :class:`ClientFactory` (kubeconfig, else in-cluster config, loaded lazily on
  the first request; nothing talks to a cluster at import) and :class:`KubeClient`, one typed
  method per API call sweeper makes;
- :mod:`.errors`: every API failure as one :class:`~sweeper.errors.BackendError` line (403
  names the missing permission, 404 the missing namespace, 409 the existing Job, 422 the
  invalid fields);
- :mod:`.jobstatus`: pure parsing of Job and Pod objects (:class:`JobInfo`);
- :mod:`.backend`: :class:`KubernetesBackend` (``run``/``resume``: submit and watch);
- :mod:`.ops`: ``sweeper status`` (:func:`sweep_jobs`), ``sweeper logs`` (:func:`index_log`,
  :func:`follow_index_log`) and ``sweeper cancel`` (:func:`cancel`).

The storage URL is never sent to the cluster: pods read it from a Secret (see
:mod:`sweeper.backends.manifests`).
"""

from __future__ import annotations

from sweeper.backends.kubernetes.backend import KubernetesBackend
from sweeper.backends.kubernetes.client import ClientFactory, KubeClient, Obj
from sweeper.backends.kubernetes.errors import api_error, connection_error
from sweeper.backends.kubernetes.jobstatus import (
    INDEX_FAILURE_COUNT,
    INDEX_IGNORED_FAILURE_COUNT,
    JOB_NAME_LABEL,
    JobInfo,
    job_info,
    parse_intervals,
)
from sweeper.backends.kubernetes.ops import (
    CancelResult,
    PodLog,
    cancel,
    follow_index_log,
    index_log,
    sweep_jobs,
)

__all__ = [
    "INDEX_FAILURE_COUNT",
    "INDEX_IGNORED_FAILURE_COUNT",
    "JOB_NAME_LABEL",
    "CancelResult",
    "ClientFactory",
    "JobInfo",
    "KubeClient",
    "KubernetesBackend",
    "Obj",
    "PodLog",
    "api_error",
    "cancel",
    "connection_error",
    "follow_index_log",
    "index_log",
    "job_info",
    "parse_intervals",
    "sweep_jobs",
]
