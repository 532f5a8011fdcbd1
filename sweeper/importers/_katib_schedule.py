"""Katib's algorithms that shape how trials train, not which parameters they get, as
sweeper's schedulers: ``hyperband`` -> promotion ASHA, ``pbt`` -> Population Based Training.

- Katib's Hyperband (``resource_name``, ``eta``, ``r_l``) sets the resource parameter (epochs)
  of each trial and re-runs the best 1/eta of a bracket with eta times the resource. Promotion
  ASHA does the same with one trial per configuration: it trains to a rung (``min_resource *
  eta**k`` steps), pauses there, and goes on when the trial ranks in the top 1/eta; the
  resource parameter becomes a fixed value of ``r_l`` (the most a trial trains) and its rungs
  are Katib's most aggressive bracket (``r_l * eta**-s_max`` first, ``s_max =
  floor(log_eta(r_l))``). Katib's other brackets (fewer, longer first rungs) are not run.
- Katib's PBT (``n_population``, ``truncation_threshold``, ``resample_probability``,
  ``suggestion_trial_dir``) trains a population in generations (one trial per member and
  generation); the bottom ``truncation_threshold`` copy a top member's checkpoint directory
  and go on with its parameters perturbed (x0.8 or x1.2) or resampled. sweeper's PBT trains
  each member as one trial that decides at every ``perturbation_interval`` steps: a step
  stands for a Katib generation (``maxTrialCount / n_population`` of them), and the trial's
  checkpoint directory (``{checkpoint_dir}``) for ``suggestion_trial_dir``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sweeper.importers._common import Importer, number, param_name

#: Katib algorithm -> sweeper scheduler type.
SCHEDULERS = {"hyperband": "asha", "pbt": "pbt"}
#: The algorithmSettings each one reads (the others are notes).
SETTINGS = {"hyperband": ("resource_name", "eta", "r_l"),
            "pbt": ("suggestion_trial_dir", "n_population", "truncation_threshold",
                    "resample_probability")}
_WHERE = "spec.algorithm"
_PATH = ("spec", "algorithm", "algorithmSettings")
#: sweeper's PBT ranks at most half the population as its bottom.
_MAX_QUANTILE = 0.5


@dataclass
class Schedule:
    """What a scheduling algorithm changes in the imported spec."""

    scheduler: dict[str, Any]
    #: Parameters that become trial.fixed (the resource), with their value.
    fixed: dict[str, Any] = field(default_factory=dict)
    #: trials and parallelism (PBT: the population, all at once), when set.
    trials: int | None = None
    #: Text in the command replaced by a placeholder (PBT's suggestion_trial_dir).
    command_path: str | None = None


def schedule(im: Importer, algorithm: str, settings: dict[str, str], s: dict[str, Any],
             params: dict[str, Any]) -> Schedule | None:
    """The scheduler for ``algorithm`` (None: it has none, or the settings leave nothing to
    schedule, said in a note)."""
    if algorithm == "hyperband":
        return _hyperband(im, settings, params)
    if algorithm == "pbt":
        return _pbt(im, settings, s)
    return None


def _hyperband(im: Importer, settings: dict[str, str], params: dict[str, Any]
               ) -> Schedule | None:
    resource = param_name(settings.get("resource_name", ""))
    if resource not in params:
        im.note(_WHERE, f"hyperband: resource_name {settings.get('resource_name')!r} is not a "
                        "parameter (Katib refuses it too): no scheduler")
        return None
    eta = int(number(im, settings.get("eta", "3"), _PATH, integer=True))
    eta = eta if eta >= 2 else 3  # Katib's default for eta <= 0
    top = int(float(number(im, settings.get("r_l", "0"), _PATH)))
    if top < 2:
        im.note(_WHERE, f"hyperband: r_l {settings.get('r_l')} leaves no rung below the last "
                        "step: no scheduler, each trial trains to the end")
        return None
    s_max = int(math.log(top) / math.log(eta))
    low = max(1, min(top - 1, round(top / eta ** s_max)))
    im.note(_WHERE, f"hyperband -> promotion ASHA (scheduler asha): {resource} is fixed at "
                    f"r_l {top}, the program reports a step per unit of it (step=N lines) "
                    f"and is paused at steps {low} x {eta}^k; Katib's other brackets are not "
                    "run. On Kubernetes set artifacts.store: s3 or kubernetes.checkpoint_volume "
                    "(a paused trial resumes in another pod)")
    scheduler = {"type": "asha", "mode": "promotion", "min_resource": low,
                 "max_resource": top, "reduction_factor": eta}
    return Schedule(scheduler, fixed={resource: top})


def _pbt(im: Importer, settings: dict[str, str], s: dict[str, Any]) -> Schedule | None:
    population = int(number(im, settings.get("n_population", "5"), _PATH,
                             integer=True))
    quantile = float(number(im, settings.get("truncation_threshold", "0.2"),
                            _PATH))
    if quantile > _MAX_QUANTILE:
        im.note(_WHERE, f"pbt: truncation_threshold {quantile:g} > 0.5: sweeper's bottom and "
                        "top quantiles cannot overlap, quantile_fraction 0.5")
        quantile = _MAX_QUANTILE
    resample = settings.get("resample_probability")
    raw_cap = s.get("maxTrialCount")
    cap: int = raw_cap if isinstance(raw_cap, int) and raw_cap > 0 else population
    generations = max(2, math.ceil(cap / population))
    scheduler = {"type": "pbt", "max_resource": generations - 1, "perturbation_interval": 1,
                 "quantile_fraction": quantile,
                 "resample_probability": float(number(im, resample, _PATH))
                 if resample is not None else 0.0,
                 "perturbation_factors": [0.8, 1.2]}
    im.note(_WHERE, f"pbt -> Population Based Training (scheduler pbt): the {population} "
                    f"members train at once (parallelism {population}), each in one run of "
                    f"{generations} steps (one per Katib generation, maxTrialCount / "
                    "n_population, at least 2): the program reports step=N lines and saves "
                    "its state as sweeper's checkpoint ($SWEEPER_CHECKPOINT_DIR/checkpoint.pt, "
                    "a pickle of {step, state}), which is what a bottom member copies")
    if resample is not None:
        im.note(_WHERE, "pbt: with resample_probability Katib resamples or keeps each value; "
                        "sweeper resamples or perturbs it (x0.8 or x1.2)")
    return Schedule(scheduler, trials=population,
                    command_path=settings.get("suggestion_trial_dir"))


def apply(out: dict[str, Any], sched: Schedule) -> None:
    """Put ``sched`` into the imported spec ``out`` (its parameters, trial and run shape)."""
    for name, value in sched.fixed.items():
        out["parameters"].pop(name, None)
        out["trial"].setdefault("fixed", {})[name] = value
    if sched.trials is not None:
        out["trials"] = out["parallelism"] = sched.trials
    if sched.command_path:
        path = sched.command_path.rstrip("/")
        out["trial"]["command"] = [arg.replace(sched.command_path, "{checkpoint_dir}/")
                                   .replace(path, "{checkpoint_dir}")
                                   for arg in out["trial"]["command"]]
    out.pop("pruner", None)
    out["scheduler"] = sched.scheduler
