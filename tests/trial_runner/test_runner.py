"""The runner side of the index protocol, in process, on both storages."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper._optuna_compat import trial_id_of
from sweeper.space import grid_point
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import contains, make_spec
from trial_runner.ahead import Ahead
from trial_runner.context import TrialContext
from trial_runner.runner import Interrupted, RunnerSettings, release_taken_ahead, run_index

REPO = Path(__file__).resolve().parents[2]


def settings(tmp_path: Path, **kw: Any) -> RunnerSettings:
    return RunnerSettings(heartbeat_interval_s=kw.get("hb", 0.2),
                          grace_period_s=kw.get("grace", 2.0),
                          checkpoint_root=tmp_path / "ckpt")


def ok(ctx: TrialContext) -> dict[str, float]:
    for step in range(3):
        ctx.report(step, loss=float(ctx.params["a"]) + 3 - step, acc=0.5)
    return {"loss": float(ctx.params["a"]), "extra": 7.0}


def test_index_runs_to_one_complete_trial_with_metrics(storage_url: str, tmp_path: Path) -> None:
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())
    out = run_index(sweep, 5, ok, settings(tmp_path))
    assert (out.exit_code, out.state) == (protocol.EXIT_OK, "COMPLETE")
    t = sweep.study().trials[out.trial_number]
    assert t.state == TrialState.COMPLETE
    assert t.params == grid_point(sweep.spec, 5)
    assert t.value == grid_point(sweep.spec, 5)["a"]
    assert t.intermediate_values == {0: t.value + 3, 1: t.value + 2, 2: t.value + 1}
    assert t.user_attrs["acc"] == 0.5 and t.user_attrs["extra"] == 7.0
    assert t.user_attrs["sweeper:history"]["loss"][0] == [0, t.value + 3]
    # a second runner for the same index has nothing to do
    again = run_index(sweep, 5, ok, settings(tmp_path))
    assert (again.exit_code, again.state) == (protocol.EXIT_OK, "ALREADY_DONE")
    assert len(sweep.study().trials) == 10


@pytest.mark.parametrize(("result", "reason"), [
    (float("nan"), "not finite"),
    (None, "returned None"),
    ("0.5", "must be a number"),
    ({"acc": 1.0}, "lack the objective metric 'loss'"),
])
def test_unusable_results_fail_without_retry(sqlite_url: str, tmp_path: Path, result: Any,
                                             reason: str) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url), make_spec())
    out = run_index(sweep, 0, lambda ctx: result, settings(tmp_path))
    assert (out.exit_code, out.state) == (protocol.EXIT_NO_RETRY, "FAIL")
    t = sweep.study().trials[out.trial_number]
    assert t.state == TrialState.FAIL
    assert reason in t.user_attrs["sweeper:fail_reason"]


def test_raising_objective_fails_retryably_and_retry_keeps_params(storage_url: str,
                                                                  tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(storage_url), make_spec(method="random"))

    def boom(ctx: TrialContext) -> float:
        raise RuntimeError("CUDA out of memory (simulated)")

    first = run_index(sweep, 2, boom, settings(tmp_path))
    assert (first.exit_code, first.state) == (protocol.EXIT_RETRY, "FAIL")
    failed = sweep.study().trials[first.trial_number]
    assert "RuntimeError: CUDA out of memory" in failed.user_attrs["sweeper:fail_reason"]
    second = run_index(sweep, 2, ok, settings(tmp_path))
    assert second.state == "COMPLETE"
    retry = sweep.study().trials[second.trial_number]
    assert retry.params == failed.params
    assert retry.user_attrs["sweeper:retry_of"] == failed.number
    assert retry.user_attrs["sweeper:attempt"] == 1
    assert retry.user_attrs["sweeper:index"] == 2


def test_pruned_trial(sqlite_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url), make_spec())

    def prune(ctx: TrialContext) -> float:
        ctx.report(0, loss=1.0)
        raise optuna.TrialPruned()

    out = run_index(sweep, 1, prune, settings(tmp_path))
    assert (out.exit_code, out.state) == (protocol.EXIT_OK, "PRUNED")
    assert run_index(sweep, 1, ok, settings(tmp_path)).state == "ALREADY_DONE"


def test_stale_running_attempt_is_failed_and_retried(storage_url: str, tmp_path: Path) -> None:
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())

    dead = storage.attempts(sweep.study_id, 3)[0]
    assert storage.claim(dead.trial_id)  # a runner claimed it, then vanished
    out = run_index(sweep, 3, ok, settings(tmp_path, grace=0.5))
    assert out.state == "COMPLETE"
    atts = storage.attempts(sweep.study_id, 3)
    assert [a.state for a in atts] == [TrialState.FAIL, TrialState.COMPLETE]
    assert "heartbeat" in storage.get_trial(dead.trial_id).user_attrs["sweeper:fail_reason"]


def test_adaptive_index_asks_tpe_and_params_lie_in_the_space(storage_url: str,
                                                             tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(storage_url), make_spec(method="tpe", trials=4))
    for i in range(4):
        assert run_index(sweep, i, lambda ctx: float(ctx.params["a"]), settings(tmp_path)
                         ).state == "COMPLETE"
    trials = sweep.study().trials
    assert sorted(t.user_attrs["sweeper:index"] for t in trials) == [0, 1, 2, 3]
    assert all(contains(sweep.spec, t.params) for t in trials)
    # per-index seeds: parallel runners do not propose the same start point
    assert len({t.params["a"] for t in trials}) == 4


def test_index_outside_the_sweep_is_a_config_error(sqlite_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url), make_spec())
    assert run_index(sweep, 99, ok, settings(tmp_path)).exit_code == protocol.EXIT_CONFIG


def test_retry_resumes_from_the_saved_checkpoint(sqlite_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url), make_spec())
    seen: list[int] = []

    def train(ctx: TrialContext) -> float:
        start = 0
        state = ctx.load_checkpoint()
        if state is not None:
            start = state[1] + 1
        seen.append(start)
        for epoch in range(start, 6):
            ctx.report(epoch, loss=1.0 / (epoch + 1))
            ctx.save_checkpoint({"epoch": epoch}, step=epoch)
            if epoch == 3 and ctx.attempt == 0:
                raise RuntimeError("killed at epoch 3")
        return 0.1

    assert run_index(sweep, 0, train, settings(tmp_path)).state == "FAIL"
    out = run_index(sweep, 0, train, settings(tmp_path))
    assert out.state == "COMPLETE"
    assert seen == [0, 4]
    assert sweep.study().trials[out.trial_number].user_attrs["sweeper:resumed_from_step"] == 3


def _runner(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trial_runner", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_python_m_trial_runner_reads_job_id(pg_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(pg_url), make_spec())
    env = dict(os.environ, SWEEPER_STORAGE=pg_url, SWEEPER_STUDY=sweep.name,
               JOB_COMPLETION_INDEX="4", SWEEPER_CHECKPOINT_DIR=str(tmp_path))
    env.pop("JOB_ID", None)
    proc = _runner(env)
    assert proc.returncode == protocol.EXIT_OK, proc.stderr
    (t,) = [t for t in sweep.study().trials if t.state == TrialState.COMPLETE]
    assert t.user_attrs["sweeper:index"] == 4
    assert "sweeper-test-pw" not in proc.stdout + proc.stderr
    # config errors say so in the exit code
    bad = _runner(dict(env, SWEEPER_STUDY="no-such-sweep"))
    assert bad.returncode == protocol.EXIT_CONFIG
    assert "no sweep named 'no-such-sweep'" in bad.stderr
    assert _runner(dict(env, JOB_COMPLETION_INDEX="10")).returncode == protocol.EXIT_CONFIG


def test_timeout_fails_the_trial_and_exits_no_retry(sqlite_url: str, tmp_path: Path) -> None:
    spec = make_spec(trial={"entrypoint": "trial_runner.examples.synthetic:quadratic",
                            "fixed": {"epochs": 50, "delay": 0.2}, "timeout": "1s"})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    env = dict(os.environ, SWEEPER_STORAGE=sqlite_url, SWEEPER_STUDY=sweep.name, JOB_ID="0",
               SWEEPER_CHECKPOINT_DIR=str(tmp_path))
    proc = _runner(env)
    assert proc.returncode == protocol.EXIT_NO_RETRY, proc.stderr
    (t,) = [t for t in sweep.study().trials if t.state == TrialState.FAIL]
    assert "timed out after 1s" in t.user_attrs["sweeper:fail_reason"]


def test_mark_failed_is_idempotent(sqlite_url: str) -> None:
    storage = open_storage(sqlite_url)
    sweep, _ = create_or_resume(storage, make_spec())
    a = storage.attempts(sweep.study_id, 0)[0]

    assert storage.claim(a.trial_id)
    assert storage.mark_failed(a.trial_id, "x")
    assert not storage.mark_failed(a.trial_id, "y")


def test_work_on_a_trial_the_watcher_failed_does_not_count(storage_url: str,
                                                           tmp_path: Path) -> None:
    """A runner that stalled past the grace period finds its trial FAIL when it finishes: it
    must not report the index done (the pod would exit 0 and the index stay unfinished)."""
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())

    def stalled(ctx: TrialContext) -> float:
        storage.mark_failed(trial_id_of(ctx.trial), "heartbeat 40s old: the runner died or froze")
        return 1.0

    out = run_index(sweep, 6, stalled, settings(tmp_path))
    assert (out.state, out.exit_code) == ("FAIL", protocol.EXIT_RETRY)
    assert run_index(sweep, 6, ok, settings(tmp_path)).state == "COMPLETE"
    atts = storage.attempts(sweep.study_id, 6)
    assert [a.state for a in atts] == [TrialState.FAIL, TrialState.COMPLETE]


def test_a_signal_during_set_up_fails_the_trial_resumably(sqlite_url: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM may land between the claim and the objective (attaching the trial, starting
    the heartbeat): the trial must still say it was interrupted and can be resumed."""
    import signal

    from trial_runner import runner

    def interrupted(*_: Any) -> int:
        raise runner.Interrupted(signal.SIGTERM)

    storage = open_storage(sqlite_url)
    sweep, _ = create_or_resume(storage, make_spec())
    monkeypatch.setattr(runner, "open_trial", interrupted)
    with pytest.raises(runner.Interrupted):
        run_index(sweep, 0, ok, settings(tmp_path))
    (t,) = sweep.study().get_trials(states=(TrialState.FAIL,))
    assert t.user_attrs["sweeper:fail_reason"] == "interrupted by SIGTERM; resumable"


