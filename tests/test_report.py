"""What the CLI prints, directly: tables, number cells, progress lines, best-trial selection,
trial records and dumps."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from sweeper import report
from sweeper.report import (
    Progress,
    Snapshot,
    best_trials,
    dumps,
    format_table,
    progress_line,
    top_trials,
    trial_record,
)
from sweeper.study import Sweep, create_or_resume, open_storage
from tests.support.helpers import make_spec
from trial_runner.runner import RunnerSettings, run_index

# --------------------------------------------------------------------------- tables


def test_format_table_aligns_columns_to_the_widest_cell() -> None:
    out = format_table(["trial", "loss", "optimizer"],
                       [[3, 0.5, "sgd"], [12, 0.25, "adam-with-warmup"], [7, None, "x"]])
    lines = out.splitlines()
    assert len(lines) == 5
    assert lines[1] == "-----  ----  ----------------"
    starts = [0, 7, 13]  # each column starts 2 spaces after the widest cell of the one before
    for line in (lines[0], lines[2], lines[3], lines[4]):
        cells = line.split()
        assert [line.index(c, s) for c, s in zip(cells, starts, strict=True)] == starts
    assert lines[4].split() == ["7", "-", "x"]  # None is shown as "-"
    assert all(line == line.rstrip() for line in lines)  # no trailing blanks


def test_format_table_header_wider_than_cells_and_no_rows() -> None:
    assert format_table(["index", "v"], [[1, "long value"]]).splitlines() == [
        "index  v", "-----  ----------", "1      long value"]
    assert format_table(["a", "bb"], []) == "a  bb\n-  --"


@pytest.mark.parametrize(("value", "text"), [
    (3.0, "3.0"),  # a float never looks like an int
    (-0.5, "-0.5"),
    (100.0, "100.0"),
    (0.1234567891, "0.123457"),  # 6 significant digits
    (1234567.0, "1.23457e+06"),
    (1e-7, "1e-07"),
    (float("nan"), "nan"),
    (float("inf"), "inf"),
    (float("-inf"), "-inf"),
    (7, "7"),  # ints and strings as they are
    ("adam", "adam"),
    (True, "True"),
])
def test_number_cells(value: Any, text: str) -> None:
    assert format_table(["v"], [[value]]).splitlines()[2] == text


# --------------------------------------------------------------------------- progress


def test_progress_line_counts_finished_as_complete_plus_pruned() -> None:
    s = Snapshot(total=10, counts={"COMPLETE": 3, "PRUNED": 2, "RUNNING": 1, "FAIL": 4},
                 best_value=0.1234567, best_number=7, elapsed_s=125.9)
    assert progress_line(s, "loss") == (
        "[" + "#" * 12 + "-" * 12 + "] 5/10 | complete 3 | pruned 2 | running 1 | failed 4 "
        "| best loss=0.123457 (#7) | 02:05")


def test_progress_line_edges() -> None:
    empty = progress_line(Snapshot(0, {}, None, None, 0.0), "acc", width=4)
    assert empty == "[####] 0/0 | complete 0 | pruned 0 | running 0 | failed 0 | 00:00"
    start = progress_line(Snapshot(8, {"WAITING": 8}, None, None, 3599.0), "acc", width=4)
    assert start.startswith("[----] 0/8 |") and start.endswith("| 59:59")
    assert "best" not in start


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def sweep(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Sweep:
    monkeypatch.setenv("SWEEPER_CODE_VERSION", "test")
    swp, _ = create_or_resume(open_storage(sqlite_url), make_spec(name="prog"))
    return swp


def _complete(sweep: Sweep, index: int, value: float, tmp_path: Path) -> int:
    settings = RunnerSettings(heartbeat_interval_s=5, grace_period_s=30,
                              checkpoint_root=tmp_path / "ckpt")
    out = run_index(sweep, index, lambda ctx: value, settings)
    assert out.state == "COMPLETE" and out.trial_number is not None
    return out.trial_number


def test_progress_in_logs_prints_on_change_at_most_once_a_second(
        sweep: Sweep, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(report, "time", clock)
    out = io.StringIO()
    p = Progress(sweep, out, log_interval_s=30)
    p.tick()
    p.tick()  # nothing changed: no second line
    assert out.getvalue().splitlines() == [
        "[" + "-" * 24 + "] 0/10 | complete 0 | pruned 0 | running 0 | failed 0 | 00:00"]
    _complete(sweep, 4, 0.75, tmp_path)
    second = _complete(sweep, 2, 0.5, tmp_path)
    clock.now += 0.5
    p.tick()  # changed, but within a second of the last line
    assert len(out.getvalue().splitlines()) == 1
    clock.now += 1.0
    p.tick()
    last = out.getvalue().splitlines()[-1]
    assert "2/10 | complete 2 |" in last and f"best loss=0.5 (#{second})" in last
    assert last.endswith("| 00:01")
    clock.now += 31
    p.tick()  # unchanged, but log_interval_s passed: a line with the new time
    assert out.getvalue().splitlines()[-1].endswith("| 00:32")
    third = _complete(sweep, 0, 0.25, tmp_path)
    clock.now += 0.1
    p.tick()  # rate-limited ...
    assert "best loss=0.25" not in out.getvalue()
    p.close()  # ... but close() shows the final state
    assert "3/10 | complete 3 |" in out.getvalue().splitlines()[-1]
    assert f"best loss=0.25 (#{third})" in out.getvalue().splitlines()[-1]
    n = len(out.getvalue().splitlines())
    p.close()
    assert len(out.getvalue().splitlines()) == n  # nothing new to show


def test_progress_on_a_terminal_rewrites_one_line(sweep: Sweep,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "time", _Clock())
    out = _Tty()
    p = Progress(sweep, out)
    p.tick()
    p.tick()
    text = out.getvalue()
    assert text.count("\r\x1b[2K[") == 2 and "\n" not in text
    p.close()
    assert out.getvalue().endswith("| 00:00\n")


def test_progress_never_raises(sweep: Sweep, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> dict[str, int]:
        raise RuntimeError("database went away")

    monkeypatch.setattr(type(sweep.storage), "state_counts", broken)
    out = io.StringIO()
    p = Progress(sweep, out)
    p.tick()
    p.close()
    assert out.getvalue() == ""


# --------------------------------------------------------------------------- best trials

_X = {"x": FloatDistribution(0, 10)}


def _study(directions: list[str], results: list[Any]) -> optuna.Study:
    """One trial per result: a value (or list of values), or a TrialState without values."""
    study = optuna.create_study(directions=directions)
    for i, r in enumerate(results):
        if isinstance(r, TrialState):
            study.add_trial(create_trial(state=r, params={"x": float(i)}, distributions=_X))
        else:
            study.add_trial(create_trial(values=r if isinstance(r, list) else [r],
                                         params={"x": float(i)}, distributions=_X))
    return study


def _numbers(trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    return [t.number for t in trials]


def test_top_and_best_minimize() -> None:
    study = _study(["minimize"], [0.5, 0.1, TrialState.FAIL, 0.9, TrialState.PRUNED, 0.3])
    assert _numbers(top_trials(study)) == [1, 5, 0, 3]  # failed and pruned never rank
    assert _numbers(top_trials(study, k=2)) == [1, 5]
    assert _numbers(best_trials(study)) == [1]


def test_top_and_best_maximize() -> None:
    study = _study(["maximize"], [0.5, 0.1, 0.9, -1.0, 0.3])
    assert _numbers(top_trials(study, k=3)) == [2, 0, 4]
    assert _numbers(best_trials(study)) == [2]


def test_multi_objective_best_is_the_pareto_front() -> None:
    # minimize loss, maximize accuracy: #1 is dominated by #0, #3 by #2
    study = _study(["minimize", "maximize"],
                   [[0.1, 0.8], [0.2, 0.7], [0.3, 0.95], [0.4, 0.9], [0.05, 0.5]])
    assert sorted(_numbers(best_trials(study))) == [0, 2, 4]
    top = top_trials(study, k=2)
    assert len(top) == 2 and set(_numbers(top)) <= {0, 2, 4}


def test_no_finished_trial_means_no_best() -> None:
    study = _study(["minimize"], [TrialState.FAIL, TrialState.PRUNED])
    assert best_trials(study) == [] and top_trials(study) == []
    assert best_trials(optuna.create_study(directions=["minimize", "minimize"])) == []


# --------------------------------------------------------------------------- records, dumps


def test_trial_record_fields_and_strict_json() -> None:
    t = create_trial(values=[float("inf"), 0.5], params={"x": 2.0}, distributions=_X,
                     user_attrs={"sweeper:index": 4, "sweeper:attempt": 1, "loss": 9.0,
                                 "sweeper:history": {"loss": [[0, 9.0]]}, "epochs_run": 3})
    t.datetime_start = datetime(2024, 5, 1, 12, 0, 0)
    t.datetime_complete = t.datetime_start + timedelta(seconds=90.5)
    rec = trial_record(t, ["loss", "acc"])
    assert rec["number"] == t.number and rec["state"] == "COMPLETE"
    assert (rec["index"], rec["attempt"]) == (4, 1)
    assert rec["values"] == {"loss": "inf", "acc": 0.5}  # non-finite as strings: strict JSON
    assert rec["params"] == {"x": 2.0}
    # sweeper's own attrs and the objective metrics are not "other metrics"
    assert rec["user_attrs"] == {"epochs_run": 3}
    assert rec["fail_reason"] is None
    assert rec["datetime_start"] == "2024-05-01T12:00:00"
    assert rec["datetime_complete"] == "2024-05-01T12:01:30.500000"
    assert rec["duration_s"] == 90.5
    json.dumps(rec, allow_nan=False)


def test_trial_record_of_a_failed_trial() -> None:
    t = create_trial(state=TrialState.FAIL, params={"x": 1.0}, distributions=_X,
                     user_attrs={"sweeper:fail_reason": "objective raised ValueError: bad"})
    t.datetime_start = None  # failed before it ever started (a WAITING trial failed)
    rec = trial_record(t, ["loss"])
    assert rec["values"] is None and rec["state"] == "FAIL"
    assert rec["fail_reason"] == "objective raised ValueError: bad"
    assert rec["index"] is None and rec["user_attrs"] == {}
    assert rec["datetime_start"] is None and rec["duration_s"] is None
    assert rec["datetime_complete"] == t.datetime_complete.isoformat()


def test_trial_record_of_a_zero_duration_trial() -> None:
    t = create_trial(value=1.0, params={"x": 1.0}, distributions=_X)
    t.datetime_start = t.datetime_complete = datetime(2024, 5, 1, 12, 0, 0)
    assert trial_record(t, ["loss"])["duration_s"] == 0.0


def test_dumps_json_and_yaml_round_trip_in_order() -> None:
    data = {"number": 3, "values": {"loss": 0.25, "acc": "nan"}, "params": {"z": 1, "a": "sgd"},
            "tags": [1, 2]}
    as_json = dumps(data, "json")
    assert json.loads(as_json) == data
    assert as_json.startswith('{\n  "number": 3,')  # indented, keys in the given order
    as_yaml = dumps(data, "yaml")
    assert yaml.safe_load(as_yaml) == data
    assert as_yaml.splitlines()[0] == "number: 3" and not as_yaml.endswith("\n")
    assert list(yaml.safe_load(as_yaml)["params"]) == ["z", "a"]
