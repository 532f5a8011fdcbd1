"""Promotion ASHA on the index protocol (``scheduler: {type: asha, mode: promotion}``), on
both storages: pauses, promotions from the checkpoint, the end of the sweep, and a promoter
killed after its claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.study import create_or_resume, open_storage
from sweeper.study.record import Sweep
from tests.support.asha_objectives import curve
from tests.support.helpers import make_spec
from trial_runner.promotion import promote, run_scheduled
from trial_runner.runner import RunnerSettings, run_index

REPO = Path(__file__).resolve().parents[2]
SCHEDULER = {"type": "asha", "mode": "promotion", "min_resource": 1, "max_resource": 9,
             "reduction_factor": 3}


def _spec(**kw: Any) -> Any:
    return make_spec(name="asha", scheduler=SCHEDULER,
                     trial={"entrypoint": "tests.support.asha_objectives:curve",
                            "fixed": {"steps": 9}},
                     parameters={"a": {"type": "int", "low": 0, "high": 8}}, **kw)


def settings(tmp_path: Path, grace: float = 30.0) -> RunnerSettings:
    return RunnerSettings(heartbeat_interval_s=0.2, grace_period_s=grace,
                          checkpoint_root=tmp_path / "ckpt")


def _log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "asha.log"
    monkeypatch.setenv("ASHA_LOG", str(log))
    return log


def _resumes(log: Path) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (line.split() for line in log.read_text().splitlines())]


def test_a_sweep_pauses_promotes_from_the_checkpoint_and_ends(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(tmp_path, monkeypatch)
    sweep, _ = create_or_resume(open_storage(storage_url), _spec())
    outs = [run_scheduled(sweep, i, curve, settings(tmp_path)) for i in range(9)]
    assert all(o.exit_code == protocol.EXIT_OK for o in outs)
    assert [o.state for o in outs] == ["PAUSED"] * 9  # every index's own trial paused at rung 0
    trials = {int(t.params["a"]): t for t in sweep.study().trials}
    assert len(trials) == 9  # promotions ran on the same trials: no new ones
    # 9 at rung 0 -> the top 3 (a = 0, 1, 2) went to rung 1 -> its top 1 (a = 0) completed.
    assert trials[0].state == TrialState.COMPLETE and trials[0].value == pytest.approx(0.1)
    assert sorted(trials[0].intermediate_values) == list(range(10))
    assert {a: t.state for a, t in trials.items() if a} == {a: TrialState.PRUNED
                                                            for a in range(1, 9)}
    assert {a: t.user_attrs[protocol.RUNG_ATTR] for a, t in trials.items()} == \
        {0: 1, 1: 1, 2: 1, **{a: 0 for a in range(3, 9)}}
    for a in (1, 2):  # paused at rung 1 (step 3) and never promoted again: values up to 3
        assert sorted(trials[a].intermediate_values) == [0, 1, 2, 3]
    # The history keeps every step of every run of the trial.
    assert [p[0] for p in trials[0].user_attrs["sweeper:history"]["loss"]] == list(range(10))
    # Every promotion resumed at the step of its rung: trial of a=0 at 1 then 3, a=1, 2 at 1.
    resumed = [(trials_by_number(trials)[n], step) for n, step in _resumes(log) if step >= 0]
    assert sorted(resumed) == [(0, 1), (0, 3), (1, 1), (2, 1)]


def test_a_promoted_trial_runs_with_its_own_job_id_and_the_runner_gets_its_own_back(
        sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod's runner (trial_runner.main: JOB_ID set to its index, the header hook): while a
    promoted trial of another index runs, JOB_ID is the trial's index; after it, the runner's."""
    from trial_runner.main import PodLogParts  # the hooks of a pod's runner

    parts = PodLogParts()

    seen: list[tuple[int, str]] = []

    def objective(ctx: Any) -> float:
        seen.append((ctx.index, os.environ[protocol.ENV_JOB_ID]))
        return curve(ctx)

    sweep, _ = create_or_resume(open_storage(sqlite_url), _spec())
    for i in range(9):
        monkeypatch.setenv(protocol.ENV_JOB_ID, str(i))
        out = run_scheduled(sweep, i, objective, settings(tmp_path), trial_hook=parts.started,
                            log=parts.ended)
        assert out.exit_code == protocol.EXIT_OK
        assert os.environ[protocol.ENV_JOB_ID] == str(i)
    assert len(seen) == 9 + 4  # every index's first run, and four promotions (see above)
    assert all(job_id == str(index) for index, job_id in seen), seen


def trials_by_number(trials: dict[int, Any]) -> dict[int, int]:
    return {t.number: a for a, t in trials.items()}


def test_no_promotable_trial_ends_the_sweep_with_paused_trials_pruned(
        sqlite_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url), _spec(trials=2))
    outs = [run_scheduled(sweep, i, curve, settings(tmp_path)) for i in range(2)]
    assert [o.exit_code for o in outs] == [0, 0]
    # Two trials at rung 0: floor(2 / 3) = 0 promotable; the second runner ends the sweep.
    trials = sweep.study().trials
    assert [t.state for t in trials] == [TrialState.PRUNED] * 2
    assert [t.user_attrs[protocol.RUNG_ATTR] for t in trials] == [0, 0]
    assert [t.last_step for t in trials] == [1, 1]


