"""A ``steps`` budget with a program that certainly reports no steps is bad input: one line
naming ``budget.steps`` (file and line), exit 2, nothing written. Certain means: an entrypoint
whose module's source never reports and never hands its context on, or a command whose
``metrics.format`` can never read a metric named ``step``. A program that may report is
accepted (the run-time rule then stays the check)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.entrypoint import load_entrypoint
from sweeper.errors import SpecError
from sweeper.spec import load_spec
from sweeper.spec._metrics import format_may_name
from sweeper.step_reports import silent_entrypoint

SILENT = '''
"""Trains without reporting anything."""
import math


def scale(x):
    return 2 * x


def train(ctx):
    lr = scale(ctx.params["lr"])
    ctx.set("note", "no steps")
    state = ctx.load_checkpoint()
    ctx.save_checkpoint({"lr": lr}, 1)
    return {"loss": math.sin(lr) + (0 if state is None else 1)}
'''

REPORTS = '''
def train(ctx):
    for step in range(3):
        ctx.report(step, loss=1.0 / (step + 1))
    return 0.5
'''

HANDS_ON = '''
from {helper} import fit


def train(ctx):
    return fit(ctx)
'''

HELPER = '''
def fit(trial_context):
    trial_context.report(1, loss=0.3)
    return 0.3
'''


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``tmp_path`` as the working directory; the modules the test wrote are forgotten after
    it (each test names its own, but a module name must not leak into another test)."""
    monkeypatch.chdir(tmp_path)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if getattr(sys.modules[name], "__file__", "") and \
                str(sys.modules[name].__file__).startswith(str(tmp_path)):
            del sys.modules[name]


def _module(where: Path, name: str, source: str) -> str:
    (where / f"{name}.py").write_text(textwrap.dedent(source))
    importlib.invalidate_caches()  # the directory's listing may be cached from this second
    return name


STEPS = {"steps": 30}


def _spec(where: Path, trial: dict[str, object], budget: dict[str, object] | None = STEPS,
          name: str = "steps-budget") -> Path:
    spec: dict[str, object] = {
        "name": name, "method": "random", "trials": 4, "parallelism": 2,
        "objective": {"metric": "loss", "direction": "minimize"},
        "trial": trial, "parameters": {"lr": {"type": "float", "low": 0.1, "high": 1.0}}}
    if budget is not None:
        spec["budget"] = budget
    path = where / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _budget_line(path: Path) -> int:
    lines = path.read_text().splitlines()
    return next(k for k, line in enumerate(lines, 1) if line.startswith("  steps:"))


def _one_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


# --------------------------------------------------------------------------- entrypoints


def test_an_entrypoint_that_never_reports_is_refused_at_budget_steps(here: Path) -> None:
    mod = _module(here, "silent_train", SILENT)
    path = _spec(here, {"entrypoint": f"{mod}:train"})
    line = _one_error(CliRunner().invoke(cli, ["validate", str(path)]))
    assert line.startswith(f"error: {path}:{_budget_line(path)}: budget.steps: "
                           f"{mod}:train (silent_train.py:10) never calls ctx.report"), line
    assert "a steps budget is never spent" in line and "gpu_hours or cpu_hours" in line


def test_the_refusal_through_run_writes_nothing(here: Path) -> None:
    mod = _module(here, "silent_run", SILENT)
    path = _spec(here, {"entrypoint": f"{mod}:train"})
    db, logs = here / "sweeps.db", here / "logs"
    result = CliRunner().invoke(cli, ["run", str(path), "--storage", f"sqlite:///{db}",
                                      "--log-dir", str(logs)])
    assert "budget.steps" in _one_error(result)
    assert not db.exists() and not logs.exists()
    assert sorted(p.name for p in here.iterdir()) == ["silent_run.py", "steps-budget.yaml"]


