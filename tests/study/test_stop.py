"""Stop rules: each rule fires when it should (and not before), the first to fire is recorded
once on the study, a runner that starts after the stop creates no trial, --ignore-stop turns
the rules off. Real storages, real runner processes for the CLI and the pod's path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.cli import cli
from sweeper.study import create_or_resume, load_sweep, open_storage
from sweeper.study.sql.stop import record_stop
from sweeper.study.stop import after_trial, before_start
from tests.support.helpers import make_spec, write_spec
from trial_runner.context import TrialContext
from trial_runner.runner import RunnerSettings, run_index

REPO = Path(__file__).resolve().parents[2]


def settings(tmp_path: Path) -> RunnerSettings:
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=2.0,
                          checkpoint_root=tmp_path / "ckpt")


def by_index(values: list[float]) -> Any:
    def objective(ctx: TrialContext) -> float:
        return values[ctx.index]

    return objective


def sweep_of(url: str, **stop: Any) -> Any:
    sweep, _ = create_or_resume(open_storage(url), make_spec(method="random", trials=10,
                                                             stop=stop, trial={"retries": 0}))
    return sweep


def test_value_fires_on_the_first_trial_that_reaches_it(storage_url: str,
                                                        tmp_path: Path) -> None:
    sweep = sweep_of(storage_url, value=0.5)
    objective = by_index([0.9, 0.8, 0.4, 0.1])
    for i in range(2):
        assert run_index(sweep, i, objective, settings(tmp_path)).state == "COMPLETE"
    assert sweep.storage.stop_state(sweep.study_id) is None
    run_index(sweep, 2, objective, settings(tmp_path))
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.stopped and state.rule == "value" and state.trial == 2
    assert "trial #2 reached loss=0.4 (stop.value 0.5)" in state.reason
    out = run_index(sweep, 3, objective, settings(tmp_path))
    assert (out.exit_code, out.state, out.trial_number) == (protocol.EXIT_OK, "STOPPED", None)
    assert "the sweep is stopped (stop rule value fired at" in out.message
    # the planned trial of index 3 was never claimed
    states = [t.state for t in sweep.study().get_trials()]
    assert states.count(TrialState.COMPLETE) == 3 and states.count(TrialState.RUNNING) == 0


def test_patience_counts_trials_finished_since_the_best(sqlite_url: str,
                                                        tmp_path: Path) -> None:
    sweep = sweep_of(sqlite_url, patience=3)
    objective = by_index([5.0, 1.0, 2.0, 1.0, 3.0, 0.5, 9.0])  # a tie is no improvement
    for i in range(4):
        run_index(sweep, i, objective, settings(tmp_path))
    assert sweep.storage.stop_state(sweep.study_id) is None  # 2 since #1
    run_index(sweep, 4, objective, settings(tmp_path))
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.rule == "patience" and state.trial == 1
    assert state.reason.startswith("3 trials finished since the best, trial #1 (loss=1)")


def test_max_failed_trials_counts_indexes_that_failed_for_good(storage_url: str,
                                                               tmp_path: Path) -> None:
    spec = make_spec(method="random", trials=10, stop={"max_failed_trials": 2},
                     trial={"retries": 1})
    sweep, _ = create_or_resume(open_storage(storage_url), spec)

    def broken(ctx: TrialContext) -> float:
        raise RuntimeError("no GPU")

    run_index(sweep, 5, lambda ctx: 1.0, settings(tmp_path))  # one done: the brake is off
    run_index(sweep, 0, broken, settings(tmp_path))  # attempt 0 of 2: may be retried
    run_index(sweep, 0, broken, settings(tmp_path))  # attempt 1: failed for good
    assert sweep.storage.stop_state(sweep.study_id) is None
    run_index(sweep, 1, lambda ctx: float("nan"), settings(tmp_path))  # no retry fixes NaN
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.rule == "max_failed_trials"
    assert state.reason == "2 indexes failed for good (max_failed_trials 2)"
    trials = sweep.study().get_trials()
    assert [t.user_attrs.get("sweeper:failed_for_good") for t in trials
            if t.state == TrialState.FAIL] == [None, True, True]


def test_a_runner_records_the_brake_and_the_next_one_does_not_start(storage_url: str,
                                                                    tmp_path: Path) -> None:
    """The brake does not wait for a launcher's poll: the runner whose failure is the
    limit-th records the stop, and the next runner reads it before it claims anything."""
    spec = make_spec(method="random", trials=10, stop={"max_failed_trials": 2})
    sweep, _ = create_or_resume(open_storage(storage_url), spec)

    def broken(ctx: TrialContext) -> float:
        raise RuntimeError("no GPU")

    run_index(sweep, 0, broken, settings(tmp_path))
    assert sweep.storage.stop_state(sweep.study_id) is None
    run_index(sweep, 1, broken, settings(tmp_path))
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.rule == "failing_start", state
    out = run_index(sweep, 2, lambda ctx: 1.0, settings(tmp_path))
    assert out.state == protocol.STOPPED and "failing_start" in out.message
    ran = [t for t in sweep.study().get_trials() if t.state != TrialState.WAITING]
    assert [t.state for t in ran] == [TrialState.FAIL, TrialState.FAIL]


def test_max_duration_counts_from_the_first_launch(sqlite_url: str, tmp_path: Path) -> None:
    sweep = sweep_of(sqlite_url, max_duration="1h")
    assert before_start(sweep.storage, sweep.study_id, sweep.spec) is None
    with sweep.storage.engine.begin() as conn:  # the sweep was launched 2 hours ago
        conn.execute(sa.text("UPDATE study_user_attributes SET value_json = :v WHERE key = "
                             f"'{protocol.STARTED_ATTR}'"),
                     {"v": json.dumps("2000-01-01T00:00:00")})
    state = before_start(sweep.storage, sweep.study_id, sweep.spec)
    assert state is not None and state.rule == "max_duration"
    assert state.reason.endswith("since the sweep started (max_duration 3600s)")
    # running the same spec again keeps the first launch time
    create_or_resume(sweep.storage, sweep.spec)
    attrs = sweep.storage.get_study_user_attrs(sweep.study_id)
    assert attrs[protocol.STARTED_ATTR] == "2000-01-01T00:00:00"


def test_the_first_rule_recorded_wins_and_ignore_turns_the_rules_off(sqlite_url: str) -> None:
    sweep = sweep_of(sqlite_url, value=0.5, patience=2)
    first = record_stop(sweep.storage, sweep.study_id, "value", "first")
    second = record_stop(sweep.storage, sweep.study_id, "patience", "second")
    assert second == first and first.stopped
    ignored = sweep.storage.ignore_stop(sweep.study_id)
    assert ignored is not None and ignored.state == "ignored" and ignored.rule == "value"
    assert before_start(sweep.storage, sweep.study_id, sweep.spec) is None
    assert after_trial(sweep.storage, sweep.study_id, sweep.spec) is None


def test_a_spec_without_rules_reads_nothing(sqlite_url: str) -> None:
    """No rule and the brake off (max_failed_trials 0). With the brake on (the default) a
    start reads the recorded stop: the test above."""
    spec = make_spec(method="random", stop={"max_failed_trials": 0})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    sweep.storage.engine.dispose()
    # no query at all: a closed-off engine would fail any
    broken = type("NoDB", (), {"engine": None})()
    assert before_start(broken, sweep.study_id, sweep.spec) is None  # type: ignore[arg-type]
    assert after_trial(broken, sweep.study_id, sweep.spec) is None  # type: ignore[arg-type]


def test_a_pod_that_starts_after_the_stop_exits_0_without_a_trial(pg_url: str,
                                                                  tmp_path: Path) -> None:
    """What a Kubernetes pod runs: `python -m trial_runner` with JOB_ID set."""
    sweep = sweep_of(pg_url, value=0.5)
    record_stop(sweep.storage, sweep.study_id, "value", "reached")
    before = len(sweep.study().get_trials())
    env = dict(os.environ, SWEEPER_STORAGE=pg_url, SWEEPER_STUDY=sweep.name, JOB_ID="4",
               PYTHONPATH=str(REPO), SWEEPER_CHECKPOINT_DIR=str(tmp_path / "c"))
    proc = subprocess.run([sys.executable, "-m", "trial_runner"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == protocol.EXIT_OK, proc.stderr
    assert "index 4 not started: the sweep is stopped" in proc.stderr
    trials = sweep.study().get_trials()
    assert len(trials) == before and all(t.state == TrialState.WAITING for t in trials)


def test_run_stops_starting_indexes_and_resume_needs_ignore_stop(sqlite_url: str,
                                                                 tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slow.py").write_text(
        "import time\ndef train(ctx):\n    time.sleep(0.2)\n"
        "    return 0.0 if ctx.index >= 2 else 1.0\n")
    path = write_spec(tmp_path, name="stopper", method="random", trials=30, parallelism=2,
                      stop={"value": 0.1}, trial={"entrypoint": "slow:train"})
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", sqlite_url])
    assert result.exit_code == 0, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("stopped: stop rule value fired at ")
    assert "indexes not finished (`sweeper resume stopper --ignore-stop` runs them)" in last
    sweep = load_sweep(open_storage(sqlite_url), "stopper")
    # The trial that fired finished, and so did every trial that had started; the other
    # indexes wait. (Which indexes ran before the stop is timing: an index handed to a worker
    # ahead, while its trial ran, is not started once the stop fired.)
    trials = sweep.study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert {t.state for t in trials} == {TrialState.COMPLETE, TrialState.WAITING}
    assert 0.0 in {t.value for t in done} and len(done) < 30

    status = CliRunner().invoke(cli, ["status", "stopper", "--storage", sqlite_url])
    assert status.stdout.splitlines()[1].startswith("stopped: stop rule value fired at ")
    record = json.loads(CliRunner().invoke(cli, ["status", "stopper", "--storage", sqlite_url,
                                                 "--format", "json"]).stdout)["stop"]
    assert record["state"] == "stopped" and record["rule"] == "value"

    before = len(sweep.study().get_trials())
    again = CliRunner().invoke(cli, ["resume", "stopper", "--storage", sqlite_url])
    assert again.exit_code == 0
    assert "sweep stopper is stopped: stop rule value fired" in again.stderr
    assert len(sweep.study().get_trials()) == before  # nothing started, nothing claimed
    assert not [t for t in sweep.study().get_trials() if t.state == TrialState.RUNNING]

    go_on = CliRunner().invoke(cli, ["resume", "stopper", "--storage", sqlite_url,
                                     "--ignore-stop"])
    assert go_on.exit_code == 0, go_on.output
    assert "ignoring the stop (stop rule value fired" in go_on.stderr
    done = [t for t in sweep.study().get_trials() if t.state == TrialState.COMPLETE]
    assert len(done) == 30
