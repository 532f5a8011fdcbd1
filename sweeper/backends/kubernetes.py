"""Kubernetes backend: one Indexed Job per launch, submitted and watched with the official client.

The client is built lazily by :class:`ClientFactory` (kubeconfig, else in-cluster config) the
first time something needs the API; nothing talks to a cluster at import. Every API failure
leaves this module as one :class:`BackendError` line (403 names the missing permission, 404
the missing namespace, 409 the existing Job, 422 the invalid fields). The storage URL is
never sent to the cluster: pods read it from a Secret (see :mod:`sweeper.backends.manifests`).

Besides :class:`KubernetesBackend` (``run``/``resume``), the functions here back ``sweeper
status`` (:func:`sweep_jobs`), ``sweeper logs`` (:func:`index_log`) and ``sweeper cancel``
(:func:`cancel`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends import manifests as m
from sweeper.backends.base import RunResult, Tick
from sweeper.errors import BackendError, SpecError
from sweeper.protocol import INDEX_ATTR, LAUNCHES_ATTR
from sweeper.study import Sweep, fail_stale_trials, mark_failed

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
Echo = Callable[[str], None]
#: Study user attribute counting Kubernetes launches: the next Job is ``NAME-r<count>``.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_FAILURE_COUNT = "batch.kubernetes.io/job-index-failure-count"
INDEX_IGNORED_FAILURE_COUNT = "batch.kubernetes.io/job-index-ignored-failure-count"
#: Pod waiting reasons that will not fix themselves while we watch (surface them at once).
_STUCK_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                  "CreateContainerConfigError", "CreateContainerError")
#: The runner's log format: "2026-01-01 12:00:00,123 ERROR trial_runner: message".
_LOG_PREFIX_RE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,.]+ [A-Z]+ [\w.]+: ")
_FORBIDDEN_RE = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<ns>[^"]*)")?')


# --------------------------------------------------------------------------- the client


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

    @property
    def server(self) -> str:
        return self.api_client().configuration.host

    def _load(self) -> ApiClient:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

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
        except ConfigException as e:
            where = self.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise BackendError(f"cannot load Kubernetes configuration from {where}: "
                               f"{_first_line(str(e))}") from None
        except OSError as e:
            raise BackendError(f"cannot read kubeconfig {e.filename}: {e.strerror}") from None
        return client.ApiClient(cfg)


def _kubeconfig_paths() -> list[str]:
    env = os.environ.get("KUBECONFIG")
    paths = [p for p in env.split(os.pathsep) if p] if env else [
        os.path.expanduser("~/.kube/config")]
    return [p for p in paths if os.path.exists(p)]


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text


# --------------------------------------------------------------------------- errors


def api_error(e: Exception, *, server: str | None = None, job: str | None = None,
              sweep: str | None = None) -> BackendError:
    """One clear line for an ApiException or a connection failure."""
    from kubernetes.client.exceptions import ApiException

    if not isinstance(e, ApiException):
        return _connection_error(e, server)
    if not e.status:  # raised by the client itself: TLS failure, unusable request
        return BackendError(f"cannot talk to the Kubernetes API server at {server or '?'}: "
                            f"{_first_line(str(e.reason or ''))}")
    body: Obj = {}
    try:
        parsed = json.loads(e.body) if e.body else {}
        body = parsed if isinstance(parsed, dict) else {}
    except (TypeError, ValueError):
        pass
    message = str(body.get("message") or e.reason or "").strip()
    details = body.get("details") or {}
    status = e.status
    if status == 403:
        f = _FORBIDDEN_RE.search(message)
        if f:
            resource = f["resource"] + (f".{f['group']}" if f["group"] else "")
            where = f" in namespace {f['ns']}" if f["ns"] else " cluster-wide"
            return BackendError(
                f"permission denied: {f['user']} may not {f['verb']} {resource}{where}; grant "
                "it a Role like the one in manifests/rbac.yaml (jobs create/get/list/watch/"
                "delete, pods get/list, pods/log get)")
        return BackendError(f"permission denied by the Kubernetes API: {message}")
    if status == 401:
        return BackendError("the Kubernetes API rejected the credentials (401 Unauthorized): "
                            "check the kubeconfig user or log in again")
    if status == 404:
        if details.get("kind") == "namespaces" or message.startswith("namespaces "):
            ns = details.get("name") or message
            return BackendError(f"namespace {ns} not found (kubectl apply -k manifests/ "
                                "creates sweeper)")
        return BackendError(f"not found: {message}")
    if status == 409:
        name = details.get("name") or job or "?"
        hint = f" (sweeper cancel {sweep}, or resume)" if sweep else ""
        return BackendError(f"Job {name} already exists{hint}")
    if status == 422:
        causes = details.get("causes") or []
        parts = [f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")
                 for c in causes if isinstance(c, dict)]
        what = "; ".join(parts) or message
        return BackendError(f"the API server rejected Job {details.get('name') or job}: {what}")
    return BackendError(f"Kubernetes API error {status} {e.reason}: {message}")


def _connection_error(e: Exception, server: str | None) -> BackendError:
    reason = e
    for attr in ("reason", "__cause__", "__context__"):
        inner = getattr(reason, attr, None)
        if isinstance(inner, Exception):
            reason = inner
    text = str(reason)
    if "Connection refused" in text or "ConnectionRefused" in type(reason).__name__:
        why = "connection refused"
    elif "timed out" in text.lower() or "Timeout" in type(reason).__name__:
        why = "timed out"
    elif "Name or service not known" in text or "nodename nor servname" in text:
        why = "unknown host"
    else:
        why = _first_line(text.split(": ", 1)[-1]) or type(reason).__name__
    return BackendError(f"cannot reach the Kubernetes API server at {server or '?'}: {why} "
                        "(is the cluster up and the kubeconfig context right?)")


class _Api:
    """Calls the API with a timeout, plain-dict results and errors mapped to BackendError."""

    def __init__(self, clients: ClientFactory, sweep: str | None = None) -> None:
        self.clients = clients
        self.sweep = sweep

    def call(self, fn_name: str, *args: Any, api: str = "batch", job: str | None = None,
             raw: bool = False, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        target = self.clients.batch() if api == "batch" else self.clients.core()
        try:
            resp = getattr(target, fn_name)(*args, _preload_content=False,
                                            _request_timeout=self.clients.request_timeout_s,
                                            **kwargs)
            data = resp.data
        except ApiException as e:
            raise api_error(e, server=self.clients.server, job=job, sweep=self.sweep) from e
        except (HTTPError, OSError) as e:
            raise _connection_error(e, self.clients.server) from e
        if raw:
            return data.decode("utf-8", errors="replace")
        return json.loads(data) if data else {}

    def status_code(self, fn_name: str, *args: Any, api: str = "batch", **kwargs: Any
                    ) -> tuple[int, Any]:
        """Like :meth:`call` but a 404 comes back as (404, None) instead of an error."""
        from kubernetes.client.exceptions import ApiException

        try:
            return 200, self.call(fn_name, *args, api=api, **kwargs)
        except BackendError as e:
            cause = e.__cause__
            if isinstance(cause, ApiException) and cause.status == 404:
                return 404, None
            raise


# --------------------------------------------------------------------------- Job state


@dataclass(frozen=True)
class JobInfo:
    """A sweep Job as ``status``/``logs``/``cancel`` need it, indexes mapped to the sweep's."""

    name: str
    namespace: str
    launch: int
    state: str  # Running, Complete, Failed, Deleting
    reason: str | None
    message: str | None
    active: int
    ready: int
    succeeded: int
    failed: int
    indexes: tuple[int, ...]  # the sweep indexes this Job covers
    completed: tuple[int, ...]  # sweep indexes whose job index completed
    failed_indexes: tuple[int, ...]
    per_pod: int
    mapping: tuple[int, ...] | None
    created: str
    trials: int

    @property
    def finished(self) -> bool:
        return self.state in ("Complete", "Failed")

    @property
    def active_job(self) -> bool:
        return self.state == "Running"

    def sweep_indexes(self, job_index: int) -> list[int]:
        return protocol.chunk(job_index, self.per_pod, self.mapping, self.trials)

    def job_index(self, index: int) -> int | None:
        """The job index whose pod runs sweep index ``index`` (None: not in this Job)."""
        return protocol.job_index_of(index, self.per_pod, self.mapping, self.trials)


