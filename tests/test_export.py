"""Export formats: ``sweeper export`` (csv, json), ``sweeper best`` (json, yaml, Pareto front)
and ``sweeper status --format json``: stable field names, documented in the README."""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from sweeper.export import CSV_HEAD, CSV_TAIL, export_document, to_csv, to_json
from sweeper.spec import parse_spec
from tests.support.compare import invoke, isolate, quadratic_spec, run_sweep

RECORD_KEYS = ["number", "index", "attempt", "retry_of", "state", "values", "params", "user_attrs",
               "history", "fail_reason", "datetime_start", "datetime_complete", "duration_s",
               "device", "code_version", "code", "spec_hash", "artifacts", "usage"]

SPEC = parse_spec("""\
name: exp
method: random
objective:
  - {metric: loss, direction: minimize}
  - {metric: cost, direction: minimize}
trials: 3
trial: {entrypoint: "m:f"}
parameters:
  x: {type: float, low: 0, high: 1}
  opt: {type: categorical, choices: [a, b]}
""")


def _trials() -> list[optuna.trial.FrozenTrial]:
    start = datetime(2026, 1, 2, 3, 4, 5)
    dists = {"x": FloatDistribution(0, 1), "opt": CategoricalDistribution(["a", "b"])}
    done = create_trial(
        state=TrialState.COMPLETE, values=[0.5, 2.0], params={"x": 0.25, "opt": "b"},
        distributions=dists,
        user_attrs={"sweeper:index": 0, "sweeper:attempt": 1, "sweeper:retry_of": 0,
                    "sweeper:device": "cuda:H100", "sweeper:code_version": "git:abc",
                    "sweeper:spec_hash": SPEC.spec_hash, "loss": 0.5, "acc": 0.9,
                    "note": {"k": [1, 2]}, "bad": float("nan"),
                    "sweeper:history": {"loss": [[0, 1.0], [1, 0.5]]}},
        system_attrs={"artifacts:abc-123": json.dumps(
            {"artifact_id": "abc-123", "filename": "model.pt",
             "mimetype": "application/octet-stream", "encoding": None})})
    done.number, done.datetime_start = 1, start
    done.datetime_complete = start + timedelta(seconds=1.5)
    failed = create_trial(state=TrialState.FAIL, params={"x": 0.75, "opt": "a"},
                          distributions=dists,
                          user_attrs={"sweeper:index": 0, "sweeper:attempt": 0,
                                      "sweeper:fail_reason": "objective raised ValueError: x"})
    failed.number = 0
    waiting = create_trial(state=TrialState.WAITING, user_attrs={"sweeper:index": 2})
    waiting.number = 2
    return [done, waiting, failed]


def test_json_document_is_stable_and_strict() -> None:
    doc = export_document(SPEC, _trials())
    assert list(doc) == ["format_version", "study", "method", "spec_hash", "objectives",
                         "parameters", "trials"]
    assert doc["objectives"] == [{"metric": "loss", "direction": "minimize"},
                                 {"metric": "cost", "direction": "minimize"}]
    assert [t["number"] for t in doc["trials"]] == [0, 1, 2]
    assert all(list(t) == RECORD_KEYS for t in doc["trials"])
    failed, done, waiting = doc["trials"]
    assert done["values"] == {"loss": 0.5, "cost": 2.0}
    assert done["params"] == {"x": 0.25, "opt": "b"}
    assert (done["index"], done["attempt"], done["retry_of"]) == (0, 1, 0)
    assert done["user_attrs"] == {"acc": 0.9, "note": {"k": [1, 2]}, "bad": "nan"}
    assert done["history"] == {"loss": [[0, 1.0], [1, 0.5]]}
    assert done["duration_s"] == 1.5 and done["datetime_start"] == "2026-01-02T03:04:05"
    assert (done["device"], done["code_version"], done["spec_hash"]) == \
        ("cuda:H100", "git:abc", SPEC.spec_hash)
    assert done["artifacts"] == [{"artifact_id": "abc-123", "filename": "model.pt",
                                  "mimetype": "application/octet-stream"}]
    assert failed["state"] == "FAIL" and failed["values"] is None
    assert failed["fail_reason"] == "objective raised ValueError: x"
    assert waiting["state"] == "WAITING" and waiting["params"] == {}
    assert json.loads(to_json(doc)) == doc  # strict JSON: no NaN tokens


def test_csv_columns_and_cells() -> None:
    doc = export_document(SPEC, _trials())
    rows = list(csv.DictReader(io.StringIO(to_csv(doc))))
    header = to_csv(doc).splitlines()[0].split(",")
    assert header == [*CSV_HEAD, "values.loss", "values.cost", "params.x", "params.opt",
                      *CSV_TAIL, "user_attrs.acc", "user_attrs.bad", "user_attrs.note"]
    failed, done, waiting = rows
    assert done["values.cost"] == "2.0" and done["params.opt"] == "b"
    assert done["artifacts"] == '["model.pt"]' and done["user_attrs.note"] == '{"k":[1,2]}'
    assert failed["values.loss"] == "" and failed["fail_reason"].startswith("objective raised")
    assert waiting["state"] == "WAITING" and waiting["params.x"] == ""


# --------------------------------------------------------------------------- the CLI, for real


