"""Every synthetic example in search_spaces/ runs end to end through `sweeper run` (local
backend, SQLite): one finished trial per index, each in the example's space."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper.cli import cli
from sweeper.spec import load_spec
from sweeper.study import load_sweep, open_storage
from tests.support.helpers import contains

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "search_spaces").glob("synthetic_*.yaml"))


def test_every_method_has_a_synthetic_example() -> None:
    methods = {load_spec(p).method for p in EXAMPLES}
    assert methods >= {"gp", "cmaes", "qmc", "nsga2", "nsga3"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_end_to_end(path: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0 and not result.stderr, result.output
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", url])
    assert result.exit_code == 0, result.output
    spec = load_spec(path)
    trials = load_sweep(open_storage(url), spec.name).study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert Counter(t.user_attrs["sweeper:index"] for t in done) == \
        Counter(range(spec.trials))
    declared = {p.name for p in spec.parameters}
    assert all(contains(spec, {k: v for k, v in t.params.items() if k in declared})
               for t in done)
    if path.stem == "synthetic_define_by_run":  # the code's own parameters are on the trials
        for t in done:
            extra = set(t.params) - declared
            assert extra == {f"width{k}" for k in range(t.params["layers"])} | \
                ({"momentum"} if t.params["optimizer"] == "sgd" else set())
    else:
        assert all(set(t.params) <= declared for t in done)
    if spec.is_multi_objective:
        assert "Pareto-optimal trials" in result.stdout
