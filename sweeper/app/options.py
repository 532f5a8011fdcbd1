"""The options the application functions share, as frozen values built once per command (the
CLI builds them from its flags; a notebook writes them out): where the study is
(:class:`StorageOptions`), how to reach a cluster (:class:`ClusterOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: How long a command waits for a storage that is unavailable, unless told otherwise.
DEFAULT_STORAGE_WAIT_S: Final = 30.0
#: The local backend's log directory (``run --log-dir``); each sweep logs under NAME-UID8/.
DEFAULT_LOG_DIR: Final = ".sweeper/logs"


#: The libraries whose loggers stay at WARNING unless asked for -vv: the database layers,
#: HTTP, and the Kubernetes client (their INFO lines are per request).
CHATTY_LIBRARY_LOGGERS: Final = ("sqlalchemy", "alembic", "urllib3", "kubernetes")

@dataclass(frozen=True)
class StorageOptions:
    """Where the study is and how long to wait for it.

    ``url`` None: ``$SWEEPER_STORAGE``, then the spec's ``storage:``, then
    ``sqlite:///sweeps.db`` (:func:`sweeper.study.resolve_storage_url`). ``wait_s``: how long
    a storage that is unavailable is retried before :class:`~sweeper.errors.StorageUnavailableError`
    (0: not at all)."""

    url: str | None = None
    wait_s: float = DEFAULT_STORAGE_WAIT_S


@dataclass(frozen=True)
class ClusterOptions:
    """How to reach a Kubernetes cluster: a kubeconfig file and context (None: $KUBECONFIG
    or ~/.kube/config, else the pod's in-cluster config); ``namespace`` None: the one the
    sweep's spec names (where it was launched)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class JobOverrides:
    """Overrides of the spec's ``kubernetes:`` section (render, run, resume); None keeps the
    spec's."""

    image: str | None = None
    namespace: str | None = None
    storage_secret: str | None = None
    storage_proxy: str | None = None


@dataclass(frozen=True)
class LaunchOptions:
    """Everything ``run`` and ``resume`` take besides the spec or the sweep's name.

    ``backend``: "local" or "kubernetes" (None: ``run`` runs locally, ``resume`` where the
    sweep was last launched). ``parallelism`` None: the spec's. ``log_dir``: the local
    backend's root of index logs. ``detach``: on Kubernetes, return once the Job is created.
    ``overrides``: ``--set KEY=VALUE`` on the spec file (``run``). ``allow_cpu``: run locally
    on the CPU when the spec asks for GPUs and none is visible. ``ignore_stop``: continue a
    sweep a stop rule stopped. ``new_code``: the code changed since the sweep last ran, run
    the rest on it. ``proxy``: local workers through an in-process storage proxy (None: when
    it pays). ``metrics_port``: serve Prometheus metrics there while the sweep runs."""

    storage: StorageOptions = StorageOptions()
    backend: str | None = None
    parallelism: int | None = None
    log_dir: str = DEFAULT_LOG_DIR
    job: JobOverrides = JobOverrides()
    cluster: ClusterOptions = ClusterOptions()
    detach: bool = False
    overrides: tuple[str, ...] = ()
    allow_cpu: bool = False
    ignore_stop: bool = False
    new_code: bool = False
    proxy: bool | None = None
    metrics_port: int | None = None
