"""The ``kubernetes:`` section as frozen dataclasses (the trial pods' image, placement and
shape, and the volumes mounted into them), and the section's normalised form. Pure data, like
``model``, which holds the rest of the spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

VOLUME_KINDS = ("pvc", "config_map", "secret", "nfs", "empty_dir")


@dataclass(frozen=True)
class Volume:
    """One entry of ``kubernetes.volumes``: a volume mounted into every trial pod.

    ``kind`` says which source: ``pvc`` / ``config_map`` / ``secret`` name an object
    (``source``), ``nfs`` a ``server`` and export ``path``, ``empty_dir`` an optional
    ``size_limit``."""

    name: str
    mount_path: str
    kind: Literal["pvc", "config_map", "secret", "nfs", "empty_dir"]
    source: str | None = None
    server: str | None = None
    path: str | None = None
    size_limit: str | None = None
    read_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "mount_path": self.mount_path,
                             "read_only": self.read_only}
        if self.kind == "nfs":
            d["nfs"] = {"server": self.server, "path": self.path}
        elif self.kind == "empty_dir":
            d["empty_dir"] = {"size_limit": self.size_limit} if self.size_limit is not None else {}
        else:
            d[self.kind] = self.source
        return d


#: The trial-runner image of this sweeper version (the Dockerfile's).
DEFAULT_IMAGE = "sweeper-trial-runner:0.1.0"


@dataclass(frozen=True)
class KubernetesSpec:
    image: str = DEFAULT_IMAGE
    #: Set: a ``trial.command`` runs in ``image`` as it is (no sweeper in it) and sweeper's
    #: runner beside it, from this image (:mod:`sweeper.shim`); None: both in ``image``.
    runner_image: str | None = None
    image_pull_policy: str = "IfNotPresent"
    namespace: str = "sweeper"
    storage_secret: str = "sweeper-db"
    storage_secret_key: str = "url"
    service_account: str = "sweeper-trial"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    indexes_per_pod: int = 1
    active_deadline: float | None = None
    ttl_after_finished: float = 86400.0
    #: On the Job and the pod template (Kueue reads ``kueue.x-k8s.io/queue-name`` on the Job).
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority_class: str | None = None
    runtime_class: str | None = None
    #: A Kubernetes Affinity object (camelCase keys), passed through as written.
    affinity: Mapping[str, Any] | None = None
    #: Seconds between SIGTERM and SIGKILL (None: Kubernetes' default, 30 s).
    termination_grace_period: float | None = None
    #: ``/dev/shm`` as a memory emptyDir of this size ("0": none, the runtime's 64 MiB).
    shm_size: str = "1Gi"
    #: ``/scratch``'s sizeLimit and the container's ephemeral-storage request.
    scratch_size: str = "10Gi"
    volumes: tuple[Volume, ...] = ()
    #: The extended resource a GPU is (MIG slices, other vendors); its toleration follows it.
    gpu_resource: str = "nvidia.com/gpu"
    #: False: a CPU request and no limit (no throttling of data loading); True: limit = request.
    cpu_limit: bool = False
    #: A volume of ``volumes`` (writable, durable) where checkpoints go, so a replacement pod
    #: on another node finds them.
    checkpoint_volume: str | None = None
    #: A partial PodTemplateSpec merged into the rendered one (strategic merge).
    pod_template: Mapping[str, Any] | None = None
    #: host:port of a `sweeper proxy` the pods use instead of the database (no Secret then).
    storage_proxy: str | None = None
    #: A ConfigMap whose ``ca.crt`` signed the storage proxy's TLS certificate: the pods
    #: verify the proxy with it (None: the proxy serves plaintext).
    storage_proxy_ca: str | None = None

    def volume(self, name: str) -> Volume | None:
        return next((v for v in self.volumes if v.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The section's normalised form, its unset fields as None (``SweepSpec.to_dict``
        drops them); ``affinity`` and ``pod_template`` only when set, as written."""
        d: dict[str, Any] = {
            "image": self.image, "runner_image": self.runner_image,
            "image_pull_policy": self.image_pull_policy,
            "namespace": self.namespace, "storage_secret": self.storage_secret,
            "storage_secret_key": self.storage_secret_key,
            "service_account": self.service_account, "node_selector": dict(self.node_selector),
            "tolerations": [dict(x) for x in self.tolerations],
            "image_pull_secrets": list(self.image_pull_secrets), "env": dict(self.env),
            "indexes_per_pod": self.indexes_per_pod, "active_deadline": self.active_deadline,
            "ttl_after_finished": self.ttl_after_finished, "labels": dict(self.labels),
            "annotations": dict(self.annotations), "priority_class": self.priority_class,
            "runtime_class": self.runtime_class,
            "termination_grace_period": self.termination_grace_period,
            "shm_size": self.shm_size, "scratch_size": self.scratch_size,
            "volumes": [v.to_dict() for v in self.volumes], "gpu_resource": self.gpu_resource,
            "cpu_limit": self.cpu_limit, "checkpoint_volume": self.checkpoint_volume,
            "storage_proxy": self.storage_proxy, "storage_proxy_ca": self.storage_proxy_ca}
        if self.affinity is not None:
            d["affinity"] = self.affinity
        if self.pod_template is not None:
            d["pod_template"] = self.pod_template
        return d