def test_a_budget_set_on_the_command_line_is_named_as_such(here: Path) -> None:
    mod = _module(here, "silent_set", SILENT)
    path = _spec(here, {"entrypoint": f"{mod}:train"})
    line = _one_error(CliRunner().invoke(cli, ["validate", str(path), "--set",
                                               "budget.steps=40"]))
    assert line.startswith(f"error: {path}: --set budget.steps: {mod}:train "), line


def test_an_entrypoint_that_reports_is_accepted(here: Path) -> None:
    mod = _module(here, "loud_train", REPORTS)
    result = CliRunner().invoke(cli, ["validate", str(_spec(here, {"entrypoint":
                                                                     f"{mod}:train"}))])
    assert result.exit_code == 0, result.output


def test_an_entrypoint_handing_its_context_to_another_module_is_accepted(here: Path) -> None:
    helper = _module(here, "fit_helper", HELPER)
    mod = _module(here, "hands_on", HANDS_ON.format(helper=helper))
    result = CliRunner().invoke(cli, ["validate", str(_spec(here, {"entrypoint":
                                                                     f"{mod}:train"}))])
    assert result.exit_code == 0, result.output


def test_a_silent_entrypoint_is_fine_under_another_budget_or_none(here: Path) -> None:
    mod = _module(here, "silent_other", SILENT)
    for budget in ({"cpu_hours": 2}, None):
        path = _spec(here, {"entrypoint": f"{mod}:train"}, budget=budget)
        result = CliRunner().invoke(cli, ["validate", str(path)])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("body", [
    # the context, or Optuna's trial, goes somewhere that may report
    "def train(ctx):\n    return helper(ctx)\n\ndef helper(c):\n    return 1.0\n",
    "def train(ctx):\n    t = ctx.trial\n    return 1.0\n",
    "def train(ctx):\n    keep = [ctx]\n    return 1.0\n",
    "def train(ctx):\n    def inner():\n        return ctx\n    return 1.0\n",
    "def train(ctx):\n    r = getattr(ctx, 'rep' + 'ort')\n    return 1.0\n",
    "def train(ctx):\n    ctx.set('sweeper:history', {'loss': [[1, 0.5]]})\n    return 1.0\n",
    "def train(ctx):\n    ctx.set(name_of(), 1)\n    return 1.0\n\ndef name_of():\n"
    "    return 'x'\n",
    "def train(ctx):\n    ctx.writer.flush()\n    return 1.0\n",
    # the module names report somewhere
    "from logging import info as report\n\ndef train(ctx):\n    return 1.0\n",
    "def train(ctx):\n    return 1.0\n\ndef other(x):\n    x.report(1, loss=1.0)\n",
    # introspection, dynamic code
    "def train(ctx):\n    return eval('1.0')\n",
    "import inspect\n\ndef train(ctx):\n    return 1.0\n",
    "import sys\n\ndef train(ctx):\n    return float(len(sys._getframe().f_locals))\n",
    # what runs is not a plain def at the top of the module
    "def wrap(f):\n    return f\n\n@wrap\ndef train(ctx):\n    return 1.0\n",
    "def make():\n    def train(ctx):\n        return 1.0\n    return train\n\ntrain = make()\n",
    "class Train:\n    def __call__(self, ctx):\n        return 1.0\n\ntrain = Train()\n",
    "import functools\n\ndef run(ctx, scale):\n    return scale\n\n"
    "train = functools.partial(run, scale=1.0)\n",
    "def train(*args):\n    return 1.0\n",
])
def test_what_may_report_is_undecided(here: Path, body: str, request: pytest.FixtureRequest
                                      ) -> None:
    name = f"maybe_{abs(hash(request.node.name)) % 10**8}"
    _module(here, name, body)
    fn = load_entrypoint(f"{name}:train")
    assert silent_entrypoint(fn) is None