def test_the_end_waits_for_indexes_not_started(sqlite_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(sqlite_url), _spec())
    run_scheduled(sweep, 0, curve, settings(tmp_path))
    (t,) = [t for t in sweep.study().trials if t.state != TrialState.WAITING
            or t.user_attrs.get(protocol.PAUSED_ATTR)]
    assert t.state == TrialState.WAITING and t.user_attrs[protocol.PAUSED_ATTR] is True


def test_an_index_whose_trial_is_paused_puts_it_back(storage_url: str, tmp_path: Path) -> None:
    sweep, _ = create_or_resume(open_storage(storage_url), _spec())
    first = run_index(sweep, 0, curve, settings(tmp_path))
    again = run_index(sweep, 0, curve, settings(tmp_path))  # the index's runner, relaunched
    assert (first.state, again.state) == ("PAUSED", "PAUSED")
    t = sweep.study().trials[0]
    assert t.state == TrialState.WAITING and t.user_attrs[protocol.PAUSED_ATTR] is True
    assert sorted(t.intermediate_values) == [0, 1]  # the relaunch ran nothing


def _runner(env: dict[str, str], index: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trial_runner", "--index", str(index)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_promotion_is_claimed_again_after_its_promoter_is_killed(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(tmp_path, monkeypatch)
    sweep, _ = create_or_resume(open_storage(storage_url), _spec())
    for i in range(3):  # three trials paused at rung 0; the best (a = 0) is promotable
        assert run_index(sweep, i, curve, settings(tmp_path)).state == "PAUSED"
    env = {**os.environ, "SWEEPER_STORAGE": storage_url, "SWEEPER_STUDY": "asha",
           protocol.ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt"),
           protocol.ENV_HEARTBEAT_INTERVAL: "0.2", "ASHA_KILL": str(tmp_path / "killed")}
    killed = _runner(env, 2)  # its index is paused: it promotes trial 0 and dies in it
    assert killed.returncode == -9, killed.stderr[-2000:]
    t0 = sweep.study().trials[0]
    assert t0.state == TrialState.RUNNING and sorted(t0.intermediate_values) == [0, 1, 2]
    _until_stale(sweep, t0.number, grace=1.0)
    # Index 0's own runner, relaunched, finds its trial's promoter dead: it puts the trial
    # back (paused at its rung, not FAIL: no new attempt) and leaves it to the promotions.
    own = run_index(sweep, 0, curve, settings(tmp_path, grace=1.0))
    assert (own.exit_code, own.state) == (protocol.EXIT_OK, protocol.PAUSED)
    t0 = sweep.study().trials[0]
    assert t0.state == TrialState.WAITING and t0.user_attrs[protocol.PAUSED_ATTR] is True
    assert promote(sweep, curve, settings(tmp_path, grace=1.0)) is None
    t0 = sweep.study().trials[0]
    # Back to WAITING, claimed again, resumed from the step the killed run saved (2), paused
    # at rung 1 (step 3): each step reported once, and one trial for the index still.
    assert t0.state == TrialState.WAITING and t0.user_attrs[protocol.RUNG_ATTR] == 1
    assert sorted(t0.intermediate_values) == [0, 1, 2, 3]
    assert [p[0] for p in t0.user_attrs["sweeper:history"]["loss"]] == [0, 1, 2, 3]
    assert [(n, s) for n, s in _resumes(log) if n == 0] == [(0, -1), (0, 1), (0, 2)]
    trials = sweep.study().trials  # the 9 planned trials, no new attempt, none failed
    assert len(trials) == 9 and TrialState.FAIL not in {t.state for t in trials}


def _until_stale(sweep: Sweep, number: int, grace: float) -> None:
    import time

    while True:  # a wait, not a timed assertion: the heartbeat of a dead process only ages
        (t,) = [t for t in sweep.storage.rung_trials(sweep.study_id, []) if t.number == number]
        if (t.heartbeat_age_s or 0.0) > grace:
            return
        time.sleep(0.2)


def test_an_interrupted_promotion_is_paused_again_not_failed(
        sqlite_url: str, tmp_path: Path) -> None:
    import signal

    from trial_runner.outcome import Interrupted

    sweep, _ = create_or_resume(open_storage(sqlite_url), _spec())
    for i in range(3):
        assert run_index(sweep, i, curve, settings(tmp_path)).state == "PAUSED"

    def evicted(ctx: Any) -> float:  # SIGTERM arrives in the promoted run, after a report
        if ctx.load_checkpoint() is not None:
            ctx.report(2, loss=0.4)
            raise Interrupted(signal.SIGTERM)
        return curve(ctx)

    with pytest.raises(Interrupted):
        promote(sweep, evicted, settings(tmp_path))
    t0 = sweep.study().trials[0]  # paused at its rung again, its report kept, no FAIL
    assert t0.state == TrialState.WAITING and t0.user_attrs[protocol.PAUSED_ATTR] is True
    assert t0.user_attrs[protocol.RUNG_ATTR] == 0 and sorted(t0.intermediate_values) == [0, 1, 2]
    assert promote(sweep, curve, settings(tmp_path)) is None  # the next promoter resumes it
    t0 = sweep.study().trials[0]
    assert t0.state == TrialState.WAITING and t0.user_attrs[protocol.RUNG_ATTR] == 1


# --------------------------------------------------------------------------- a stop rule fired

STOP = {"value": 0.5}


def _reaches_the_stop_value(ctx: Any) -> float:
    """A trial whose code reports nothing and returns a loss below ``stop.value``: it completes,
    and the stop rule fires when it does."""
    return 0.05


def _by_a(sweep: Sweep) -> dict[int, Any]:
    return {int(t.params["a"]): t for t in sweep.study().trials if "a" in t.params}


def _stop_fires_with_a_promotable_paused_trial(sweep: Sweep, tmp_path: Path) -> None:
    for i in range(3):  # three trials paused at rung 0; the best (a = 0) is promotable
        assert run_index(sweep, i, curve, settings(tmp_path)).state == protocol.PAUSED
    done = run_index(sweep, 4, _reaches_the_stop_value, settings(tmp_path))
    assert done.state == "COMPLETE"
    state = sweep.storage.stop_state(sweep.study_id)
    assert state is not None and state.stopped and state.rule == "value"


def test_nothing_is_promoted_once_a_stop_rule_fired_and_the_last_runner_ends_the_sweep(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trial_runner.outcome import Claimed
    from trial_runner.runner import run_claimed

    log = _log(tmp_path, monkeypatch)
    sweep, _ = create_or_resume(open_storage(storage_url), _spec(stop=STOP))
    # Another runner holds index 3's trial (claimed, not finished) when the stop fires.
    held = sweep.storage.attempts(sweep.study_id, 3)[-1].trial_id
    assert sweep.storage.claim(held)
    _stop_fires_with_a_promotable_paused_trial(sweep, tmp_path)
    assert promote(sweep, curve, settings(tmp_path)) is None
    t0 = _by_a(sweep)[0]  # promotable, not promoted: still paused at rung 0, nothing reported
    assert t0.state == TrialState.WAITING and t0.user_attrs[protocol.PAUSED_ATTR] is True
    assert t0.user_attrs[protocol.RUNG_ATTR] == 0 and sorted(t0.intermediate_values) == [0, 1]
    assert [step for _, step in _resumes(log)] == [-1, -1, -1]  # no run resumed a checkpoint
    # The runner of index 3 goes on: its trial pauses at rung 0, and it looks (as
    # run_scheduled does after its index): nothing runs, so the stopped sweep is over.
    out = run_claimed(sweep, 3, Claimed(held, 0), curve, settings(tmp_path))
    assert out.state == protocol.PAUSED
    assert promote(sweep, curve, settings(tmp_path)) is None
    trials = _by_a(sweep)
    for a in range(4):  # every paused trial ends PRUNED at its rung, with its values
        assert trials[a].state == TrialState.PRUNED
        assert trials[a].user_attrs[protocol.RUNG_ATTR] == 0
        assert sorted(trials[a].intermediate_values) == [0, 1]
    assert trials[4].state == TrialState.COMPLETE
    # The indexes the stop kept from starting stay as planned (not run, not pruned).
    waiting = [t for t in sweep.study().trials if t.state == TrialState.WAITING]
    assert sorted(t.user_attrs[protocol.INDEX_ATTR] for t in waiting) == [5, 6, 7, 8]
    assert not any(protocol.PAUSED_ATTR in t.user_attrs for t in waiting)
    assert [step for _, step in _resumes(log)] == [-1] * 4


def test_a_runner_the_stop_kept_from_starting_ends_the_stopped_sweep(
        storage_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop fired in a runner that does not promote (here run_index alone): the paused
    trials wait until a runner looks; the next one, stopped before its index, does."""
    log = _log(tmp_path, monkeypatch)
    sweep, _ = create_or_resume(open_storage(storage_url), _spec(stop=STOP))
    _stop_fires_with_a_promotable_paused_trial(sweep, tmp_path)
    assert _by_a(sweep)[0].state == TrialState.WAITING
    out = run_scheduled(sweep, 5, curve, settings(tmp_path))
    assert (out.exit_code, out.state) == (protocol.EXIT_OK, protocol.STOPPED)
    trials = _by_a(sweep)
    assert [trials[a].state for a in range(3)] == [TrialState.PRUNED] * 3
    assert [sorted(trials[a].intermediate_values) for a in range(3)] == [[0, 1]] * 3
    (five,) = [t for t in sweep.study().trials if t.user_attrs[protocol.INDEX_ATTR] == 5]
    assert five.state == TrialState.WAITING and not five.intermediate_values  # not started
    assert [step for _, step in _resumes(log)] == [-1, -1, -1]
