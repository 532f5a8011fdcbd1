"""What the README promises `seed` makes reproducible, and no more: the same spec gives the
same parameter sets on two storages for grid and random at any parallelism, and for tpe at
parallelism 1 (parallel tpe depends on timing and is not promised)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.support.compare import isolate, quadratic_spec, run_sweep


def _params_by_index(url: str, name: str) -> dict[int, dict[str, Any]]:
    study = optuna.load_study(study_name=name, storage=url)
    return {t.user_attrs["sweeper:index"]: t.params for t in study.get_trials(deepcopy=False)
            if t.state.is_finished()}


@pytest.mark.parametrize("method, parallelism", [("random", 3), ("grid", 3), ("tpe", 1)])
def test_the_same_spec_proposes_the_same_sets_on_two_storages(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, parallelism: int) -> None:
    isolate(tmp_path, monkeypatch)
    extra: dict[str, Any] = {"parallelism": parallelism}
    if method == "tpe":
        extra["sampler"] = {"n_startup_trials": 3}
    if method == "grid":
        extra["parameters"] = {"x": {"type": "float", "values": [-1.0, 0.0, 0.5, 1.5]},
                               "opt": {"type": "categorical", "choices": ["adam", "sgd"]}}
    spec = quadratic_spec("repro", trials=8, method=method, **extra)
    runs = []
    for db in ("a", "b"):
        url = f"sqlite:///{tmp_path / f'{db}.db'}"
        run_sweep(tmp_path, url, spec)
        runs.append(_params_by_index(url, "repro"))
    assert len(runs[0]) == 8
    assert runs[0] == runs[1]
