"""``trial.nodes: N`` on Kubernetes: the sweep's JobSet (:mod:`sweeper.backends.jobset`),
created and watched to its end. Progress, the brake and stale trials come from the study;
the JobSet says when every gang is through (``Completed``) or that it failed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sweeper import protocol
from sweeper.backends import jobset as js
from sweeper.backends import manifests as m
from sweeper.backends.base import RunResult, Tick
from sweeper.backends.kubernetes.client import ClientFactory, KubeClient, Obj
from sweeper.backends.kubernetes.detach import watch_unless_detached
from sweeper.errors import BackendError, SpecError
from sweeper.study import Sweep
from sweeper.study.stop import BRAKE_RULE, brake

Echo = Callable[[str], None]


@dataclass(frozen=True)
class GangSettings:
    poll_interval_s: float
    grace_period_s: float
    detach: bool


def jobset_outcome(obj: Obj) -> tuple[str | None, str]:
    """("Completed" | "Failed" | None while it runs, the condition's reason: message)."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Completed", "Failed") and cond.get("status") == "True":
            why = ": ".join(x for x in (cond.get("reason"), cond.get("message")) if x)
            return str(cond["type"]), why
    return None, ""


def jobset_launch(obj: Obj) -> int:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(m.LAUNCH_ANNOTATION, "0")
    return int(raw) if str(raw).isdigit() else 0


def sweep_jobsets(clients: ClientFactory, namespace: str, sweep_name: str) -> list[Obj]:
    return KubeClient(clients, sweep_name).list_jobsets(namespace, m.selector(sweep_name))


def run_gangs(clients: ClientFactory, sweep: Sweep, settings: GangSettings, echo: Echo,
              tick: Tick, next_launch: int) -> RunResult:
    """Submit the JobSet of this launch and (unless detached) watch it to the end."""
    spec = sweep.spec
    ns = spec.kubernetes.namespace
    api = KubeClient(clients, spec.name)
    existing = sweep_jobsets(clients, ns, spec.name)
    for obj in existing:
        if jobset_outcome(obj)[0] is None:
            raise BackendError(
                f"JobSet {ns}/{obj['metadata']['name']} of sweep {spec.name} is still running; "
                f"wait for it (sweeper status {spec.name}) or stop it (sweeper cancel "
                f"{spec.name})")
    launch = max([next_launch, *(jobset_launch(o) + 1 for o in existing)])
    code = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.CODE_ATTR)
    configmap, body = js.render(spec, launch=launch,
                                code=code if spec.trial.code is not None else None)
    name = body["metadata"]["name"]
    api.apply_configmap(ns, configmap)
    created = api.create_jobset(ns, body)
    api.own_configmap(ns, configmap["metadata"]["name"], created)
    for key, value in ((protocol.LAUNCHES_ATTR, launch + 1), (protocol.BACKEND_ATTR,
                                                              "kubernetes")):
        sweep.storage.set_study_user_attr(sweep.study_id, key, value)
    what = "an open-ended sweep (index after index until the budget is spent)" \
        if spec.open_ended else f"{spec.trials} indexes"
    echo(f"created JobSet {ns}/{name}: {what} on {js.slots(spec)} gang(s) of "
         f"{spec.trial.nodes} pods")
    return watch_unless_detached(f"JobSet {ns}/{name}", spec.name, settings.detach,
                                 lambda: _watch(api, sweep, name, settings, tick))


def _watch(api: KubeClient, sweep: Sweep, name: str, settings: GangSettings,
           tick: Tick) -> RunResult:
    ns = sweep.spec.kubernetes.namespace
    where = f"JobSet {ns}/{name}"
    last_stale = 0.0
    while True:
        obj = api.read_jobset(ns, name)
        if obj is None:
            raise BackendError(f"{where} was deleted while sweeper watched it; `sweeper "
                               f"resume {sweep.name}` relaunches what is missing")
        outcome, why = jobset_outcome(obj)
        stopped = brake(sweep.storage, sweep.study_id, sweep.spec)
        if stopped is not None and stopped.rule == BRAKE_RULE:
            api.delete_jobset(ns, name)
            return RunResult(messages=(f"deleted {where}: the sweep stopped at its start",))
        now = time.monotonic()
        if now - last_stale >= max(1.0, settings.grace_period_s / 4):
            last_stale = now
            sweep.storage.fail_stale_trials(sweep.study_id, settings.grace_period_s)
        tick()
        if outcome is not None:
            break
        time.sleep(settings.poll_interval_s)
    if outcome == "Failed" and "PodFailurePolicy" in why:
        raise SpecError(f"{where} failed: a trial runner reported a configuration error "
                        f"(exit code {protocol.EXIT_CONFIG}); see `sweeper logs "
                        f"{sweep.name}`", source=sweep.spec.source)
    table = sweep.storage.index_table(sweep.study_id, sweep.spec.index_count)
    finished = tuple(s.index for s in table if s.state in ("COMPLETE", "PRUNED"))
    failed = tuple(s.index for s in table if s.state not in ("COMPLETE", "PRUNED"))
    messages = (f"{where} failed: {why}",) if outcome == "Failed" else ()
    return RunResult(finished=finished, failed=failed, messages=messages)
