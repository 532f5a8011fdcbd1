"""Finding the sweep a runner works on: the sweep record in the study, or (GitOps) the spec
file every pod mounts (``SWEEPER_SPEC_FILE``, the ConfigMap ``NAME-spec`` that ``sweeper
render`` emits).

With the spec file, ``kubectl apply`` of the rendered objects is enough: the first runners to
start find no sweep and create it with the same record and bulk enqueue ``sweeper run`` uses
(``create_or_resume``: one study, one plan, however many pods start at once); a sweep of that
name with a different spec is a configuration error, as it is for ``sweeper run``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping

from sweeper import protocol
from sweeper.errors import SpecError, StudyNotFoundError
from sweeper.spec import SweepSpec, load_stored
from sweeper.study import Sweep, create_or_resume, load_sweep
from sweeper.study.growth import changed_spec_error
from sweeper.study.open import StudyStorage

logger = logging.getLogger(__name__)


def open_sweep(storage: StudyStorage, name: str, env: Mapping[str, str]) -> Sweep:
    """The sweep ``name``; created from ``$SWEEPER_SPEC_FILE`` when the storage has none.
    Raises SpecError (a configuration error) or StorageError."""
    path = env.get(protocol.ENV_SPEC_FILE)
    if not path:
        return load_sweep(storage, name)
    spec = read_spec_file(path)
    if spec.name != name:
        raise SpecError(f"the spec file is for sweep {spec.name!r}, not {name!r}", source=path,
                        field="name")
    try:
        sweep = load_sweep(storage, name)
    except StudyNotFoundError:
        # Nobody created it yet (or another runner is in the middle of it: create_or_resume
        # then waits for its lock and finds the record and the plan in place).
        sweep, created = create_or_resume(storage, spec)
        if created:
            logger.info("created sweep %s from %s (%d indexes)", name, path, spec.trials)
        _mark_launched_on_kubernetes(sweep)
        return sweep
    if sweep.spec.spec_hash != spec.spec_hash:
        stored = storage.get_study_user_attrs(sweep.study_id).get(protocol.SPEC_ATTR)
        raise changed_spec_error(spec, stored)
    return sweep


def read_spec_file(path: str) -> SweepSpec:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise SpecError(f"cannot read the spec file: {e.strerror}", source=path) from None
    except ValueError as e:
        raise SpecError(f"the spec file is not valid JSON: {e}", source=path) from None
    if not isinstance(data, dict):
        raise SpecError("the spec file must hold a JSON object", source=path)
    return load_stored(data, source=path)


def _mark_launched_on_kubernetes(sweep: Sweep) -> None:
    """``sweeper resume`` relaunches a sweep where it was launched: a sweep created by its
    pods was launched as Job 0 on Kubernetes (idempotent: every creator writes the same)."""
    attrs = sweep.storage.get_study_user_attrs(sweep.study_id)
    if not attrs.get(protocol.LAUNCHES_ATTR):
        sweep.storage.set_study_user_attr(sweep.study_id, protocol.LAUNCHES_ATTR, 1)
    code = os.environ.get(protocol.ENV_CODE)
    if code and not attrs.get(protocol.CODE_ATTR):  # the snapshot the rendered Job names
        sweep.storage.set_study_user_attr(sweep.study_id, protocol.CODE_ATTR, code)
