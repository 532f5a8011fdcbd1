"""Who may do what through the proxy: the authorisation half of :mod:`.auth`, decided from
the method's name and the request alone (never from the handlers' code).

- an **admin** (the local run's secret; a user or ServiceAccount that the SubjectAccessReview
  of :mod:`.kubeauth` allows) may call everything;
- a **trial pod** may call only the runner's operations, and only on the study of its own
  sweep: every ``study_id`` and ``trial_id`` a request names must belong to it (a trial's
  study is looked up once and cached: a trial never changes study), a study is named only by
  the sweep's own name, a sweep created by its pods (GitOps) only under that name;
- anyone else: nothing.

Requests: sweeper's ``/sweeper.v1.IndexProtocol/<Method>`` sends JSON objects, read as such;
Optuna's ``/optuna.StorageService/<Method>`` sends protobuf messages, read by field name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sweeper.protocol import LAUNCHES_ATTR

SWEEPER_PREFIX = "/sweeper.v1.IndexProtocol/"
OPTUNA_PREFIX = "/optuna.StorageService/"

#: Optuna's StorageService methods a runner uses (its sampler and its trial's reads and
#: writes). Not here: CreateNewStudy, DeleteStudy, SetStudySystemAttribute, GetAllStudies.
#: SetStudyUserAttribute only for the launch counter a GitOps runner writes.
RUNNER_OPTUNA = frozenset({
    "GetStudyIdFromName", "GetStudyNameFromId", "GetStudyDirections",
    "GetStudyUserAttributes", "GetStudySystemAttributes", "CreateNewTrial",
    "SetTrialParameter", "GetTrialIdFromStudyIdTrialNumber", "SetTrialStateValues",
    "SetTrialIntermediateValue", "SetTrialUserAttribute", "SetTrialSystemAttribute",
    "GetTrial", "GetTrials", "SetStudyUserAttribute"})
#: Study user attrs a runner may write (trial_runner.startup: a sweep its pods created).
RUNNER_STUDY_ATTRS = frozenset({LAUNCHES_ATTR})
#: sweeper's own methods a runner never calls: the CLI's (``resume --ignore-stop``).
ADMIN_ONLY_SWEEPER = frozenset({"IgnoreStop"})
#: sweeper's methods that name no study or trial and are harmless to any caller.
UNTARGETED_SWEEPER = frozenset({"Info"})


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: ``name`` for the log (never a secret), the sweep a trial
    pod belongs to, whether it holds the admin role."""

    name: str
    sweep: str | None = None
    admin: bool = False


class Scope:
    """The study ids of sweeps (by name) and of trials, looked up on the proxy's storage and
    cached (positive answers only: a study created later is found then)."""

    def __init__(self, study_of_trial: Callable[[int], int | None],
                 study_id_of: Callable[[str], int | None], max_entries: int = 200_000) -> None:
        self._study_of_trial = study_of_trial
        self._study_id_of = study_id_of
        self._trials: dict[int, int] = {}
        self._study_ids: dict[str, int] = {}
        self._max = max_entries
        self._lock = threading.Lock()

    def trial_study(self, trial_id: int) -> int | None:
        with self._lock:
            known = self._trials.get(trial_id)
        if known is not None:
            return known
        found = self._study_of_trial(trial_id)
        if found is not None:
            with self._lock:
                if len(self._trials) >= self._max:
                    self._trials.clear()
                self._trials[trial_id] = found
        return found

    def study_id(self, name: str) -> int | None:
        with self._lock:
            known = self._study_ids.get(name)
        if known is not None:
            return known
        found = self._study_id_of(name)
        if found is not None:
            with self._lock:
                if len(self._study_ids) >= self._max:
                    self._study_ids.clear()
                self._study_ids[name] = found
        return found

    def forget_study(self, study_id: int) -> None:
        """A deleted study: its name may come back under another id."""
        with self._lock:
            self._study_ids = {n: i for n, i in self._study_ids.items() if i != study_id}
            self._trials = {t: s for t, s in self._trials.items() if s != study_id}


class Policy:
    """``check(caller, method, request)``: None when allowed, else why not (one line)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def check(self, caller: Caller, method: str, request: Any) -> str | None:
        if caller.admin:
            return None
        if caller.sweep is None:
            return "no sweep and no admin role"
        if method.startswith(SWEEPER_PREFIX):
            return self._sweeper(caller.sweep, method[len(SWEEPER_PREFIX):], request)
        if method.startswith(OPTUNA_PREFIX):
            return self._optuna(caller.sweep, method[len(OPTUNA_PREFIX):], request)
        return "not a runner's operation"

    # ---------------------------------------------------------------- sweeper's service

    def _sweeper(self, sweep: str, name: str, request: Any) -> str | None:
        if name in ADMIN_ONLY_SWEEPER:
            return f"{name} is not a runner's operation"
        if name in UNTARGETED_SWEEPER:
            return None
        if not isinstance(request, dict):
            return "not a JSON object"
        if name == "CreateOrResume":  # {"spec": {"record": {... "name": ...}, "base_dir": ...}}
            spec = request.get("spec")
            record = spec.get("record") if isinstance(spec, dict) else None
            named = record.get("name") if isinstance(record, dict) else None
            return None if named == sweep else f"creates sweep {named!r}, not its own"
        after = request.get("after")
        targets = [request, after] if isinstance(after, dict) else [request]
        if not any("study_id" in t or "trial_id" in t for t in targets):
            return f"{name} names no study of its sweep"
        for t in targets:
            denied = self._target(sweep, t.get("study_id"), t.get("trial_id"),
                                  "study_id" in t, "trial_id" in t)
            if denied:
                return denied
        return None

    # ---------------------------------------------------------------- Optuna's service

    def _optuna(self, sweep: str, name: str, request: Any) -> str | None:
        if name not in RUNNER_OPTUNA:
            return f"Optuna's {name} is not a runner's operation"
        if name == "GetStudyIdFromName":
            named = getattr(request, "study_name", None)
            return None if named == sweep else f"looks up study {named!r}, not its own"
        if name == "SetStudyUserAttribute" and getattr(request, "key", None) \
                not in RUNNER_STUDY_ATTRS:
            return "writes a study attribute"
        has_study = _has(request, "study_id")
        has_trial = _has(request, "trial_id")
        if not has_study and not has_trial:
            return f"Optuna's {name} names no study of its sweep"
        return self._target(sweep, getattr(request, "study_id", None),
                            getattr(request, "trial_id", None), has_study, has_trial)

    # ---------------------------------------------------------------- targets

    def _target(self, sweep: str, study_id: Any, trial_id: Any, has_study: bool,
                has_trial: bool) -> str | None:
        own = self.scope.study_id(sweep)
        if has_study:
            if not _is_int(study_id):
                return "study_id is not an integer"
            if own is None or study_id != own:
                return f"study {study_id} is not sweep {sweep!r}'s"
        if has_trial:
            if not _is_int(trial_id):
                return "trial_id is not an integer"
            study = self.scope.trial_study(trial_id)
            if own is None or study != own:
                return f"trial {trial_id} is not in sweep {sweep!r}'s study"
        return None


def _has(message: Any, field: str) -> bool:
    descriptor = getattr(message, "DESCRIPTOR", None)
    return descriptor is not None and field in descriptor.fields_by_name


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