def test_a_planned_trial_is_two_statements_with_its_provenance_and_params(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: the claim stamps the provenance and reads the trial (whose params the
    enqueue stored), the report goes with the finish, so a trial that reports once is two
    statements (take, the finish with the report) and nothing is written before its objective
    starts. SQLite (no claim in the first look): the provenance is written before the
    objective, the params are not (the enqueue stored them)."""
    import sqlalchemy as sa

    from sweeper.protocol import CODE_VERSION_ATTR, SPEC_HASH_ATTR

    monkeypatch.setenv("SWEEPER_CODE_VERSION", "build-4")
    storage = open_storage(storage_url)
    sweep, _ = create_or_resume(storage, make_spec())
    seen: list[str] = []
    sa.event.listen(storage.engine, "before_cursor_execute",
                    lambda conn, cursor, sql, *_: seen.append(" ".join(sql.split())))

    def once(ctx: TrialContext) -> float:
        before_objective.extend(seen)
        ctx.report(0, loss=1.0)
        return float(ctx.params["a"])

    before_objective: list[str] = []
    assert run_index(sweep, 1, once, settings(tmp_path)).state == "COMPLETE"  # loads the study
    seen.clear()
    before_objective.clear()
    out = run_index(sweep, 2, once, settings(tmp_path))
    assert out.state == "COMPLETE"
    writes = [s for s in before_objective if "INSERT" in s or "UPDATE" in s]
    if storage.engine.dialect.name == "postgresql":
        assert len(seen) == 2, "\n".join(s[:120] for s in seen)
        assert len(writes) == 1 and "UPDATE trials SET state = 'RUNNING'" in writes[0]
        assert "INSERT INTO trial_intermediate_values" in seen[-1]
        assert "UPDATE trials SET state='COMPLETE'" in seen[-1]
    else:
        assert not any("trial_params" in s for s in writes), writes
        assert any("trial_user_attributes" in s for s in writes), writes
    [a] = storage.attempts(sweep.study_id, 2)
    t = storage.get_trial(a.trial_id)
    assert t.params == grid_point(sweep.spec, 2) and t.value == float(t.params["a"])
    assert t.user_attrs[SPEC_HASH_ATTR] == sweep.spec.spec_hash
    assert t.user_attrs[CODE_VERSION_ATTR] == "build-4"
    assert t.intermediate_values == {0: 1.0}


def _once(ctx: TrialContext) -> float:
    ctx.report(0, loss=1.0)
    return float(ctx.params["a"])


def test_a_worker_takes_its_next_index_with_the_finish_before_it(
        pg_url: str, tmp_path: Path) -> None:
    """PostgreSQL, a local worker that holds its next index (trial_runner.ahead): the statement
    that finishes trial k also claims index k+1, so a trial costs one statement, and k+1 runs
    as if it had taken its index itself: one attempt, stamped, one segment, COMPLETE."""
    import sqlalchemy as sa

    from sweeper.accounting import Ending, trial_usages
    from sweeper.protocol import SPEC_HASH_ATTR

    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec())
    upcoming: list[int | None] = [2, 3, None]
    ahead = Ahead(lambda: upcoming[0])
    run_settings = replace(settings(tmp_path), ahead=ahead)
    seen: list[str] = []
    sa.event.listen(storage.engine, "before_cursor_execute",
                    lambda conn, cursor, sql, *_: seen.append(" ".join(sql.split())))
    assert run_index(sweep, 1, _once, run_settings).state == "COMPLETE"
    [a2] = storage.attempts(sweep.study_id, 2)
    assert a2.state == TrialState.RUNNING  # claimed by the finish of index 1
    upcoming.pop(0)
    seen.clear()
    assert run_index(sweep, 2, _once, run_settings).state == "COMPLETE"
    assert len(seen) == 1, "\n".join(s[:120] for s in seen)  # its finish, which took index 3
    assert "UPDATE trials SET state='COMPLETE'" in seen[0]
    assert "UPDATE trials SET state = 'RUNNING'" in seen[0]
    upcoming.pop(0)
    seen.clear()
    assert run_index(sweep, 3, _once, run_settings).state == "COMPLETE"
    assert len(seen) == 1 and "SET state = 'RUNNING'" not in seen[0]  # nothing next: alone
    for index in (2, 3):
        [a] = storage.attempts(sweep.study_id, index)
        t = storage.get_trial(a.trial_id)
        assert t.state == TrialState.COMPLETE and t.params == grid_point(sweep.spec, index)
        assert t.user_attrs[SPEC_HASH_ATTR] == sweep.spec.spec_hash
        assert t.intermediate_values == {0: 1.0}
        assert [u.ending for u in trial_usages(t.user_attrs)] == [Ending.COMPLETE]
    assert [a.state for a in storage.attempts(sweep.study_id, 4)] == [TrialState.WAITING]


@pytest.mark.parametrize("extra", [{"stop": {"value": -100.0}}, {"budget": {"steps": 1000}}],
                         ids=["stop-rule", "budget"])
def test_nothing_is_taken_ahead_where_the_end_of_a_trial_must_be_seen_first(
        pg_url: str, tmp_path: Path, extra: dict[str, Any]) -> None:
    """A stop rule or a budget is evaluated after each trial, before the next index is
    claimed: there the next index is not taken ahead."""
    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec(**extra))
    run_settings = replace(settings(tmp_path), ahead=Ahead(lambda: 2))
    assert run_index(sweep, 1, _once, run_settings).state == "COMPLETE"
    assert [a.state for a in storage.attempts(sweep.study_id, 2)] == [TrialState.WAITING]


def test_a_worker_stopped_before_its_next_index_fails_the_trial_it_took_ahead(
        pg_url: str, tmp_path: Path) -> None:
    """A signal between the finish that took the next index and that index's run: the trial
    claimed ahead is FAIL, resumable, as an attempt stopped while it ran is, not RUNNING until
    its heartbeat goes stale; the index's next attempt runs it."""
    import signal

    storage = open_storage(pg_url)
    sweep, _ = create_or_resume(storage, make_spec())
    run_settings = replace(settings(tmp_path), ahead=Ahead(lambda: 2))
    assert run_index(sweep, 1, _once, run_settings).state == "COMPLETE"
    release_taken_ahead(sweep, run_settings, Interrupted(signal.SIGTERM))
    [a] = storage.attempts(sweep.study_id, 2)
    assert a.state == TrialState.FAIL
    assert storage.get_trial(a.trial_id).user_attrs["sweeper:fail_reason"] == \
        "interrupted by SIGTERM; resumable"
    out = run_index(sweep, 2, _once, settings(tmp_path))
    assert out.state == "COMPLETE"
    assert [a.attempt for a in storage.attempts(sweep.study_id, 2)] == [0, 1]
    release_taken_ahead(sweep, run_settings, Interrupted(signal.SIGTERM))  # nothing held: no-op
    assert storage.get_trial(storage.attempts(sweep.study_id, 2)[1].trial_id).state == \
        TrialState.COMPLETE
