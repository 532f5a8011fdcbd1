"""Run at the start-up of a W&B program under sweeper (:mod:`trial_runner.wandb_bridge`).

Standard library only: the program's Python need not have sweeper. When the program imports
the real ``wandb``, two public names are wrapped: ``wandb.init`` updates the run's config with
``$SWEEPER_WANDB_CONFIG`` (as W&B's agent puts a sweep's parameters there) and
``wandb.Run.log`` appends each call's numbers (a nested dict's keys joined by ``.``, as W&B
names them), with W&B's step, as one JSON line to ``$SWEEPER_WANDB_LOG``. The step follows
W&B's documented rule: an explicit ``step`` moves it forward (a smaller one is dropped, as
W&B drops it), and a call with neither ``step`` nor ``commit``, or with ``commit=True``, ends
its step. A ``sitecustomize`` this module hides (Debian's, a virtual environment's) runs after
it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_steps: dict[int, int] = {}  # id(run) -> the step its next log() goes to
_wrapped: set[Any] = set()  # the log functions this module made


def numbers(data: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of one ``wandb.log`` payload; a nested dict's keys joined by ``.``; media,
    tables, strings and booleans are not metrics."""
    out: dict[str, float] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(numbers(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
        elif type(value).__module__ in ("numpy", "torch") and getattr(value, "ndim", 1) == 0:
            out[name] = float(value)  # a numpy scalar or a 0-d tensor
    return out


def step_of(key: int, step: Any, commit: Any) -> int | None:
    """The W&B step a ``log(step=, commit=)`` call of run ``key`` writes to (None: dropped)."""
    with _lock:
        current = _steps.get(key, 0)
        if isinstance(step, int) and not isinstance(step, bool):
            if step < current:
                return None
            current = step
        _steps[key] = current + 1 if (step is None and commit is None) or commit else current
        return current


def record(key: int, data: Any, step: Any, commit: Any) -> None:
    """Append one call's numbers to ``$SWEEPER_WANDB_LOG`` (nothing when none)."""
    path = os.environ.get("SWEEPER_WANDB_LOG")
    if not path or not isinstance(data, Mapping):
        return
    at = step_of(key, step, commit)
    metrics = {k: v for k, v in numbers(data).items() if k != "step"}
    if at is None or not metrics:
        return
    line = json.dumps({"step": at, **{k: v if math.isfinite(v) else str(v)
                                       for k, v in metrics.items()}})
    with _lock, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def wrap_log(run_class: Any) -> None:
    """Wrap ``run_class.log`` so each call is also recorded (once per class)."""
    real_log = run_class.log
    if real_log in _wrapped:
        return

    @functools.wraps(real_log)
    def log(self: Any, data: Any, step: Any = None, commit: Any = None, *args: Any,
            **kwargs: Any) -> Any:
        result = real_log(self, data, step, commit, *args, **kwargs)
        record(id(self), data, step, commit)
        return result

    _wrapped.add(log)
    run_class.log = log


def patch(wandb: Any) -> None:
    """Wrap ``wandb.init`` and ``wandb.Run.log`` (``wandb.sdk.wandb_run.Run`` in releases that
    do not export ``Run``); a run of a subclass with its own ``log`` (``WANDB_MODE=disabled``
    gives one) has that wrapped at ``wandb.init``, and ``wandb.log`` rebound to it."""
    run_class = getattr(wandb, "Run", None)
    if run_class is None:
        run_class = importlib.import_module("wandb.sdk.wandb_run").Run
    wrap_log(run_class)
    real_init = wandb.init

    @functools.wraps(real_init)
    def init(*args: Any, **kwargs: Any) -> Any:
        run = real_init(*args, **kwargs)
        if run is not None:
            started(wandb, run)
        return run

    wandb.init = init


def started(wandb: Any, run: Any) -> None:
    """A run ``wandb.init`` returned: its class's ``log`` wrapped (a subclass may have its
    own), and its config updated with the trial's parameters."""
    if type(run).log not in _wrapped:
        wrap_log(type(run))
        if id(getattr(wandb.log, "__self__", None)) == id(run):  # wandb.log is run.log
            wandb.log = run.log
    config = json.loads(os.environ.get("SWEEPER_WANDB_CONFIG") or "{}")
    if config:
        run.config.update(config, allow_val_change=True)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``wandb`` as the other finders do and patches it once it has run."""

    def find_spec(self, name: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if name != "wandb":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        real_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _hidden_sitecustomize() -> None:
    """Run the ``sitecustomize`` that this one hides on ``sys.path``, if there is one."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if os.environ.get("SWEEPER_WANDB_LOG"):
    sys.meta_path.insert(0, _Finder())
_hidden_sitecustomize()
