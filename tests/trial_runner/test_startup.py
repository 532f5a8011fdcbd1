"""The runner's start-up: the sweep from the study, or created from the mounted spec file
(GitOps); every problem with the file is a configuration error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweeper import protocol
from sweeper.errors import SpecError, StudyNotFoundError
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec
from trial_runner.startup import open_sweep


def _file(tmp_path: Path, data: object, name: str = "spec.json") -> dict[str, str]:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return {protocol.ENV_SPEC_FILE: str(path)}


def test_without_a_spec_file_the_sweep_must_exist(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(StudyNotFoundError):
        open_sweep(storage, "t-sweep", {})


def test_the_spec_file_creates_the_sweep_once(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    spec = make_spec()
    env = _file(tmp_path, spec.to_dict())
    sweep = open_sweep(storage, spec.name, env)
    assert sweep.spec.spec_hash == spec.spec_hash
    assert len(storage.get_all_trials(sweep.study_id)) == 10  # the 5 x 2 grid, enqueued in bulk
    again = open_sweep(storage, spec.name, env)
    assert again.study_id == sweep.study_id
    assert len(storage.get_all_trials(sweep.study_id)) == 10
    attrs = storage.get_study_user_attrs(sweep.study_id)
    assert attrs[protocol.LAUNCHES_ATTR] == 1


def test_spec_file_problems_are_configuration_errors(tmp_path: Path) -> None:
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    spec = make_spec()
    create_or_resume(storage, spec)
    with pytest.raises(SpecError, match=r"spec\.json: cannot read the spec file: No such file"):
        open_sweep(storage, spec.name, {protocol.ENV_SPEC_FILE: str(tmp_path / "spec.json")})
    with pytest.raises(SpecError, match=r"spec\.json: the spec file is not valid JSON"):
        open_sweep(storage, spec.name, _file(tmp_path, "{"))
    with pytest.raises(SpecError, match=r"spec\.json: name: the spec file is for sweep "
                                        r"'other', not 't-sweep'"):
        open_sweep(storage, spec.name, _file(tmp_path, make_spec(name="other").to_dict()))
    different = make_spec(seed=99, method="random")
    with pytest.raises(SpecError, match=r"spec\.json: method: a different sweep named "
                                        r"'t-sweep' already exists"):
        open_sweep(storage, spec.name, _file(tmp_path, different.to_dict()))
