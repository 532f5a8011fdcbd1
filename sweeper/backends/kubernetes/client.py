"""The one place sweeper talks to the Kubernetes API.

:class:`ClientFactory` loads the configuration and builds the official client lazily, the first
time a request needs it (nothing talks to a cluster at import, and commands that never need the
cluster never load a kubeconfig). :class:`KubeClient` wraps it with one typed method per API
call sweeper makes: plain-dict results (JSON as the apiserver sent it, camelCase keys, no model
objects), the request timeout on every call, and every failure leaving as one
:class:`~sweeper.errors.BackendError` line (see :mod:`.errors`).
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sweeper.backends.kubernetes.errors import api_error, connection_error, first_line
from sweeper.errors import BackendError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi

#: A Kubernetes object as JSON (``{"metadata": {...}, "spec": {...}, "status": {...}}``).
Obj = dict[str, Any]


class ClientFactory:
    """Builds the API client on first use and keeps it. The one place config is loaded:
    ``--kubeconfig``/``--context``, else ``$KUBECONFIG`` or ``~/.kube/config``, else the
    in-cluster service account (as kubectl does)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None,
                 request_timeout_s: float = 30.0) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.request_timeout_s = request_timeout_s
        self._api: ApiClient | None = None

    def configured(self) -> bool:
        """Whether any configuration exists (cheap; used to skip optional cluster queries)."""
        return self.kubeconfig is not None or self.context is not None \
            or bool(_kubeconfig_paths()) or "KUBERNETES_SERVICE_HOST" in os.environ

    def api_client(self) -> ApiClient:
        if self._api is None:
            self._api = self._load()
        return self._api

    def batch(self) -> BatchV1Api:
        from kubernetes.client import BatchV1Api

        return BatchV1Api(self.api_client())

    def core(self) -> CoreV1Api:
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self.api_client())

    def custom(self) -> CustomObjectsApi:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.api_client())

    @property
    def server(self) -> str:
        return str(self.api_client().configuration.host)

    def _load(self) -> ApiClient:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
        from yaml import YAMLError

        cfg = client.Configuration()
        try:
            if self.kubeconfig is not None or self.context is not None or _kubeconfig_paths():
                # Explicit path: the client reads $KUBECONFIG once, when it is imported.
                path = self.kubeconfig or os.environ.get("KUBECONFIG") or \
                    os.path.expanduser("~/.kube/config")
                config.load_kube_config(config_file=path, context=self.context,
                                        client_configuration=cfg, persist_config=False)
            elif "KUBERNETES_SERVICE_HOST" in os.environ:
                config.load_incluster_config(client_configuration=cfg)
            else:
                raise BackendError("no Kubernetes configuration: pass --kubeconfig, set "
                                   "$KUBECONFIG or create ~/.kube/config (or run in a cluster)")
        except (ConfigException, YAMLError) as e:  # YAMLError: not a kubeconfig at all
            where = self.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise BackendError(f"cannot load Kubernetes configuration from {where}: "
                               f"{first_line(str(e))}") from None
        except OSError as e:
            raise BackendError(f"cannot read kubeconfig {e.filename}: {e.strerror}") from None
        return client.ApiClient(cfg)


def _kubeconfig_paths() -> list[str]:
    env = os.environ.get("KUBECONFIG")
    paths = [p for p in env.split(os.pathsep) if p] if env else [
        os.path.expanduser("~/.kube/config")]
    return [p for p in paths if os.path.exists(p)]


