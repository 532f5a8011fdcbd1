"""``sweeper import katib experiment.yaml``: a Katib ``Experiment`` (kubeflow.org/v1beta1) as
a sweeper spec.

Mapped: ``algorithm`` (random, grid, tpe, multivariate-tpe, cmaes, sobol,
bayesianoptimization, and their settings where Optuna has them; hyperband and pbt as sweeper's
schedulers, ``_katib_schedule``), ``objective`` (type, goal ->
``stop.value``, objectiveMetricName; additionalMetricNames are kept anyway: sweeper records
every metric a trial prints), ``parameters`` (double / int / categorical / discrete,
feasibleSpace min / max / step / list, distribution uniform / logUniform),
``parallelTrialCount``, ``maxTrialCount``, ``maxFailedTrialCount`` -> ``stop``,
``earlyStopping`` medianstop, ``metricsCollectorSpec`` (StdOut and File, their metricsFormat)
and the trial template's image, command (``${trialParameters.x}`` -> ``{x}``), env,
resources, labels and annotations, with trial metadata references (``${trialSpec.Name}``, ...)
as sweeper's own per-trial values (``_katib_meta``). Everything else is a note.
"""

from __future__ import annotations

from typing import Any

from sweeper.importers._common import Importer, number, param_name, read, sweep_name
from sweeper.importers._katib_schedule import SCHEDULERS, SETTINGS, apply, schedule
from sweeper.importers._katib_template import metrics_collector, named_groups, trial_template
from sweeper.spec import Path_

#: Katib algorithm -> (sweeper method, sampler options, note when it is only a substitute).
_ALGORITHMS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "random": ("random", {}, None),
    "grid": ("grid", {}, None),
    "tpe": ("tpe", {"multivariate": False}, None),
    "multivariate-tpe": ("tpe", {"multivariate": True}, None),
    "cmaes": ("cmaes", {}, None),
    "sobol": ("qmc", {"qmc_type": "sobol"}, None),
    "bayesianoptimization": ("gp", {}, "Katib's scikit-optimize Gaussian process is replaced "
                                       "by Optuna's GPSampler (method gp)"),
    # Trials sampled at random, trained by a scheduler (_katib_schedule).
    "hyperband": ("random", {}, None),
    "pbt": ("random", {}, None),
}
_NAS = ("enas", "darts")
#: Katib algorithmSettings -> sampler option, per method.
_SETTINGS: dict[str, dict[str, str]] = {
    "tpe": {"n_startup_trials": "n_startup_trials", "n_ei_candidates": "n_ei_candidates",
            "n_EI_candidates": "n_ei_candidates"},  # hyperopt's spelling (Katib's tpe)
    "cmaes": {"restart_strategy": "restart_strategy"},
    "gp": {"n_initial_points": "n_startup_trials"},
}


def import_katib(path: str) -> tuple[dict[str, Any], list[str]]:
    """(sweeper spec as a mapping, notes on what did not map)."""
    data, doc = read(path)
    im = Importer(doc)
    s, meta = _experiment(im, data)
    method, sampler, seed = _algorithm(im, s)
    params, refs = _parameters(im, s, method)
    if method == "grid" and not all(_finite(p) for p in params.values()):
        method = "random"
        im.note("spec.algorithm", "grid over a double without step: Katib refuses it, "
                                  "sweeper's grid needs finite parameters: substituted random")
    out: dict[str, Any] = {"name": sweep_name(str(meta.get("name") or "katib-experiment"))}
    out["description"] = f"imported from Katib Experiment {meta.get('name')}"
    out["method"] = method
    out["objective"], goal = _objective(im, s)
    out.update(_run_shape(im, s, method, params, seed, sampler))
    stop = _stop(s, goal)
    namespace = str(meta.get("namespace") or "sweeper")
    trial, kube = trial_template(im, s, refs, sweep=out["name"], namespace=namespace)
    metrics = metrics_collector(im, s)
    if metrics:
        trial["metrics"] = metrics
    out["trial"] = trial
    out["parameters"] = params
    if stop:
        out["stop"] = stop
    kube["namespace"] = namespace
    out["kubernetes"] = kube
    _scheduler(im, s, out)
    for key in ("resumePolicy", "nasConfig"):
        if key in s:
            im.note(f"spec.{key}", "not mapped (sweeper resumes a sweep with `sweeper resume`)"
                    if key == "resumePolicy" else "not mapped")
    return out, im.notes


