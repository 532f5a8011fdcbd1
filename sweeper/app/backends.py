"""The one place that picks a backend object: from an option (``--backend``), else from
what the sweep's launches recorded, else from where its logs are; and builds it from the
options. Everything else calls the :class:`~sweeper.backends.base.Backend` protocol."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sweeper import protocol
from sweeper.app.options import DEFAULT_LOG_DIR, ClusterOptions, LaunchOptions
from sweeper.backends.base import Backend, Description, SweepRef
from sweeper.backends.kubernetes import ClientFactory, KubernetesBackend
from sweeper.backends.local.backend import LocalBackend
from sweeper.backends.local.ops import sweep_log_dir
from sweeper.runlogs import index_log_path
from sweeper.spec import SweepSpec
from sweeper.study import Sweep

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

#: The backends' names, as ``--backend`` takes them.
LOCAL: Final = "local"
KUBERNETES: Final = "kubernetes"
KINDS: Final = (LOCAL, KUBERNETES)
#: The backends whose trials run elsewhere: the code snapshot is uploaded for them, their
#: checkpoints must outlive a pod, and a spec's entrypoint is not imported here.
REMOTE: Final = frozenset({KUBERNETES})

Say = Callable[[str], None]


@dataclass(frozen=True)
class BackendOptions:
    """Where a sweep ran, for the commands that act on it there (logs, cancel): ``kind``
    None: what its launches recorded; ``log_dir`` None: the local log directory its launch
    recorded (else :data:`DEFAULT_LOG_DIR`)."""

    kind: str | None = None
    log_dir: str | None = None
    cluster: ClusterOptions = field(default_factory=ClusterOptions)


def clients(cluster: ClusterOptions, timeout_s: float = 30.0) -> ClientFactory:
    """The cluster's client factory (nothing is read or reached before its first request)."""
    return ClientFactory(cluster.kubeconfig, cluster.context, request_timeout_s=timeout_s)


def kubernetes(cluster: ClusterOptions, *, timeout_s: float = 30.0, detach: bool = False,
               say: Say | None = None, factory: ClientFactory | None = None
               ) -> KubernetesBackend:
    return KubernetesBackend(
        factory or clients(cluster, timeout_s), detach=detach, namespace=cluster.namespace,
        poll_interval_s=protocol.env_float(os.environ, protocol.ENV_POLL_INTERVAL,
                                           protocol.DEFAULT_POLL_INTERVAL_S), echo=say)


def recorded_kind(sweep: Sweep) -> str | None:
    """Where the sweep was last launched, as its launches recorded it (a sweep from before
    the record: kubernetes when it has Kubernetes launches); None: never launched."""
    attrs = sweep.storage.get_study_user_attrs(sweep.study_id)
    recorded = attrs.get(protocol.BACKEND_ATTR)
    if recorded in KINDS:
        return str(recorded)
    return KUBERNETES if attrs.get(protocol.LAUNCHES_ATTR) else None


def launched_on_kubernetes(sweep: Sweep) -> bool:
    return bool(sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.LAUNCHES_ATTR))


def where_it_ran(ref: SweepRef, options: BackendOptions, index: int | None = None) -> Backend:
    """The backend ``options.kind`` names, else where the sweep ran: as recorded; else (a
    sweep from an older sweeper, or no storage at hand) where a log of ``index`` (or the
    sweep's log directory) is found, else Kubernetes when a cluster is configured."""
    local_dir = sweep_log_dir(ref, Path(options.log_dir) if options.log_dir else None,
                              Path(DEFAULT_LOG_DIR))
    local = LocalBackend(local_dir)
    kind = options.kind or (recorded_kind(ref.sweep) if ref.sweep is not None else None)
    if kind == LOCAL:
        return local
    if kind == KUBERNETES:
        return kubernetes(options.cluster)
    here = index_log_path(local_dir, index).exists() if index is not None else local_dir.is_dir()
    if ref.sweep is not None or here:
        return local
    cluster = kubernetes(options.cluster)
    return cluster if cluster.clients.configured() else local


def holders(sweep: Sweep, which: bool | None, cluster: ClusterOptions) -> list[Backend]:
    """The backends that may keep something of a stored sweep (``delete``): this machine's
    always; the cluster's when ``which`` (True: required), or by default when the sweep was
    launched there and a cluster is configured (False: never)."""
    found: list[Backend] = [LocalBackend(Path(DEFAULT_LOG_DIR))]
    if which is False:
        return found
    cluster_backend = kubernetes(cluster, timeout_s=30.0 if which else 10.0)
    if which is None and not (launched_on_kubernetes(sweep)
                              and cluster_backend.clients.configured()):
        return found
    return [*found, cluster_backend]


def describe(sweep: Sweep, which: bool | None, cluster: ClusterOptions,
             indexes: Sequence[int] = ()) -> Description | None:
    """What runs the sweep on a cluster now, and which pod ran each of ``indexes``
    (``status``): None when not asked for (``which`` False) or, by default, when it was
    never launched there or no cluster is configured; never fatal unless ``which`` (a note
    in the description)."""
    if which is False:
        return None
    backend = kubernetes(cluster, timeout_s=30.0 if which else 5.0)
    if which is None and not (launched_on_kubernetes(sweep) and backend.clients.configured()):
        return None
    return backend.describe(sweep, required=bool(which), indexes=indexes)


def for_launch(kind: str, options: LaunchOptions, spec: SweepSpec, say: Say,
               metrics: CollectorRegistry | None = None) -> Backend:
    """The backend ``run``/``resume`` launches on. Locally a spec that asks for GPUs where
    none is visible stops here (or, with ``allow_cpu``, a warning); on Kubernetes a missing
    or broken kubeconfig fails here, before the storage is touched."""
    if kind == LOCAL:
        from sweeper.backends.local.gpus import check_gpus

        warning = check_gpus(spec, allow_cpu=options.allow_cpu)
        if warning:
            say(f"warning: {warning}")
        return LocalBackend(Path(options.log_dir), keyed=True, proxy=options.proxy,
                            metrics=metrics)
    backend = kubernetes(ClusterOptions(options.cluster.kubeconfig, options.cluster.context),
                         detach=options.detach, say=say)
    backend.clients.api_client()
    return backend