class KubeClient:
    """Every API call sweeper makes, one typed method each, for one sweep (named in errors).

    Results are the JSON the apiserver sent (``_preload_content=False``: no model objects,
    so what tests compare is exactly what went over the wire)."""

    def __init__(self, factory: ClientFactory, sweep: str | None = None) -> None:
        self.factory = factory
        self.sweep = sweep

    # ---------------------------------------------------------------- batch/v1 Jobs

    def create_job(self, namespace: str, body: Obj) -> Obj:
        name = str((body.get("metadata") or {}).get("name") or "?")
        return _json(self._request(self.factory.batch().create_namespaced_job, namespace, body,
                                   job=name))

    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        return _items(self._request(self.factory.batch().list_namespaced_job, namespace,
                                    label_selector=label_selector))

    def read_job(self, namespace: str, name: str) -> Obj | None:
        """The Job, or None when there is none of that name."""
        data = self._request(self.factory.batch().read_namespaced_job, name, namespace,
                             job=name, missing_ok=True)
        return None if data is None else _json(data)

    def delete_job(self, namespace: str, name: str, *,
                   propagation_policy: str = "Foreground") -> bool:
        """Delete the Job (and, with Background/Foreground propagation, its pods); False when
        it was already gone. Without a policy batch/v1 orphans the pods, so one is always sent."""
        data = self._request(self.factory.batch().delete_namespaced_job, name, namespace,
                             job=name, missing_ok=True, propagation_policy=propagation_policy)
        return data is not None

    # ---------------------------------------------------------------- JobSets (multi-node)

    def create_jobset(self, namespace: str, body: Obj) -> Obj:
        from sweeper.backends.jobset import GROUP, PLURAL, VERSION

        name = str(body["metadata"]["name"])
        return _json(self._request(self.factory.custom().create_namespaced_custom_object,
                                   GROUP, VERSION, namespace, PLURAL, body, job=name))

    def read_jobset(self, namespace: str, name: str) -> Obj | None:
        from sweeper.backends.jobset import GROUP, PLURAL, VERSION

        data = self._request(self.factory.custom().get_namespaced_custom_object, GROUP,
                             VERSION, namespace, PLURAL, name, job=name, missing_ok=True)
        return None if data is None else _json(data)

    def list_jobsets(self, namespace: str, label_selector: str) -> list[Obj]:
        """The JobSets selected; none where JobSet's CRD is not installed."""
        from sweeper.backends.jobset import GROUP, PLURAL, VERSION

        return _items(self._request(self.factory.custom().list_namespaced_custom_object,
                                    GROUP, VERSION, namespace, PLURAL, missing_ok=True,
                                    label_selector=label_selector))

    def delete_jobset(self, namespace: str, name: str) -> bool:
        """Delete the JobSet with its Jobs and pods (foreground); False when it was gone."""
        from sweeper.backends.jobset import GROUP, PLURAL, VERSION

        data = self._request(self.factory.custom().delete_namespaced_custom_object, GROUP,
                             VERSION, namespace, PLURAL, name, job=name, missing_ok=True,
                             propagation_policy="Foreground")
        return data is not None

    # ---------------------------------------------------------------- v1 ConfigMaps

    def apply_configmap(self, namespace: str, body: Obj) -> None:
        """Create the ConfigMap, or replace the one of that name (a resume of the same sweep
        writes the same spec again; a changed image or parallelism updates it)."""
        core = self.factory.core()
        name = str(body["metadata"]["name"])
        created = self._request(core.create_namespaced_config_map, namespace, body,
                                conflict_ok=True)
        if created is None:
            self._request(core.replace_namespaced_config_map, name, namespace, body)

    def own_configmap(self, namespace: str, name: str, job: Obj) -> None:
        """Make the Job an owner of the ConfigMap: the garbage collector removes it with the
        sweep's last Job (``sweeper delete``), as it removes the Job's pods."""
        meta = job["metadata"]
        ref = {"apiVersion": job.get("apiVersion", "batch/v1"), "kind": job.get("kind", "Job"),
               "name": meta["name"],
               "uid": meta["uid"], "blockOwnerDeletion": False, "controller": False}
        current = self.read_configmap(namespace, name)
        if current is None:
            return
        refs = [r for r in current["metadata"].get("ownerReferences") or []
                if r.get("uid") != meta["uid"]] + [ref]
        self._request(self.factory.core().patch_namespaced_config_map, name, namespace,
                      {"metadata": {"ownerReferences": refs,
                                    "resourceVersion": current["metadata"]["resourceVersion"]}})

    def read_configmap(self, namespace: str, name: str) -> Obj | None:
        """The ConfigMap, or None when there is none of that name."""
        data = self._request(self.factory.core().read_namespaced_config_map, name, namespace,
                             missing_ok=True)
        return None if data is None else _json(data)

    def delete_configmap(self, namespace: str, name: str) -> bool:
        """Delete the ConfigMap; False when it was already gone."""
        data = self._request(self.factory.core().delete_namespaced_config_map, name, namespace,
                             missing_ok=True)
        return data is not None

    # ---------------------------------------------------------------- v1 Events

    def job_events(self, namespace: str, job: str, reason: str) -> list[Obj]:
        """The Job's events of one reason (e.g. FailedCreate: the Job controller could not
        create a pod, such as one Pod Security admission refused)."""
        selector = f"involvedObject.kind=Job,involvedObject.name={job},reason={reason}"
        return _items(self._request(self.factory.core().list_namespaced_event, namespace,
                                    field_selector=selector))

    # ---------------------------------------------------------------- v1 Pods

    def list_pods(self, namespace: str, label_selector: str, *,
                  field_selector: str | None = None) -> list[Obj]:
        kwargs: dict[str, Any] = {} if field_selector is None else {
            "field_selector": field_selector}
        return _items(self._request(self.factory.core().list_namespaced_pod, namespace,
                                    label_selector=label_selector, **kwargs))

    def read_pod_log(self, namespace: str, name: str, *, container: str,
                     tail_lines: int | None = None) -> str:
        kwargs: dict[str, Any] = {} if tail_lines is None else {"tail_lines": tail_lines}
        data = self._request(self.factory.core().read_namespaced_pod_log, name, namespace,
                             container=container, **kwargs)
        return (data or b"").decode("utf-8", errors="replace")

    def stream_pod_log(self, namespace: str, name: str, *, container: str,
                       tail_lines: int | None = None) -> Iterator[str]:
        """The pod's log as it is written (``follow=True``), until the container ends. No read
        timeout: a trial may print nothing for a long time."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs: dict[str, Any] = {} if tail_lines is None else {"tail_lines": tail_lines}
        try:
            resp = self.factory.core().read_namespaced_pod_log(
                name, namespace, container=container, follow=True, _preload_content=False,
                _request_timeout=(self.factory.request_timeout_s, None), **kwargs)
        except ApiException as e:
            raise api_error(e, server=self.factory.server, sweep=self.sweep) from e
        except (HTTPError, OSError) as e:
            raise connection_error(e, self.factory.server) from e
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            for chunk in resp.stream(4096, decode_content=True):
                text = decoder.decode(chunk)
                if text:
                    yield text
        except (HTTPError, OSError) as e:
            raise connection_error(e, self.factory.server) from e
        finally:
            resp.release_conn()
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    # ---------------------------------------------------------------- plumbing

    def _request(self, method: Callable[..., Any], *args: Any, job: str | None = None,
                 missing_ok: bool = False, conflict_ok: bool = False, **kwargs: Any
                 ) -> bytes | None:
        """Call ``method`` with the timeout; the raw body, None for a 404 when ``missing_ok``
        (a 409 when ``conflict_ok``)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            resp = method(*args, _preload_content=False,
                          _request_timeout=self.factory.request_timeout_s, **kwargs)
            data: bytes = resp.data
        except ApiException as e:
            if (missing_ok and e.status == 404) or (conflict_ok and e.status == 409):
                return None
            raise api_error(e, server=self.factory.server, job=job, sweep=self.sweep) from e
        except (HTTPError, OSError) as e:
            raise connection_error(e, self.factory.server) from e
        return data


def _json(data: bytes | None) -> Obj:
    parsed = json.loads(data) if data else {}
    return parsed if isinstance(parsed, dict) else {}


def _items(data: bytes | None) -> list[Obj]:
    items = _json(data).get("items") or []
    return [item for item in items if isinstance(item, dict)]