def parse_intervals(text: str | None) -> list[int]:
    """``"0-3,5,7-8"`` (Job status completedIndexes/failedIndexes) -> [0,1,2,3,5,7,8]."""
    out: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def job_info(job: Obj, trials: int | None) -> JobInfo:
    """Pure: a Job object (as the API returns it) -> JobInfo. ``trials`` None: the sweep's
    size is not known (no storage at hand); a dense Job then covers its completions."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    ann = meta.get("annotations") or {}
    sweep = (meta.get("labels") or {}).get(m.SWEEP_LABEL, "")
    mapping = protocol.decode_index_map(ann.get(m.INDEX_MAP_ANNOTATION))
    per_pod = int(ann.get(m.INDEXES_PER_POD_ANNOTATION) or 1)
    launch = m.launch_of(sweep, meta.get("name", ""))
    if launch is None:
        launch = int(ann.get(m.LAUNCH_ANNOTATION) or 0)
    state, reason, message = "Running", None, None
    for c in status.get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
            state, reason, message = c["type"], c.get("reason"), c.get("message")
    if meta.get("deletionTimestamp"):
        state = "Deleting"

    completions = int(spec.get("completions") or 0)
    size = trials if trials is not None else \
        (max(mapping) + 1 if mapping else completions * per_pod)

    def mapped(job_indexes: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted({i for k in job_indexes
                             for i in protocol.chunk(k, per_pod, mapping, size)}))
    return JobInfo(
        name=meta.get("name", ""), namespace=meta.get("namespace", ""), launch=launch,
        state=state, reason=reason, message=message,
        active=int(status.get("active") or 0), ready=int(status.get("ready") or 0),
        succeeded=int(status.get("succeeded") or 0), failed=int(status.get("failed") or 0),
        indexes=mapped(range(completions)),
        completed=mapped(parse_intervals(status.get("completedIndexes"))),
        failed_indexes=mapped(parse_intervals(status.get("failedIndexes"))),
        per_pod=per_pod, mapping=mapping, created=str(meta.get("creationTimestamp") or ""),
        trials=size)


def sweep_jobs(clients: ClientFactory, namespace: str, sweep_name: str, trials: int | None
               ) -> list[JobInfo]:
    """Every Job of the sweep in ``namespace``, oldest launch first."""
    data = _Api(clients, sweep_name).call("list_namespaced_job", namespace,
                                          label_selector=m.selector(sweep_name))
    jobs = [job_info(j, trials) for j in data.get("items") or []]
    return sorted(jobs, key=lambda j: (j.launch, j.created, j.name))


# --------------------------------------------------------------------------- the backend


class KubernetesBackend:
    """Creates the sweep's Job and (unless detached) watches it and the study until it ends."""

    name = "kubernetes"

    def __init__(self, clients: ClientFactory, *, detach: bool = False,
                 poll_interval_s: float = 1.0, echo: Echo | None = None,
                 grace_period_s: float | None = None) -> None:
        self.clients = clients
        self.detach = detach
        self.poll_interval_s = poll_interval_s
        #: How often to look for pods that cannot start (a Pending-pods list call).
        self.stuck_check_interval_s = 5.0
        self.echo: Echo = echo or logger.info
        self.grace_period_s = grace_period_s if grace_period_s is not None else \
            protocol.grace_period_s(os.environ)

    def run(self, sweep: Sweep, indexes: Sequence[int], *, storage_url: str, parallelism: int,
            tick: Tick) -> RunResult:
        if not indexes:
            return RunResult()
        spec = dataclasses.replace(sweep.spec, parallelism=parallelism)
        ns = spec.kubernetes.namespace
        if storage_url.startswith("sqlite"):
            self.echo(f"warning: the study is in SQLite on this machine, but the pods use the "
                      f"URL in Secret {spec.kubernetes.storage_secret}; both must name the "
                      "same database (use PostgreSQL)")
        existing = sweep_jobs(self.clients, ns, spec.name, spec.trials)
        for j in existing:
            if j.active_job:
                raise BackendError(
                    f"Job {ns}/{j.name} of sweep {spec.name} is still running; wait for it "
                    f"(sweeper status {spec.name}) or stop it first (sweeper cancel {spec.name})")
        launch = self._next_launch(sweep, existing)
        job = m.render_job(spec, indexes, launch=launch)
        name = job["metadata"]["name"]
        api = _Api(self.clients, spec.name)
        api.call("create_namespaced_job", ns, job, job=name)
        self._record_launch(sweep, launch)
        completions = job["spec"]["completions"]
        sparse = " (a sparse resume Job)" if m.INDEX_MAP_ANNOTATION in \
            job["metadata"]["annotations"] else ""
        self.echo(f"created Job {ns}/{name}: {len(indexes)} indexes in {completions} pods, "
                  f"parallelism {job['spec']['parallelism']}{sparse}")
        if self.detach:
            return RunResult(detached=True, messages=(
                f"detached: Job {ns}/{name} runs on; follow it with `sweeper status "
                f"{spec.name}`, stop it with `sweeper cancel {spec.name}`",))
        try:
            return self._watch(sweep, api, ns, name, tick)
        except KeyboardInterrupt:
            return RunResult(interrupted=True, detached=True, messages=(
                f"stopped watching; Job {ns}/{name} keeps running: `sweeper status "
                f"{spec.name}` shows it, `sweeper cancel {spec.name}` stops it",))

    # ---------------------------------------------------------------- launch bookkeeping

    @staticmethod
    def _next_launch(sweep: Sweep, existing: Sequence[JobInfo]) -> int:
        recorded = sweep.storage.get_study_user_attrs(sweep.study_id).get(LAUNCHES_ATTR, 0)
        taken = max((j.launch for j in existing), default=-1) + 1
        return max(int(recorded or 0), taken)

    @staticmethod
    def _record_launch(sweep: Sweep, launch: int) -> None:
        sweep.storage.set_study_user_attr(sweep.study_id, LAUNCHES_ATTR, launch + 1)

    # ---------------------------------------------------------------- watching

    def _watch(self, sweep: Sweep, api: _Api, ns: str, name: str, tick: Tick) -> RunResult:
        trials = sweep.spec.trials
        seen_failures: set[str] = set()
        warned: set[tuple[str, str]] = set()
        last_failed = 0
        last_pending = last_stale = 0.0
        while True:
            code, job = api.status_code("read_namespaced_job", name, ns)
            if code == 404 or job is None:
                raise BackendError(f"Job {ns}/{name} was deleted while sweeper watched it; "
                                   f"`sweeper resume {sweep.name}` relaunches what is missing")
            info = job_info(job, trials)
            now = time.monotonic()
            if info.failed != last_failed:
                last_failed = info.failed
                self._report_failures(api, info, ns, seen_failures)
            if info.active > info.ready and now - last_pending >= self.stuck_check_interval_s:
                last_pending = now
                self._report_stuck(api, info, ns, warned)
            if now - last_stale >= max(1.0, self.grace_period_s / 4):
                last_stale = now
                fail_stale_trials(sweep.storage, sweep.study_id, self.grace_period_s)
            tick()
            if info.finished or info.state == "Deleting":
                break
            time.sleep(self.poll_interval_s)
        if info.state == "Deleting":
            raise BackendError(f"Job {ns}/{name} is being deleted (sweeper cancel?); "
                               f"`sweeper resume {sweep.name}` relaunches what is missing")
        messages: list[str] = []
        if info.state == "Failed":
            if info.reason == "PodFailurePolicy":
                raise SpecError(f"Job {ns}/{name} failed: a trial runner reported a "
                                f"configuration error (exit code {protocol.EXIT_CONFIG}): "
                                f"{self._config_error_detail(api, info, ns)}",
                                source=sweep.spec.source)
            messages.append(f"Job {ns}/{name} failed: {info.reason or 'Failed'}"
                            + (f": {info.message}" if info.message else ""))
        failed = tuple(i for i in info.indexes if i in set(info.failed_indexes)
                       or (info.state == "Failed" and i not in set(info.completed)))
        return RunResult(finished=info.completed, failed=failed, messages=tuple(messages))

    def _pods(self, api: _Api, info: JobInfo, ns: str, phase: str) -> list[Obj]:
        """The Job's pods in one phase (never every pod: a big sweep keeps thousands)."""
        return api.call("list_namespaced_pod", ns, api="core",
                        label_selector=f"{JOB_NAME_LABEL}={info.name}",
                        field_selector=f"status.phase={phase}").get("items") or []

    def _report_failures(self, api: _Api, info: JobInfo, ns: str, seen: set[str]) -> None:
        """Say once per failed pod which index it ran and what its exit code means."""
        for pod in self._pods(api, info, ns, "Failed"):
            pname = pod["metadata"]["name"]
            if pname not in seen:
                seen.add(pname)
                self.echo(f"index {_pod_indexes(pod, info)}: pod {pname} {_pod_exit(pod)}")

    def _report_stuck(self, api: _Api, info: JobInfo, ns: str,
                      warned: set[tuple[str, str]]) -> None:
        """Warn (once) about pods that cannot start: a bad image, a missing Secret key."""
        for pod in self._pods(api, info, ns, "Pending"):
            pname = pod["metadata"]["name"]
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                waiting = (cs.get("state") or {}).get("waiting") or {}
                reason = waiting.get("reason")
                if reason in _STUCK_REASONS and (pname, reason) not in warned:
                    warned.add((pname, reason))
                    self.echo(f"warning: index {_pod_indexes(pod, info)}: pod {pname} cannot "
                              f"start: {reason}: {_first_line(waiting.get('message') or '')}")

    def _config_error_detail(self, api: _Api, info: JobInfo, ns: str) -> str:
        try:
            for pod in self._pods(api, info, ns, "Failed"):
                if _exit_code(pod) == protocol.EXIT_CONFIG:
                    log = api.call("read_namespaced_pod_log", pod["metadata"]["name"], ns,
                                   api="core", container=m.CONTAINER_NAME, tail_lines=50,
                                   raw=True)
                    lines = [ln for ln in log.splitlines() if "ERROR" in ln] or log.splitlines()
                    last = _LOG_PREFIX_RE.sub("", lines[-1].strip())[:500] if lines \
                        else "no output"
                    return f"{last} (pod {pod['metadata']['name']}, index " \
                           f"{_pod_indexes(pod, info)})"
        except BackendError as e:
            return f"(could not read the pod log: {e})"
        return info.message or "see `sweeper logs`"


