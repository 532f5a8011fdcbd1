"""TrialContext: what user code gets. Params, reporting, pruning, device and checkpoints."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from sweeper.protocol import DEVICE_ATTR, HISTORY_ATTR, RESUMED_ATTR
from trial_runner.checkpoints import (
    CHECKPOINT_FILE,
    META_FILE,
    CheckpointMirror,
    read_checkpoint,
    write_atomically,
)
from trial_runner.reports import ReportWriter

logger = logging.getLogger(__name__)


def detect_device() -> str:
    """``cuda`` when torch sees a GPU (``cuda:LOCAL_RANK`` in a rank torchrun started), else
    ``cpu``. Imports torch only when asked."""
    try:
        import torch
    except ImportError:
        return "cpu"
    if not torch.cuda.is_available():
        return "cpu"
    local_rank = os.environ.get("LOCAL_RANK")
    return f"cuda:{int(local_rank)}" if local_rank is not None else "cuda"


@dataclass
class TrialContext:
    """Handed to ``module:function(ctx)``.

    ``params`` holds the hyperparameters plus the spec's ``fixed`` constants. ``report`` writes
    the objective's intermediate value (what pruners and the dashboard's charts use) and keeps
    every other metric on the trial. ``checkpoint_dir`` is shared by all attempts of this index,
    so a retry can resume where a killed attempt stopped (``load_checkpoint``).

    Also: ``index`` (the sweep index this trial runs), ``attempt`` (0 for the first try of the
    index, then 1, 2, ... for its retries), ``trial_number`` (the Optuna trial's number),
    ``trial`` (the ``optuna.Trial`` itself), ``objective_metrics`` (the metric names of the
    spec's objective) and ``resumed_from_step`` (the step ``load_checkpoint`` returned, or
    None).
    """

    params: dict[str, Any]
    index: int
    trial_number: int
    attempt: int
    checkpoint_dir: Path
    trial: optuna.Trial
    objective_metrics: tuple[str, ...]
    _history: dict[str, list[list[float]]] = field(default_factory=dict)
    _device: str | None = None
    #: Called after each report (the runner's budget watch: it may stop the trial there).
    _after_report: Callable[[], None] | None = None
    resumed_from_step: int | None = None
    #: Returns the sweep's artifact store (built lazily: only trials that save files pay for it).
    artifact_store_factory: Callable[[], Any] | None = None
    #: The durable copy of this index's checkpoint (S3 artifacts), updated on every save.
    checkpoint_mirror: CheckpointMirror | None = None
    #: Returns the dataset's directory (syncing it on first use); None: no ``data:``.
    data_factory: Callable[[], Path | None] | None = None
    #: The method's name when its sets are planned up front (grid, random, qmc): then
    #: ``suggest_*`` cannot add parameters. None for adaptive methods.
    planned_method: str | None = None
    #: Writes reports and attributes behind (trial_runner.reports); None: each at once.
    writer: ReportWriter | None = None

    # ---- data

    @property
    def data_dir(self) -> Path | None:
        """The sweep's dataset (spec ``data:``): a mounted directory, or an S3 prefix synced
        once per pod (once per machine locally). None when the spec has no ``data:``."""
        return self.data_factory() if self.data_factory is not None else None

    # ---- define-by-run: parameters the code asks for, after the YAML's

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        """Like ``optuna.Trial.suggest_float``: an Optuna objective ports by replacing ``trial``
        with ``ctx``. Adaptive methods only (the value is also put in ``ctx.params``)."""
        self._may_suggest(name)
        value = self.trial.suggest_float(name, low, high, step=step, log=log)
        self.params[name] = value
        return value

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int:
        """Like ``optuna.Trial.suggest_int`` (adaptive methods only)."""
        self._may_suggest(name)
        value = self.trial.suggest_int(name, low, high, step=step, log=log)
        self.params[name] = value
        return value

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        """Like ``optuna.Trial.suggest_categorical`` (adaptive methods only)."""
        self._may_suggest(name)
        value = self.trial.suggest_categorical(name, list(choices))
        self.params[name] = value
        return value

    def _may_suggest(self, name: str) -> None:
        if self.planned_method is not None:
            raise SuggestNotAllowed(
                f"ctx.suggest_*({name!r}) needs an adaptive method (tpe, gp, cmaes, nsga2, "
                f"nsga3): {self.planned_method} sets are planned up front from the spec's "
                f"parameters, so declare {name!r} under parameters: instead")

    # ---- hardware

    @property
    def device(self) -> str:
        """Where to put tensors: ``cuda`` when torch sees a GPU (``cuda:LOCAL_RANK`` in a rank
        torchrun started), else ``cpu``. The trial records which GPU it ran on."""
        if self._device is None:
            self._device = detect_device()
            self._set_attr(DEVICE_ATTR, self._device_description())
        return self._device

    def _device_description(self) -> str:
        if self._device is not None and self._device.startswith("cuda"):
            import torch

            return f"cuda:{torch.cuda.get_device_name(torch.device(self._device))}"
        return "cpu"

    def _half_dtype(self) -> Any:
        """bf16 where the GPU supports it, else fp16; None on a CPU (no mixed precision)."""
        import torch

        if not self.device.startswith("cuda"):
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16

    def autocast(self) -> AbstractContextManager[Any]:
        """Mixed precision for the forward pass: bf16 autocast on a CUDA device that supports
        it, fp16 otherwise (scale the loss with :meth:`grad_scaler`), nothing on a CPU::

            scaler = ctx.grad_scaler()
            with ctx.autocast():
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
        """
        dtype = self._half_dtype()
        if dtype is None:
            return contextlib.nullcontext()
        import torch

        return torch.autocast("cuda", dtype=dtype)

    def grad_scaler(self) -> Any:
        """A ``torch.amp.GradScaler`` that scales only when :meth:`autocast` uses fp16 (bf16
        and CPUs need none: then it passes the loss and the step through unchanged)."""
        import torch

        return torch.amp.GradScaler("cuda", enabled=self._half_dtype() == torch.float16)

    # ---- metrics and pruning

    def report(self, step: int, **metrics: float) -> None:
        """Record metrics at ``step`` (epoch, batch, ...). The objective metric becomes the
        trial's intermediate value; the others are stored on the trial with their history."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        clean: dict[str, float] = {}
        for name, value in metrics.items():
            try:
                clean[name] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"metric {name}={value!r} is not a number") from None
        primary = clean.get(self.objective_metrics[0])
        single = len(self.objective_metrics) == 1
        attrs: dict[str, Any] = {}
        for name, value in clean.items():
            self._history.setdefault(name, []).append([step, value])
            if math.isfinite(value):
                attrs[name] = value
        # A copy: the writer may serialise it on its timer thread while the next report grows
        # the history (its [step, value] pairs are never changed once made).
        attrs[HISTORY_ATTR] = {name: list(points) for name, points in self._history.items()}
        # The intermediate value and the metrics: one transaction.
        report = (step, primary) if single and primary is not None and math.isfinite(primary) \
            else None
        if self.writer is not None:
            self.writer.add(user_attrs=attrs, report=report)
        else:
            from sweeper.study import write_trial

            write_trial(self.trial, user_attrs=attrs, report=report)
        if self._after_report is not None:
            self._after_report()

    @property
    def last_step(self) -> int | None:
        """The highest step this trial reported (a promoted trial: its reports before its
        pause included, back to the checkpoint it resumed from); None before the first."""
        return max((int(p[0]) for points in self._history.values() for p in points),
                   default=None)

    def should_prune(self) -> bool:
        """True when the sweep's pruner says this trial is unpromising: stop and
        ``raise optuna.TrialPruned()`` (or return; the trial is then still pruned)."""
        if len(self.objective_metrics) > 1:
            return False
        if self.writer is not None:
            self.writer.flush()  # the pruner reads this trial's reports from the storage
        return bool(self.trial.should_prune())

    def set(self, key: str, value: Any) -> None:
        """Store any JSON-able value on the trial (shown in the dashboard's user attrs)."""
        self._set_attr(key, value)

    def _set_attr(self, key: str, value: Any) -> None:
        if self.writer is not None:
            self.writer.add(user_attrs={key: value})
        else:
            self.trial.set_user_attr(key, value)

    # ---- artifacts

    def save_artifact(self, data: str | os.PathLike[str] | bytes, name: str | None = None
                      ) -> str:
        """Save a file (a path) or bytes (then ``name=`` is required) as an Optuna artifact of
        this trial, in the sweep's artifact store (``artifacts:`` in the spec; by default a
        directory next to the study). The dashboard lists it; ``sweeper best NAME --download
        DIR`` fetches the best trial's. Returns the artifact id."""
        if self.artifact_store_factory is None:
            raise RuntimeError("this TrialContext has no artifact store (run it through "
                               "sweeper's trial runner)")
        from sweeper.artifacts import upload

        artifact_id = upload(self.artifact_store_factory(), self.trial, data, name)
        logger.info("trial #%d: saved artifact %s", self.trial_number, artifact_id)
        return artifact_id

    # ---- checkpoints

    def save_checkpoint(self, state: Any, step: int) -> Path:
        """Atomically write ``state`` (anything torch.save or pickle can write) as the latest
        checkpoint of this index, tagged with ``step``; with S3 artifacts, also upload it
        there before returning, so a retry in another pod resumes from it."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path = self.checkpoint_dir / CHECKPOINT_FILE
        tmp = path.with_name(f".{CHECKPOINT_FILE}.part{os.getpid()}")
        payload = {"step": step, "trial_number": self.trial_number, "state": state}
        if "torch" in sys.modules:
            import torch

            torch.save(payload, tmp)
        else:
            with open(tmp, "wb") as f:
                pickle.dump(payload, f)
        os.replace(tmp, path)
        write_atomically(self.checkpoint_dir / META_FILE, json.dumps(
            {"step": step, "trial_number": self.trial_number, "attempt": self.attempt}).encode())
        if self.checkpoint_mirror is not None:
            self.checkpoint_mirror.push(self.checkpoint_dir)
        return path

    def load_checkpoint(self) -> tuple[Any, int] | None:
        """(state, step) of the latest checkpoint a previous attempt of this index saved,
        or None. Records the step on the trial so the resume is visible."""
        path = self.checkpoint_dir / CHECKPOINT_FILE
        if not path.exists():
            return None
        payload = read_checkpoint(path)
        step = int(payload["step"])
        self.resumed_from_step = step
        # A promoted trial's history (trial_runner.runner): the steps after the checkpoint's
        # are reported again.
        self._history = {k: [p for p in v if p[0] <= step] for k, v in self._history.items()}
        self._set_attr(RESUMED_ATTR, step)
        logger.info("index %d resumes from the checkpoint of step %d", self.index, step)
        return payload["state"], step


def objective_values(result: Any, metrics: tuple[str, ...]) -> tuple[list[float], dict[str, Any]]:
    """Turn what user code returned into (objective values, other metrics).

    Raises ``InvalidResult`` with a reason for anything that is not a finite number per
    objective: None, NaN, a string, a dict missing the metric.
    """
    extra: dict[str, Any] = {}
    if isinstance(result, Mapping):
        missing = [m for m in metrics if m not in result]
        if missing:
            raise InvalidResult(f"the returned metrics {sorted(result)} lack the objective "
                                f"metric {missing[0]!r}")
        raw = [result[m] for m in metrics]
        extra = {k: v for k, v in result.items() if k not in metrics}
    elif len(metrics) == 1:
        raw = [result]
    elif isinstance(result, (list, tuple)) and len(result) == len(metrics):
        raw = list(result)
    else:
        raise InvalidResult(f"a multi-objective trial must return a dict with {list(metrics)}, "
                            f"got {type(result).__name__}")
    return [_objective_value(name, v) for name, v in zip(metrics, raw, strict=True)], extra


def _objective_value(name: str, v: Any) -> float:
    """One objective's value as a finite float (numpy and torch scalars too)."""
    if v is None:
        raise InvalidResult(f"the objective returned None for {name!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if hasattr(v, "item") and callable(v.item):  # numpy / torch scalars
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidResult(f"{name!r} must be a number, got {type(v).__name__} {v!r}"[:300])
    if not math.isfinite(float(v)):
        raise InvalidResult(f"{name!r} is {v} (not finite)")
    return float(v)


class InvalidResult(Exception):
    """The objective finished but returned something that is not a usable result."""


class TrialTimeout(Exception):
    """The trial ran past ``trial.timeout``."""


class ProgramFailed(Exception):
    """A ``trial.command`` program exited with an error: its own output says why, so the
    runner logs one line with the exit code, not a traceback of its own."""


class SuggestNotAllowed(Exception):
    """``ctx.suggest_*`` in a sweep whose sets are planned up front (grid, random, qmc)."""
