"""A sweep's state belongs to the sweep, not to its name: each study gets an identity when it
is created, and its local checkpoints and logs (and checkpoint prefixes in S3 or on a volume)
are keyed by it. A new sweep under an old name, after ``rm sweeps.db`` or ``sweeper delete``,
starts clean; the same sweep resumed finds its own; delete removes what is the sweep's."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner, Result

from sweeper import protocol
from sweeper.cli import cli
from sweeper.study import load_sweep, open_storage

SPEC = """
name: ident
method: grid
objective: {metric: loss, direction: minimize}
parallelism: 1
trial:
  entrypoint: tests.support.cluster_objectives:resumable
  fixed: {steps: 4, fail_at: 1}
  retries: 1
parameters:
  x: {type: int, values: [0]}
"""


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _start_steps(db: Path) -> list[int]:
    """start_step of each attempt of index 0, in order."""
    study = optuna.load_study(study_name="ident", storage=f"sqlite:///{db}")
    return [t.user_attrs["start_step"] for t in study.trials]


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # .sweeper/ and sweeps.db land here
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))  # tests.support
    path = tmp_path / "ident.yaml"
    path.write_text(SPEC)
    return path


def test_a_new_sweep_under_an_old_name_starts_clean(spec: Path, tmp_path: Path) -> None:
    db = tmp_path / "sweeps.db"
    for _ in range(2):  # the same spec, the study file removed in between
        result = _run("run", str(spec))
        assert result.exit_code == 0, result.output
        # The first attempt fails after step 1; its retry resumes from that checkpoint (its
        # own sweep's), never from a checkpoint of the sweep before it (steps 0-3 saved).
        assert _start_steps(db) == [0, 2]
        logs = _run("logs", "ident", "--index", "0")
        assert logs.exit_code == 0, logs.output
        assert "attempts in the file: 0-1" in logs.stderr  # this sweep's attempts only
        db.unlink()
    keyed = sorted(p.name for p in (tmp_path / ".sweeper" / "checkpoints").iterdir())
    assert len(keyed) == 2 and all(k.startswith("ident-") for k in keyed)


def test_delete_removes_the_sweeps_local_state_and_a_new_one_reads_none(
        spec: Path, tmp_path: Path) -> None:
    assert _run("run", str(spec)).exit_code == 0
    sweep = load_sweep(open_storage(f"sqlite:///{tmp_path / 'sweeps.db'}"), "ident")
    assert sweep.uid is not None and sweep.state_key == f"ident-{sweep.uid[:8]}"
    checkpoints = tmp_path / ".sweeper" / "checkpoints" / sweep.state_key
    logs = tmp_path / ".sweeper" / "logs" / sweep.state_key
    assert (checkpoints / "index-0" / "checkpoint.pt").is_file()
    assert (logs / "index-0.log").is_file()

    deleted = _run("delete", "ident", "--yes")
    assert deleted.exit_code == 0, deleted.output
    assert f"removed the local logs {logs}" in deleted.output
    assert f"removed the local checkpoints {checkpoints}" in deleted.output
    assert not checkpoints.exists() and not logs.exists()

    again = _run("run", str(spec))
    assert again.exit_code == 0, again.output
    assert _start_steps(tmp_path / "sweeps.db") == [0, 2]
    assert "resumes from the checkpoint" not in again.output


def test_a_study_from_before_identities_keeps_the_layout_by_name() -> None:
    assert protocol.state_key("ident", None) == "ident"
    assert protocol.state_key("ident", "0123456789abcdef") == "ident-01234567"