def _pod_job_index(pod: Obj) -> int | None:
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(m.COMPLETION_INDEX) \
        or (meta.get("labels") or {}).get(m.COMPLETION_INDEX)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _pod_indexes(pod: Obj, info: JobInfo) -> str:
    k = _pod_job_index(pod)
    if k is None:
        return "?"
    return ",".join(map(str, info.sweep_indexes(k))) or "?"


def _exit_code(pod: Obj) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == m.CONTAINER_NAME:
            term = (cs.get("state") or {}).get("terminated") or {}
            if "exitCode" in term:
                return int(term["exitCode"])
    return None


def _pod_exit(pod: Obj) -> str:
    code = _exit_code(pod)
    status = pod.get("status") or {}
    if code is None:
        why = status.get("reason") or status.get("message") or "unknown reason"
        return f"failed ({why})"
    meaning = protocol.EXIT_NAMES.get(code) or ("killed by a signal" if code > 128 else "error")
    return f"exited with code {code} ({meaning})"


# --------------------------------------------------------------------------- logs


@dataclass(frozen=True)
class PodLog:
    pod: str
    job: str
    phase: str
    attempt: int
    text: str


def index_log(clients: ClientFactory, namespace: str, sweep_name: str, trials: int | None,
              index: int, tail_lines: int | None = None) -> PodLog:
    """The log of the pod that ran sweep index ``index`` most recently (any of its Jobs)."""
    if trials is not None and not 0 <= index < trials:
        raise BackendError(f"index {index} is outside sweep {sweep_name} (0..{trials - 1})")
    api = _Api(clients, sweep_name)
    candidates = []
    for info in sweep_jobs(clients, namespace, sweep_name, trials):
        k = info.job_index(index)
        if k is None:
            continue
        selector = (f"{m.selector(sweep_name)},{JOB_NAME_LABEL}={info.name},"
                    f"{m.COMPLETION_INDEX}={k}")
        for pod in api.call("list_namespaced_pod", namespace, api="core",
                            label_selector=selector).get("items") or []:
            meta = pod.get("metadata") or {}
            ann = meta.get("annotations") or {}
            attempt = int(ann.get(INDEX_FAILURE_COUNT) or 0) + \
                int(ann.get(INDEX_IGNORED_FAILURE_COUNT) or 0)
            candidates.append(((info.launch, attempt, str(meta.get("creationTimestamp") or ""),
                                meta.get("name", "")), pod, info))
    if not candidates:
        where = f"namespace {namespace}"
        raise BackendError(f"no pod of sweep {sweep_name} ran index {index} in {where} (the "
                           "Job may have been deleted: finished Jobs are removed after "
                           "kubernetes.ttl_after_finished, cancelled ones at once)")
    candidates.sort(key=lambda c: c[0])
    key, pod, info = candidates[-1]
    pname = pod["metadata"]["name"]
    kwargs: dict[str, Any] = {"container": m.CONTAINER_NAME}
    if tail_lines is not None:
        kwargs["tail_lines"] = tail_lines
    phase = (pod.get("status") or {}).get("phase") or "Unknown"
    try:
        text = api.call("read_namespaced_pod_log", pname, namespace, api="core", raw=True,
                        **kwargs)
    except BackendError as e:
        if phase == "Pending":
            raise BackendError(f"pod {pname} (index {index}) has not started yet: {e}") from None
        raise
    return PodLog(pod=pname, job=info.name, phase=phase, attempt=key[1], text=text)