def test_export_status_best_on_a_real_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            storage_url: str) -> None:
    isolate(tmp_path, monkeypatch)
    run_sweep(tmp_path, storage_url, quadratic_spec("exp-real", trials=4))

    # export csv to stdout
    result = invoke("export", "exp-real", "--storage", storage_url)
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["number"] for r in rows] == ["0", "1", "2", "3"]
    assert sorted(r["index"] for r in rows) == ["0", "1", "2", "3"]
    for r in rows:
        assert r["state"] == "COMPLETE" and r["attempt"] == "0"
        assert float(r["values.loss"]) >= 0 and r["params.opt"] in ("adam", "sgd")
        assert float(r["duration_s"]) > 0 and r["code_version"] == "test-build-1"
        assert len(r["spec_hash"]) == 16 and r["artifacts"] == '["result.json"]'
        assert 0 < float(r["user_attrs.accuracy"]) <= 1

    # export json to a file
    out = tmp_path / "trials.json"
    result = invoke("export", "exp-real", "--storage", storage_url, "--format", "json",
                    "-o", str(out))
    assert result.exit_code == 0 and "wrote 4 trials of exp-real" in result.stderr
    doc = json.loads(out.read_text())
    assert doc["study"] == "exp-real" and doc["parameters"] == ["x", "opt"]
    assert [len(t["history"]["loss"]) for t in doc["trials"]] == [3, 3, 3, 3]
    assert {t["spec_hash"] for t in doc["trials"]} == {doc["spec_hash"]}

    # status json
    status = json.loads(invoke("status", "exp-real", "--storage", storage_url,
                               "--format", "json").stdout)
    assert status["trials_by_state"] == {"COMPLETE": 4} and status["finished_indexes"] == 4
    assert [s["index"] for s in status["per_index"]] == [0, 1, 2, 3]

    # best json == yaml == the best row of the export
    best = json.loads(invoke("best", "exp-real", "--storage", storage_url).stdout)
    best_yaml = yaml.safe_load(invoke("best", "exp-real", "--storage", storage_url,
                                      "--format", "yaml").stdout)
    assert best == best_yaml
    assert best["study"] == "exp-real" and best["directions"] == ["minimize"]
    assert list(best)[2:] == RECORD_KEYS
    winner = min(doc["trials"], key=lambda t: t["values"]["loss"])
    assert best["number"] == winner["number"] and best["params"] == winner["params"]


def test_multi_objective_best_is_the_pareto_front(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """a = x^2 and b = (x-1)^2 conflict on [0, 1]: x in {0, .25, .5, 1} is the front, -0.5 and
    1.5 are dominated."""
    isolate(tmp_path, monkeypatch)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    script = "import sys; x = float(sys.argv[1]); print('a=%r b=%r' % (x * x, (x - 1) ** 2))"
    spec = {"name": "pareto", "method": "grid",
            "objective": [{"metric": "a", "direction": "minimize"},
                          {"metric": "b", "direction": "minimize"}],
            "parallelism": 2,
            "trial": {"command": [sys.executable, "-c", script, "{x}"], "retries": 0},
            "parameters": {"x": {"type": "float", "values": [-0.5, 0.0, 0.25, 0.5, 1.0, 1.5]}}}
    run_sweep(tmp_path, url, spec)
    for fmt in ("json", "yaml"):
        result = invoke("best", "pareto", "--storage", url, "--format", fmt)
        assert result.exit_code == 0, result.output
        data = yaml.safe_load(result.stdout)  # JSON is YAML
        assert list(data) == ["study", "directions", "pareto_front"]
        assert data["directions"] == ["minimize", "minimize"]
        front = sorted(data["pareto_front"], key=lambda r: r["params"]["x"])
        assert [r["params"]["x"] for r in front] == [0.0, 0.25, 0.5, 1.0]
        assert [r["index"] for r in front] == [1, 2, 3, 4]
        assert front[1]["values"] == {"a": 0.0625, "b": 0.5625}
    table = invoke("best", "pareto", "--storage", url, "--format", "table").stdout
    assert table.splitlines()[0].split() == ["trial", "index", "a", "b", "x"]
    rows = list(csv.DictReader(io.StringIO(invoke("export", "pareto", "--storage", url).stdout)))
    assert len(rows) == 6 and {"values.a", "values.b"} <= set(rows[0])


def test_export_of_an_unknown_sweep_is_exit_2(tmp_path: Path) -> None:
    result = invoke("export", "nope", "--storage", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2 and "no sweep named 'nope'" in result.stderr


def test_each_trial_carries_what_its_segments_consumed_and_their_cost() -> None:
    from sweeper.protocol import usage_key

    spec = parse_spec(SPEC_TEXT_WITH_COST)
    t = create_trial(state=TrialState.COMPLETE, value=1.0, params={"x": 0.5},
                     distributions={"x": FloatDistribution(0, 1)},
                     user_attrs={"sweeper:index": 0, usage_key("a"): {
                         "wall_s": 1800, "gpus": 2, "cpus": 8, "steps": 30,
                         "ending": "preempted"}, usage_key("b"): {
                         "wall_s": 3600, "gpus": 2, "cpus": 8, "steps": 90,
                         "ending": "complete"}})
    doc = export_document(spec, [t])
    (r,) = doc["trials"]
    assert doc["currency"] == "EUR"
    assert r["usage"]["gpu_hours"] == 3.0 and r["usage"]["steps"] == 120
    assert r["usage"]["cost"] == 7.5 and r["usage"]["segments"] == 2
    assert sorted(r["usage"]["endings"]) == ["complete", "preempted"]
    row = next(csv.DictReader(io.StringIO(to_csv(doc))))
    assert (row["gpu_hours"], row["steps"], row["cost"]) == ("3.0", "120", "7.5")
    assert not any(k.startswith("user_attrs.sweeper") for k in row)


SPEC_TEXT_WITH_COST = """\
name: exp-cost
method: random
trials: 2
objective: {metric: loss, direction: minimize}
trial: {entrypoint: m:f, resources: {gpu: 2}}
parameters:
  x: {type: float, low: 0, high: 1}
cost: {per_gpu_hour: 2.5, currency: EUR}
"""