def test_silent_entrypoints_are_found(here: Path) -> None:
    bodies = {
        "plain": "def train(ctx):\n    return 1.0\n",
        "uses": "def train(ctx):\n    x = ctx.suggest_float('x', 0, 1)\n"
                "    with ctx.autocast():\n        d = ctx.device\n"
                "    if ctx.should_prune():\n        return 2.0\n    return x + ctx.index\n",
        "rebinds": "def train(ctx):\n    ctx = None\n    return 1.0\n",
        "docstring": '"""It reports nothing, whatever the report says."""\n\n'
                     "def train(ctx):\n    return 1.0\n",
    }
    for name, body in bodies.items():
        _module(here, f"silent_{name}", body)
        why = silent_entrypoint(load_entrypoint(f"silent_{name}:train"))
        assert why is not None and why.startswith(f"(silent_{name}.py:"), name


# --------------------------------------------------------------------------- commands


def test_a_command_whose_format_never_reads_a_step_is_refused(here: Path) -> None:
    fmt = r"(?P<name>val_loss|accuracy)=(?P<value>[-+.e0-9]+)"
    path = _spec(here, {"command": ["python3", "-c", "print('val_loss=1')"],
                        "metrics": {"format": fmt}})
    db = here / "sweeps.db"
    for args in (["validate", str(path)], ["run", str(path), "--storage", f"sqlite:///{db}"]):
        line = _one_error(CliRunner().invoke(cli, args))
        assert line.startswith(f"error: {path}:{_budget_line(path)}: budget.steps: "
                               "trial.metrics.format "), line
        assert "never reads a metric named 'step'" in line
    assert not db.exists()
    with pytest.raises(SpecError) as e:  # the library says the same without importing
        load_spec(path)
    assert e.value.field == "budget.steps" and e.value.line == _budget_line(path)


@pytest.mark.parametrize("metrics", [
    None,  # name=value pairs on stdout: step=N is a step
    {"file": "{checkpoint_dir}/metrics.jsonl"},  # JSON lines: a "step" key
    {"format": r"(?P<name>[a-z_]+)=(?P<value>\S+)"},
    {"format": r"(?P<name>loss|step)=(?P<value>\S+)"},
    {"format": r"(?i:(?P<name>STEP))=(?P<value>\S+)"},
])
def test_a_command_that_may_report_steps_is_accepted(here: Path,
                                                     metrics: dict[str, str] | None) -> None:
    trial: dict[str, object] = {"command": ["python3", "-c", "print('step=1 loss=1')"]}
    if metrics is not None:
        trial["metrics"] = metrics
    result = CliRunner().invoke(cli, ["validate", str(_spec(here, trial))])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("fmt, may", [
    (r"(?P<name>val_loss)=(?P<value>\S+)", False),
    (r"(?P<name>loss|acc)\s(?P<value>\S+)", False),
    (r"(?P<value>\S+) (?P<name>(loss)|(acc))", False),
    (r"(?P<name>[a-z]+_loss)=(?P<value>\S+)", False),
    (r"(?P<name>\[step\])=(?P<value>\S+)", False),
    (r"(?P<name>\w+)=(?P<value>\S+)", True),
    (r"(?P<name>[^=\s]+)=(?P<value>\S+)", True),
    (r"(?P<name>[]a-z]+)=(?P<value>\S+)", True),
    (r"(?i)(?P<name>STEP)=(?P<value>\S+)", True),
    (r"(?i:(?P<name>STEP))=(?P<value>\S+)", True),
    # whose match depends on its surroundings: undecided, so it may
    (r"(?P<name>(?<=x)loss)=(?P<value>\S+)", True),
    (r"(?P<name>ste\B)=(?P<value>\S+)", True),
    (r"(?P<name>step$)|(?P<value>\S+)", True),
    (r"(?x) (?P<name> loss ) = (?P<value>\S+)", True),
    (r"(?P<name>(?#x)loss)=(?P<value>\S+)", True),
])
def test_format_may_name(fmt: str, may: bool) -> None:
    assert format_may_name(fmt, "step") is may