def _experiment(im: Importer, data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Experiment's spec and metadata; one error line when it is not an Experiment."""
    if not isinstance(data, dict) or data.get("kind") != "Experiment" or \
            not str(data.get("apiVersion", "")).startswith("kubeflow.org/"):
        what = ("no kind" if data.get("kind") is None else f"kind {data.get('kind')!r}") \
            if isinstance(data, dict) else "not a mapping"
        raise im.err((), f"not a Katib Experiment (expected apiVersion kubeflow.org/v1beta1 "
                         f"and kind Experiment; {what})")
    if not isinstance(data.get("spec"), dict):
        raise im.err(("spec",), "a Katib Experiment needs a spec mapping")
    meta = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
    return data["spec"], meta


def _scheduler(im: Importer, s: dict[str, Any], out: dict[str, Any]) -> None:
    """hyperband and pbt: the scheduler that trains the trials (``_katib_schedule``)."""
    algo = s["algorithm"]
    name = str(algo["algorithmName"])
    if name not in SCHEDULERS:
        return
    sched = schedule(im, name, _settings(im, algo, ("spec", "algorithm")), s, out["parameters"])
    if sched is None:
        return
    if "pruner" in out:
        im.note("spec.earlyStopping", f"{name} decides which trials go on: earlyStopping is "
                                      "dropped (sweeper's scheduler takes no pruner)")
    apply(out, sched)


def _run_shape(im: Importer, s: dict[str, Any], method: str, params: dict[str, Any],
               seed: int | None, sampler: dict[str, Any]) -> dict[str, Any]:
    """trials, parallelism, seed, sampler and pruner, those that apply, in that order."""
    out: dict[str, Any] = {}
    trials = _trials(im, s, method, params)
    if trials is not None:
        out["trials"] = trials
    if isinstance(s.get("parallelTrialCount"), int):
        out["parallelism"] = s["parallelTrialCount"]
    if seed is not None:
        out["seed"] = seed
    if sampler:
        out["sampler"] = sampler
    pruner = _early_stopping(im, s, method, params)
    if pruner:
        out["pruner"] = pruner
    return out


def _stop(s: dict[str, Any], goal: float | None) -> dict[str, Any]:
    stop: dict[str, Any] = {"value": goal} if goal is not None else {}
    if isinstance(s.get("maxFailedTrialCount"), int) and s["maxFailedTrialCount"] > 0:
        stop["max_failed_trials"] = s["maxFailedTrialCount"]
    return stop


# --------------------------------------------------------------------------- sections


def _settings(im: Importer, algo: dict[str, Any], path: Path_) -> dict[str, str]:
    out = {}
    for i, item in enumerate(algo.get("algorithmSettings") or []):
        if not isinstance(item, dict) or "name" not in item:
            raise im.err((*path, "algorithmSettings", i), "expected {name, value}")
        out[str(item["name"])] = str(item.get("value", ""))
    return out


def _algorithm(im: Importer, s: dict[str, Any]) -> tuple[str, dict[str, Any], int | None]:
    algo = s.get("algorithm")
    if not isinstance(algo, dict) or not algo.get("algorithmName"):
        raise im.err(("spec", "algorithm"), "a Katib Experiment needs algorithm.algorithmName")
    name = str(algo["algorithmName"])
    if name in _NAS:
        raise im.err(("spec", "algorithm", "algorithmName"),
                     f"{name} is neural architecture search (nasConfig), not hyperparameter "
                     "tuning: there are no parameters to import")
    if name not in _ALGORITHMS:
        im.note("spec.algorithm", f"algorithm {name!r} has no sweeper counterpart: "
                                  "substituted method random")
    method, sampler, why = _ALGORITHMS.get(name, ("random", {}, None))
    sampler = dict(sampler)
    if why:
        im.note("spec.algorithm", f"{name}: {why}")
    seed = None
    for key, raw in _settings(im, algo, ("spec", "algorithm")).items():
        option = _SETTINGS.get(method, {}).get(key)
        if key == "random_state" and raw.lstrip("-").isdigit():
            seed = abs(int(raw))
        elif key in SETTINGS.get(name, ()):
            continue  # read by _katib_schedule
        elif option is not None:
            value: Any = number(im, raw, ("spec", "algorithm"), integer=True) \
                if raw.lstrip("-").isdigit() else raw
            sampler[option] = value
        else:
            im.note(f"spec.algorithm.algorithmSettings.{key}",
                    f"{key}={raw} of {name} has no counterpart in sweeper's {method}: dropped")
    return method, sampler, seed


def _objective(im: Importer, s: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
    obj = s.get("objective")
    if not isinstance(obj, dict) or not obj.get("objectiveMetricName"):
        raise im.err(("spec", "objective"), "a Katib Experiment needs "
                                            "objective.objectiveMetricName")
    direction = obj.get("type", "minimize")
    if direction not in ("minimize", "maximize"):
        raise im.err(("spec", "objective", "type"), f"expected minimize or maximize, got "
                                                    f"{direction!r}")
    metric = str(obj["objectiveMetricName"])
    goal = number(im, obj["goal"], ("spec", "objective", "goal")) \
        if obj.get("goal") is not None else None
    strategies = {str(m.get("name")): str(m.get("value")) for m in
                  obj.get("metricStrategies") or [] if isinstance(m, dict)}
    strategy = strategies.get(metric, "min" if direction == "minimize" else "max")
    if strategy != "latest":
        im.note("spec.objective", f"Katib scores a trial by the {strategy} of its reported "
                                  f"{metric} (metricStrategies); sweeper takes the last value "
                                  "reported")
    return {"metric": metric, "direction": direction}, \
        float(goal) if goal is not None else None


def _trials(im: Importer, s: dict[str, Any], method: str,
            params: dict[str, Any]) -> int | None:
    cap = s.get("maxTrialCount")
    if method == "grid":
        size = grid_points(params)
        if isinstance(cap, int) and cap < size:
            im.note("spec.maxTrialCount", f"{cap} < the grid's {size} points: sweeper's grid "
                                          "runs its first points in order (the last parameter "
                                          "varies fastest), so the first parameters take few "
                                          "of their values; raise trials or use method random")
            return cap
        return None
    if not isinstance(cap, int) or cap < 1:
        im.note("spec.maxTrialCount", "not set (Katib runs until the goal or a failure limit): "
                                      "substituted trials: 100")
        return 100
    return cap


def _finite(p: dict[str, Any]) -> bool:
    return p["type"] != "float" or "values" in p or "step" in p


def grid_points(params: dict[str, Any]) -> int:
    """The grid size of mapped parameters (each finite)."""
    from sweeper.errors import SpecError
    from sweeper.space import grid_size_of
    from sweeper.spec import parse_spec_dict

    probe = {"name": "probe", "method": "random", "trials": 1, "trial": {"command": ["true"]},
             "objective": {"metric": "m", "direction": "minimize"}, "parameters": params}
    try:
        return grid_size_of(parse_spec_dict(probe).parameters)
    except SpecError:
        return 0  # the imported spec's own validation names the problem


def _parameters(im: Importer, s: dict[str, Any],
                method: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(sweeper parameters, Katib parameter name -> sweeper name)."""
    raw = s.get("parameters")
    if not isinstance(raw, list) or not raw:
        raise im.err(("spec", "parameters"), "a Katib Experiment needs a list of parameters")
    out: dict[str, Any] = {}
    names: dict[str, str] = {}
    for i, p in enumerate(raw):
        path: Path_ = ("spec", "parameters", i)
        if not isinstance(p, dict) or not p.get("name"):
            raise im.err(path, "expected {name, parameterType, feasibleSpace}")
        katib = str(p["name"])
        name = param_name(katib)
        if name != katib:
            im.note(f"parameter {katib}", f"renamed {name} (sweeper names are identifiers); "
                                          "the command still passes it where Katib did")
        names[katib] = name
        out[name] = _parameter(im, p, path, method)
    return out, names


def _parameter(im: Importer, p: dict[str, Any], path: Path_, method: str) -> dict[str, Any]:
    ptype = p.get("parameterType")
    space = p.get("feasibleSpace")
    if not isinstance(space, dict):
        raise im.err((*path, "feasibleSpace"), "expected a mapping")
    fpath = (*path, "feasibleSpace")
    if ptype in ("categorical", "discrete"):
        return _listed(im, ptype, space, fpath)
    if ptype not in ("double", "int"):
        raise im.err((*path, "parameterType"), f"expected double, int, categorical or "
                                               f"discrete, got {ptype!r}")
    integer = ptype == "int"
    low = number(im, space.get("min"), (*fpath, "min"), integer=integer)
    high = number(im, space.get("max"), (*fpath, "max"), integer=integer)
    out: dict[str, Any] = {"type": "int" if integer else "float", "low": low, "high": high}
    if low == high:
        im.note(f"parameter {p['name']}", f"min = max = {low}: a one-value list")
        return {"type": out["type"], "values": [low]}
    _distribution(im, p, space.get("distribution", "uniform"), out)
    if space.get("step") is not None:
        _step(im, p, space, fpath, out, integer)
    elif method == "grid" and not integer:
        im.note(f"parameter {p['name']}", "a double without step on a grid: Katib refuses it "
                                          "too; give it a step")
    return out


def _listed(im: Importer, ptype: str, space: dict[str, Any], fpath: Path_) -> dict[str, Any]:
    """A categorical parameter's choices, or a discrete one's numbers as ``values``."""
    values = space.get("list")
    if not isinstance(values, list) or not values:
        raise im.err((*fpath, "list"), f"a {ptype} parameter needs a non-empty list")
    if ptype == "categorical":
        return {"type": "categorical", "choices": [str(v) for v in values]}
    nums = [number(im, v, (*fpath, "list", k)) for k, v in enumerate(values)]
    kind = "int" if all(isinstance(n, int) for n in nums) else "float"
    return {"type": kind, "values": [float(n) if kind == "float" else n for n in nums]}


def _distribution(im: Importer, p: dict[str, Any], dist: Any, out: dict[str, Any]) -> None:
    """Katib's ``distribution`` as Optuna's ``log`` (or the nearest uniform, with a note)."""
    if dist == "logUniform":
        out["log"] = True
    elif dist in ("normal", "logNormal"):
        out["log"] = dist == "logNormal"
        im.note(f"parameter {p['name']}", f"distribution {dist} has no Optuna counterpart: "
                f"substituted {'log-' if out['log'] else ''}uniform over [min, max]")
    elif dist != "uniform":
        im.note(f"parameter {p['name']}", f"distribution {dist!r}: substituted uniform")


def _step(im: Importer, p: dict[str, Any], space: dict[str, Any], fpath: Path_,
          out: dict[str, Any], integer: bool) -> None:
    step = number(im, space["step"], (*fpath, "step"), integer=integer)
    if out.get("log"):
        if not (integer and step == 1):
            im.note(f"parameter {p['name']}", f"step {step} with logUniform: Optuna cannot "
                                              "combine them; the step is dropped")
        return
    low, high = out["low"], out["high"]
    count = round((high - low) / step)
    if abs(low + count * step - high) > 1e-9 * max(1.0, abs(high)):
        # Katib's grid stops at the last step <= max; sweeper wants high - low = k * step.
        points = [round(low + k * step, 12) for k in range(int((high - low) / step) + 1)]
        out.pop("low"), out.pop("high")
        out["values"] = points
        im.note(f"parameter {p['name']}", f"max {high} is not min + k * step {step}: listed "
                                          f"the {len(points)} values Katib would try")
        return
    out["step"] = step


def _early_stopping(im: Importer, s: dict[str, Any], method: str,
                    params: dict[str, Any]) -> dict[str, Any] | None:
    es = s.get("earlyStopping")
    if not isinstance(es, dict):
        return None
    if es.get("algorithmName") != "medianstop":
        im.note("spec.earlyStopping", f"{es.get('algorithmName')!r} has no sweeper "
                                      "counterpart: not mapped")
        return None
    pruner: dict[str, Any] = {"type": "median"}
    for key, raw in _settings(im, es, ("spec", "earlyStopping")).items():
        option = {"min_trials_required": "n_startup_trials",
                  "start_step": "n_warmup_steps"}.get(key)
        if option is not None and raw.isdigit():
            pruner[option] = int(raw)
        else:
            im.note(f"spec.earlyStopping.{key}", f"{key}={raw}: not mapped")
    return pruner


__all__ = ["grid_points", "import_katib", "named_groups"]
