"""Reading a command trial's metrics: names with - . /, `name: value` lines, a custom regex,
and JSON lines the program appends to a file (followed while it runs)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec
from trial_runner.command import command_objective
from trial_runner.metrics import JsonLinesTail, Metrics, parse_metric_line
from trial_runner.runner import RunnerSettings, run_index


@pytest.mark.parametrize(("line", "expect"), [
    ("Validation-accuracy=0.97", {"Validation-accuracy": 0.97}),  # Katib's stock images
    ("epoch 3/10 - loss: 0.412 - val/loss: 0.5 - acc: 0.9",  # Keras-like, W&B names
     {"loss": 0.412, "val/loss": 0.5, "acc": 0.9}),
    ("step=2 train.loss = 1e-3, lr:3.0E-4", {"step": 2.0, "train.loss": 0.001, "lr": 3e-4}),
    ("2026-11-23 08:33:31,789 INFO loading {'x1': 0.1} from http://host:8080/x", {}),
    ("ERROR: file not found", {}),
])
def test_default_stdout_format_reads_equals_and_colon_pairs(line: str,
                                                            expect: dict[str, float]) -> None:
    assert parse_metric_line(line) == pytest.approx(expect)


def test_a_format_regex_replaces_the_default() -> None:
    fmt = re.compile(r"\|\s*(?P<name>[a-z_/]+)\s+(?P<value>[-\d.e]+)")
    assert parse_metric_line("| loss 0.5 | val/acc 0.91 | acc=3", fmt) == {
        "loss": 0.5, "val/acc": 0.91}
    assert parse_metric_line("| loss n/a", fmt) == {}


def test_json_lines_tail_reads_only_new_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0, "loss": 9}\n')  # a previous attempt's line: not this trial's
    reports: list[tuple[int, dict[str, float]]] = []
    sink = Metrics(lambda step, m: reports.append((step, m)) is not None)
    tail = JsonLinesTail(path, sink, on_prune=lambda: None)
    with open(path, "a") as f:
        f.write('{"step": 1, "val/loss": 0.5, "note": "x", "ok": true}\n{"step": 2, "val')
    tail.poll()
    assert reports == [(1, {"val/loss": 0.5})]
    with open(path, "a") as f:
        f.write('/loss": 0.25}\nnot json\n[1, 2]\n{"val/loss": 0.2}')
    tail.finish()
    assert reports == [(1, {"val/loss": 0.5}), (2, {"val/loss": 0.25})]
    assert sink.final == {"val/loss": 0.2}
    path.write_text('{"step": 5, "val/loss": 0.1}\n')  # truncated and rewritten: read again
    tail.poll()
    assert reports[-1] == (5, {"val/loss": 0.1})


def _run(tmp_path: Path, url: str, script: str, objective: str, **metrics: Any) -> Any:
    path = tmp_path / "train.py"
    path.write_text(script)
    trial: dict[str, Any] = {"command": [sys.executable, str(path), "{x}", "{trial_number}"],
                             "retries": 0}
    if metrics:
        trial["metrics"] = metrics
    spec = make_spec(method="random", trial=trial, objective={"metric": objective,
                                                              "direction": "minimize"},
                     parameters={"x": {"type": "float", "low": -2.0, "high": 2.0}})
    sweep, _ = create_or_resume(open_storage(url), spec)
    assert spec.trial.command is not None
    out = run_index(sweep, 0, command_objective(spec.trial.command, None, spec.trial.metrics),
                    RunnerSettings(checkpoint_root=tmp_path / "c"))
    assert out.state == "COMPLETE", out.message
    return sweep.study().trials[out.trial_number]


def test_command_metrics_with_slashes_and_colons(sqlite_url: str, tmp_path: Path) -> None:
    t = _run(tmp_path, sqlite_url, "import sys\nx = float(sys.argv[1])\n"
             "for s in range(2):\n    print(f'step: {s} val/loss: {x * x + 1 - s}')\n"
             "print(f'Validation-accuracy={0.5}')\n", "val/loss")
    x = t.params["x"]
    assert t.value == pytest.approx(x * x)
    assert t.intermediate_values == pytest.approx({0: x * x + 1, 1: x * x})
    assert t.user_attrs["Validation-accuracy"] == 0.5


def test_command_metrics_by_format_regex(sqlite_url: str, tmp_path: Path) -> None:
    t = _run(tmp_path, sqlite_url, "import sys\nx = float(sys.argv[1])\n"
             "print('loss=99')\nprint(f'[metric] objective -> {x * x}')\n", "objective",
             format=r"\[metric\] (?P<name>\w+) -> (?P<value>\S+)")
    assert t.value == pytest.approx(t.params["x"] ** 2)
    assert "loss" not in t.user_attrs  # the default format is off


def test_command_metrics_from_a_json_lines_file(sqlite_url: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a relative path is the runner's (and the program's) cwd
    script = ("import json, sys, time\nx = float(sys.argv[1])\n"
              "with open(f'metrics-{sys.argv[2]}.jsonl', 'a') as f:\n"
              "    for s in range(3):\n"
              "        f.write(json.dumps({'step': s, 'val/loss': x * x + 2 - s}) + '\\n')\n"
              "        f.flush(); time.sleep(0.3)\n"
              "print('val/loss=123')\n")
    t = _run(tmp_path, sqlite_url, script, "val/loss", file="metrics-{trial_number}.jsonl")
    x = t.params["x"]
    assert t.value == pytest.approx(x * x)  # the file's last value, not stdout's
    assert t.intermediate_values == pytest.approx({0: x * x + 2, 1: x * x + 1, 2: x * x})
    history = t.user_attrs["sweeper:history"]["val/loss"]
    assert [step for step, _ in history] == [0, 1, 2]
    assert json.loads((tmp_path / "metrics-0.jsonl").read_text().splitlines()[0])["step"] == 0


def test_command_metrics_from_a_text_file_read_with_the_format(sqlite_url: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """Katib's File collector: a text log read with a regex (here Katib's own mnist format)."""
    monkeypatch.chdir(tmp_path)
    script = ("import sys\nx = float(sys.argv[1])\n"
              "with open('mnist.log', 'a') as f:\n"
              "    f.write('{metricName: accuracy, metricValue: 0.9};'\n"
              "            f'{{metricName: loss, metricValue: {x * x:.6f}}}\\n')\n")
    t = _run(tmp_path, sqlite_url, script, "loss", file="mnist.log",
             format=r"{metricName: (?P<name>[\w|-]+), metricValue: (?P<value>-?\d+(\.\d+)?)}")
    assert t.value == pytest.approx(t.params["x"] ** 2, abs=1e-6)
    assert t.user_attrs["accuracy"] == 0.9


def test_numeric_strings_in_json_lines_are_numbers() -> None:
    from trial_runner.metrics import numeric_items

    assert numeric_items({"loss": "0.23", "global_step": "1", "trial": "0", "note": "x1",
                          "ok": True, "t": 1.5}) == {"loss": 0.23, "global_step": 1.0,
                                                     "trial": 0.0, "t": 1.5}