# --------------------------------------------------------------------------- cancel


@dataclass(frozen=True)
class CancelResult:
    jobs: tuple[str, ...]
    pods: int
    failed_trials: tuple[int, ...]  # numbers of the RUNNING trials marked FAIL
    unfinished: bool = False  # a Job was still being deleted when we stopped waiting


def cancel(clients: ClientFactory, name: str, namespace: str, *, sweep: Sweep | None = None,
           wait_s: float = 60.0, poll_s: float = 0.5) -> CancelResult:
    """Delete every Job of sweep ``name`` (their pods go with them), wait for them to be gone,
    and (given the ``sweep`` record) mark the RUNNING trials of their indexes FAIL so that a
    resume retries them at once instead of waiting for their heartbeats to go stale."""
    api = _Api(clients, name)
    jobs = sweep_jobs(clients, namespace, name, sweep.spec.trials if sweep else None)
    pods = api.call("list_namespaced_pod", namespace, api="core",
                    label_selector=m.selector(name)).get("items") or []
    indexes: set[int] = set()
    deleted = []
    for j in jobs:
        # Foreground: the Job object stays until the garbage collector has removed its pods,
        # so "the Job is gone" below means "its pods are gone" too.
        code, _ = api.status_code("delete_namespaced_job", j.name, namespace,
                                  propagation_policy="Foreground")
        if code != 404:
            deleted.append(j.name)
        if not j.finished:
            indexes.update(j.indexes)
    deadline = time.monotonic() + wait_s
    remaining = set(deleted)
    while remaining and time.monotonic() < deadline:
        for name in list(remaining):
            code, _ = api.status_code("read_namespaced_job", name, namespace)
            if code == 404:
                remaining.discard(name)
        if remaining:
            time.sleep(poll_s)
    failed: list[int] = []
    if indexes and sweep is not None:
        running = sweep.storage.get_all_trials(sweep.study_id, deepcopy=False,
                                               states=(TrialState.RUNNING,))
        for t in running:
            if t.user_attrs.get(INDEX_ATTR) in indexes and \
                    mark_failed(sweep.storage, t._trial_id, "cancelled (sweeper cancel)"):
                failed.append(t.number)
    return CancelResult(jobs=tuple(deleted), pods=len(pods), failed_trials=tuple(failed),
                        unfinished=bool(remaining))

