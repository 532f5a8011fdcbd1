"""``trial.launcher: torchrun`` on CPUs (gloo), two ranks, through `sweeper run` (local
backend): the runner claims each index once and starts torchrun; both ranks get the same
params; rank 0 alone writes intermediate values and the result; ``ctx.should_prune()`` gives
both ranks the same answer at the same step; a rank that dies fails the attempt once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from click.testing import CliRunner, Result
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.backends.local.gpus import gpu_slots
from sweeper.cli import cli
from sweeper.study import driver_url, load_sweep, open_storage
from tests.support.ddp_runs import run_ddp, sqlite_url

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, name: str, xs: list[int], **fixed: Any) -> Result:
    return run_ddp(tmp_path, name, xs, {"nproc": 2}, **fixed)


def _url(tmp_path: Path) -> str:
    return sqlite_url(tmp_path)


def _seen(tmp_path: Path, index: int, attempt: int) -> list[dict[str, Any]]:
    return [json.loads((tmp_path / "markers" / f"rank-{index}-{attempt}-{r}.json").read_text())
            for r in (0, 1)]


def test_two_ranks_one_trial_same_params_same_prune_decision(tmp_path: Path) -> None:
    result = _run(tmp_path, "ddp", [0, 1])
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="ddp", storage=driver_url(_url(tmp_path)))
    first, second = sorted(study.trials, key=lambda t: t.user_attrs[protocol.INDEX_ATTR])
    assert len(study.trials) == 2  # one trial per index, claimed once by the runner
    assert first.state == TrialState.COMPLETE and second.state == TrialState.PRUNED

    for index, trial in ((0, first), (1, second)):
        ranks = _seen(tmp_path, index, 0)
        assert [r["rank"] for r in ranks] == [0, 1]
        assert all(r["world_size"] == 2 and r["device"] == "cpu" for r in ranks)
        assert ranks[0]["params"] == ranks[1]["params"] == {"x": index, "steps": 3}
        assert ranks[0]["decisions"] == ranks[1]["decisions"]  # broadcast from rank 0
        assert trial.params == {"x": index}
    assert _seen(tmp_path, 0, 0)[0]["decisions"] == [False, False, False]
    assert _seen(tmp_path, 1, 0)[0]["decisions"] == [True]  # 13 > the median 3 at step 0

    # One set of intermediate values and history (rank 0's), rank 0's return value.
    assert first.intermediate_values == {0: 3.0, 1: 2.0, 2: 1.0}
    assert [s for s, _ in first.user_attrs[protocol.HISTORY_ATTR]["loss"]] == [0, 1, 2]
    assert first.value == 1.0 and first.user_attrs["sum_of_ranks"] == 1.0  # 0 + 1
    assert second.intermediate_values == {0: 13.0}


def test_a_rank_that_dies_fails_the_attempt_once(tmp_path: Path) -> None:
    result = _run(tmp_path, "ddp-kill", [0], kill_rank=1)
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="ddp-kill", storage=driver_url(_url(tmp_path)))
    failed, retry = study.trials
    assert [t.state for t in study.trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert failed.user_attrs[protocol.FAIL_REASON_ATTR] == (
        "objective raised RuntimeError: torchrun exited with code 1: rank 1 failed (exit code "
        "-9, SIGKILL)")
    assert retry.user_attrs[protocol.ATTEMPT_ATTR] == 1 and retry.value == 1.0


def test_fractional_gpus_pack_workers_onto_a_gpu() -> None:
    assert gpu_slots(["0", "1"], per_trial=0.5, parallelism=4) == ["0", "0", "1", "1"]
    assert gpu_slots(["0"], per_trial=0.25, parallelism=4) == ["0", "0", "0", "0"]
    assert gpu_slots(["0", "1", "2", "3"], per_trial=4, parallelism=1) == ["0,1,2,3"]


def test_a_command_under_torchrun_reports_rank_0s_metrics(tmp_path: Path) -> None:
    # Every rank writes $SWEEPER_METRICS_FILE, rank 1 last: only rank 0's is read.
    script = ("import json, os, time; r = int(os.environ['RANK']); "
              "print('step=0 loss=%d' % (10 + r), flush=True); print('loss=%d' % (1 + r + {x})); "
              "time.sleep(0.5 * r); "
              "open(os.environ['SWEEPER_METRICS_FILE'], 'w').write(json.dumps({{'rank': r}}))")
    spec = {"name": "ddp-cmd", "method": "grid", "parallelism": 1,
            "objective": {"metric": "loss", "direction": "minimize"},
            "trial": {"command": ["python", "-c", script], "launcher": "torchrun", "nproc": 2,
                      "retries": 0},
            "parameters": {"x": {"type": "int", "values": [5]}}}
    path = tmp_path / "ddp-cmd.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    (tmp_path / "tmp").mkdir()
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", _url(tmp_path),
                                      "--log-dir", str(tmp_path / "logs")],
                                env={"TMPDIR": str(tmp_path / "tmp")}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (trial,) = optuna.load_study(study_name="ddp-cmd", storage=driver_url(_url(tmp_path))).trials
    assert trial.value == 6.0 and trial.intermediate_values == {0: 10.0}  # rank 0's lines
    assert trial.user_attrs["rank"] == 0
    assert not list((tmp_path / "tmp").glob("sweeper-trial-*"))  # the trial's files are removed


def test_the_digits_example_trains_with_ddp(tmp_path: Path) -> None:
    spec = yaml.safe_load((REPO / "search_spaces" / "digits_ddp.yaml").read_text())
    spec["trials"] = 1
    path = tmp_path / "digits-ddp.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", _url(tmp_path),
                                      "--log-dir", str(tmp_path / "logs")],
                                env={"SWEEPER_CHECKPOINT_DIR": str(tmp_path / "ckpt")},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (trial,) = optuna.load_study(study_name="digits-ddp",
                                 storage=driver_url(_url(tmp_path))).trials
    assert trial.state == TrialState.COMPLETE and trial.value > 0.8
    assert sorted(trial.intermediate_values) == [0, 1, 2, 3]
    assert trial.user_attrs[protocol.DEVICE_ATTR] == "cpu"
    assert trial.user_attrs["train_samples_per_s"] > 0  # the returned throughput, all ranks
    # rank 0 alone saved the model and the checkpoints
    assert len([a for a in trial.system_attrs if a.startswith("artifacts:")]) == 1
    key = load_sweep(open_storage(_url(tmp_path)), "digits-ddp").state_key
    assert (tmp_path / "ckpt" / key / "index-0" / "checkpoint.pt").is_file()
