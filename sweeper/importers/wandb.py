"""``sweeper import wandb sweep.yaml``: a W&B sweep configuration as a sweeper spec.

Mapped: ``method`` grid / random / bayes (-> gp), ``metric`` name + goal (+ target ->
``stop.value``), every documented parameter form (``values``, ``value`` -> fixed,
``distribution`` constant / categorical / int_uniform / uniform / q_uniform / log_uniform
(exponents) / log_uniform_values / q_log_uniform(_values) / inv_log_uniform(_values), the
``q_*`` ones keeping their type and grid (see ``_wandb_q``), nested ``parameters:``
flattened), ``early_terminate`` hyperband -> the successive-halving pruner at W&B's brackets,
``command`` with ``${program}``, ``${args}``, ``${args_no_hyphens}`` and friends -> the argv
template, ``run_cap`` -> trials, ``name``, ``description``; the program's ``wandb.config`` and
``wandb.log`` work unchanged (``trial.metrics.wandb``). What has no counterpart (normal
distributions, ``probabilities``, ``${args_json}``, project and entity, ...) is a note, with
the substitute used where there is an honest one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweeper.importers._common import (
    Importer,
    escape_braces,
    is_number_text,
    number,
    param_name,
    read,
    sweep_name,
)
from sweeper.importers._wandb_q import quantised
from sweeper.spec import Path_

_METHODS = {"grid": "grid", "random": "random", "bayes": "gp"}
_DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
_IGNORED_KEYS = {"project": "W&B project", "entity": "W&B entity",
                 "controller": "W&B's sweep controller", "image_uri": "W&B Launch image",
                 "job": "W&B Launch job", "launch": "W&B Launch settings"}
_KNOWN_KEYS = {"program", "method", "metric", "parameters", "early_terminate", "command",
               "run_cap", "name", "description", *_IGNORED_KEYS}
#: How many standard deviations either side of the mean stand in for a normal distribution.
_SIGMAS = 3.0
_NO_TRIALS_DEFAULT = 100


@dataclass
class _Space:
    """Parameters as mapped: sweeper name -> parameter; fixed values; W&B's name per param."""

    params: dict[str, Any] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    original: dict[str, str] = field(default_factory=dict)
    booleans: set[str] = field(default_factory=set)
    #: The sweep config's command (W&B's default when it has none), for the notes.
    command: list[str] = field(default_factory=list)


def _passed_as(command: list[str], full: str) -> str:
    """What the program's argv holds for parameter ``full`` (W&B's name), by the command's
    macros (see ``_command``)."""
    forms = [f"--{full}=VALUE" for t in command if t in ("${args}", "${args_no_boolean_flags}")]
    forms += [f"{full}=VALUE" for t in command if t == "${args_no_hyphens}"]
    if not forms:
        return "the command does not pass it (the program can read $SWEEPER_PARAMS)"
    return "the program gets it as " + " and ".join(dict.fromkeys(forms))


def import_wandb(path: str) -> tuple[dict[str, Any], list[str]]:
    """(sweeper spec as a mapping, notes on what did not map)."""
    data, doc = read(path)
    im = Importer(doc)
    _check_config(im, data)
    command = data.get("command", _DEFAULT_COMMAND)
    space = _Space(command=[str(t) for t in command] if isinstance(command, list) else [])
    _parameters(im, data["parameters"], ("parameters",), "", space, data["method"])
    out_method = _method(im, data["method"], space)
    name = data.get("name") or Path(str(doc.source)).stem
    out: dict[str, Any] = {"name": sweep_name(str(name))}
    if data.get("description"):
        out["description"] = str(data["description"])
    out["method"] = out_method
    out["objective"], target = _metric(im, data.get("metric"))
    trials = _trials(im, data.get("run_cap"), out_method, space)
    if trials is not None:
        out["trials"] = trials
    pruner = _early_terminate(im, data.get("early_terminate"))
    if pruner:
        out["pruner"] = pruner
    trial: dict[str, Any] = {"command": _command(im, data, space)}
    if space.fixed:
        trial["fixed"] = space.fixed
    trial["metrics"] = {"wandb": _config_keys(space)}
    out["trial"] = trial
    if not space.params:
        raise im.err(("parameters",), "every parameter is a constant: nothing to search")
    out["parameters"] = space.params
    if target is not None:
        out["stop"] = {"value": target}
    _unmapped_keys(im, data)
    return out, im.notes


def _config_keys(space: _Space) -> dict[str, str] | bool:
    """``trial.metrics.wandb``: the W&B config key of each parameter sweeper renamed (true when
    none is): the program's ``wandb.config`` holds what W&B's agent would put there."""
    renamed = {name: full for name, full in space.original.items() if name != full}
    return renamed or True


def _check_config(im: Importer, data: Any) -> None:
    """One error line unless ``data`` is a W&B sweep config with a method sweeper has."""
    if isinstance(data, dict) and data.get("kind") == "Experiment":
        raise im.err((), "not a W&B sweep config: this is a Katib Experiment (use `sweeper "
                         "import katib`)")
    if not isinstance(data, dict) or not isinstance(data.get("parameters"), dict) or \
            "method" not in data:
        raise im.err((), "not a W&B sweep config (expected a mapping with method and "
                         "parameters)")
    if data["method"] not in _METHODS:
        raise im.err(("method",), f"expected grid, random or bayes, got {data['method']!r}")


def _method(im: Importer, method: str, space: _Space) -> str:
    """sweeper's method for W&B's; a grid over a continuous distribution becomes random."""
    out = _METHODS[method]
    if out == "grid" and any(p.get("type") == "float" and "values" not in p and
                             "step" not in p for p in space.params.values()):
        im.note("method", "grid over a continuous distribution (W&B runs it forever): "
                          "sweeper's grid needs finite parameters, substituted method random")
        return "random"
    return out


def _unmapped_keys(im: Importer, data: dict[str, Any]) -> None:
    for key, what in _IGNORED_KEYS.items():
        if key in data:
            im.note(key, f"{what} has no sweeper counterpart: dropped")
    for key in data:
        if key not in _KNOWN_KEYS:
            im.note(str(key), "not a documented sweep key: dropped")


def _metric(im: Importer, metric: Any) -> tuple[dict[str, Any], float | None]:
    if not isinstance(metric, dict) or not metric.get("name"):
        im.note("metric", "none given (W&B's grid and random need none): substituted "
                          "objective loss, minimize; set the metric the program prints")
        return {"metric": "loss", "direction": "minimize"}, None
    goal = metric.get("goal", "minimize")
    if goal not in ("minimize", "maximize"):
        raise im.err(("metric", "goal"), f"expected minimize or maximize, got {goal!r}")
    target = metric.get("target")
    value = float(number(im, target, ("metric", "target"))) if target is not None else None
    return {"metric": str(metric["name"]), "direction": goal}, value


def _trials(im: Importer, cap: Any, method: str, space: _Space) -> int | None:
    if method == "grid":
        from sweeper.importers.katib import grid_points

        size = grid_points(space.params)
        if isinstance(cap, int) and 0 < cap < size:
            im.note("run_cap", f"{cap} < the grid's {size} points: sweeper's grid runs its "
                               "first points in order (the last parameter varies fastest), so "
                               "the first parameters take few of their values; raise trials "
                               "or use method random")
            return cap
        return None
    if isinstance(cap, int) and cap > 0:
        return cap
    im.note("run_cap", f"not set (W&B runs until stopped): substituted trials: "
                       f"{_NO_TRIALS_DEFAULT}")
    return _NO_TRIALS_DEFAULT


def _parameters(im: Importer, params: dict[str, Any], path: Path_, prefix: str,
                space: _Space, method: str) -> None:
    for raw_name, p in params.items():
        where = (*path, raw_name)
        full = f"{prefix}{raw_name}"
        if not isinstance(p, dict):
            raise im.err(where, f"expected a mapping (values, value, distribution, min/max), "
                                f"got {p!r}")
        if "parameters" in p:  # nested: W&B passes it as a dict; flattened here
            im.note(f"parameters.{full}", f"nested parameters flattened to "
                                          f"{param_name(full)}_* (names joined by _)")
            _parameters(im, p["parameters"], (*where, "parameters"), f"{full}.", space, method)
            continue
        name = param_name(full)
        if name != full and "parameters" not in p:
            im.note(f"parameters.{full}", f"renamed {name} (sweeper names are identifiers); "
                                          f"{_passed_as(space.command, full)}")
        space.original[name] = full
        mapped = _parameter(im, p, where, full)
        if isinstance(mapped, _Fixed):
            space.fixed[name] = mapped.value
            space.original[name] = full
            continue
        if mapped.get("choices") and all(isinstance(c, bool) for c in mapped["choices"]):
            space.booleans.add(name)
        space.params[name] = mapped


@dataclass(frozen=True)
class _Fixed:
    value: Any


def _values(im: Importer, values: Any, where: Path_, full: str) -> dict[str, Any]:
    if not isinstance(values, list) or not values:
        raise im.err((*where, "values"), "expected a non-empty list")
    if any(is_number_text(v) for v in values) and all(
            is_number_text(v) or isinstance(v, (int, float)) for v in values):
        im.note(f"parameters.{full}.values", "numbers written like 1e-5 are strings in YAML "
                                             "1.1: read as numbers")
        values = [number(im, v, (*where, "values", k)) for k, v in enumerate(values)]
    if all(_is_int(v) for v in values):
        return {"type": "int", "values": values}
    if all(_is_int(v) or isinstance(v, float) for v in values):
        return {"type": "float", "values": [float(v) for v in values]}
    return {"type": "categorical", "choices": values}


def _is_int(v: Any) -> bool:
    """An int that is not a bool (YAML's true/false are bools, and bools are ints)."""
    return isinstance(v, int) and not isinstance(v, bool)


def _parameter(im: Importer, p: dict[str, Any], where: Path_,
               full: str) -> dict[str, Any] | _Fixed:
    dist = p.get("distribution")
    if dist == "constant" or (dist is None and "value" in p):
        return _Fixed(p.get("value"))
    if dist == "categorical" or (dist is None and "values" in p):
        if "probabilities" in p:
            im.note(f"parameters.{full}.probabilities", "Optuna has no weighted categorical: "
                                                        "every value is equally likely")
        return _values(im, p.get("values"), where, full)
    if dist in _NORMALS:
        return _normal(im, p, where, full, dist)
    if "min" not in p or "max" not in p:
        raise im.err(where, "expected values, value, or min and max")
    if dist is None:
        dist = "int_uniform" if _is_int(p["min"]) and _is_int(p["max"]) else "uniform"
    return _range(im, p, where, full, dist)


#: W&B's normal distributions: a mean and a standard deviation, no bounds needed.
_NORMALS = ("normal", "q_normal", "log_normal", "q_log_normal")


def _bounds(im: Importer, p: dict[str, Any], where: Path_, full: str) -> tuple[float, float]:
    for k in ("min", "max"):
        if is_number_text(p[k]):
            im.note(f"parameters.{full}.{k}", f"{p[k]!r} is a string in YAML 1.1: read as a "
                                              "number")
    return float(number(im, p["min"], (*where, "min"))), \
        float(number(im, p["max"], (*where, "max")))


def _range(im: Importer, p: dict[str, Any], where: Path_, full: str,
           dist: str) -> dict[str, Any]:
    low, high = _bounds(im, p, where, full)
    if dist == "int_uniform":
        return {"type": "int", "low": int(low), "high": int(high)}
    if dist == "uniform":
        return {"type": "float", "low": low, "high": high}
    if dist == "q_uniform":
        return quantised(im, p, where, full, dist, low, high, log=False)
    if dist in ("log_uniform", "q_log_uniform", "inv_log_uniform"):
        if dist == "inv_log_uniform":  # log(1/X) uniform in [min, max]
            low, high = math.exp(-high), math.exp(-low)
        else:  # W&B's exponent form: X in [e^min, e^max]
            low, high = math.exp(low), math.exp(high)
    elif dist not in ("log_uniform_values", "q_log_uniform_values", "inv_log_uniform_values"):
        raise im.err((*where, "distribution"), f"unknown W&B distribution {dist!r}")
    if dist.startswith("q_"):
        return quantised(im, p, where, full, dist, low, high, log=True)
    return {"type": "float", "low": low, "high": high, "log": True}


def _normal(im: Importer, p: dict[str, Any], where: Path_, full: str,
            dist: str) -> dict[str, Any]:
    mu = float(number(im, p.get("mu", 0), (*where, "mu")))
    sigma = float(number(im, p.get("sigma", 1), (*where, "sigma")))
    low, high = mu - _SIGMAS * sigma, mu + _SIGMAS * sigma
    log = dist in ("log_normal", "q_log_normal")
    if log:
        low, high = math.exp(low), math.exp(high)
    im.note(f"parameters.{full}", f"{dist}(mu={mu:g}, sigma={sigma:g}) has no Optuna "
            f"counterpart: substituted {'log-' if log else ''}uniform over mu +- 3 sigma "
            f"[{low:.6g}, {high:.6g}]")
    if dist.startswith("q_"):
        return quantised(im, p, where, full, dist, low, high, log=log)
    out: dict[str, Any] = {"type": "float", "low": low, "high": high}
    if log:
        out["log"] = True
    return out


def _early_terminate(im: Importer, et: Any) -> dict[str, Any] | None:
    """W&B's hyperband early termination as Optuna's SuccessiveHalvingPruner: W&B checks every
    run at the same brackets (``min_iter * eta**k``, or ``max_iter / eta**k`` for k = s..1)
    and stops the runs below the top 1/eta there; that is successive halving with rungs at
    those steps (``min_early_stopping_rate: 0``). Optuna's HyperbandPruner would instead
    spread the trials over several such brackets with different first rungs."""
    if et is None:
        return None
    if not isinstance(et, dict) or et.get("type") != "hyperband":
        im.note("early_terminate", f"{et!r}: only hyperband is documented; not mapped")
        return None
    eta = int(number(im, et.get("eta", 3), ("early_terminate", "eta"), integer=True))
    pruner: dict[str, Any] = {"type": "successive_halving", "reduction_factor": eta,
                              "min_early_stopping_rate": 0}
    if et.get("min_iter") is not None:
        pruner["min_resource"] = int(number(im, et["min_iter"], ("early_terminate", "min_iter"),
                                            integer=True))
    elif et.get("max_iter") is not None:
        top = int(number(im, et["max_iter"], ("early_terminate", "max_iter"), integer=True))
        brackets = int(number(im, et.get("s", 0), ("early_terminate", "s"), integer=True))
        pruner["min_resource"] = max(1, round(top / eta ** max(brackets, 1)))
    if et.get("strict"):
        im.note("early_terminate.strict", "W&B's strict mode (comparing only with runs that "
                                          "reached the bracket) has no counterpart: Optuna's "
                                          "successive halving compares with every trial that "
                                          "reported the rung")
    return pruner


def _command(im: Importer, data: dict[str, Any], space: _Space) -> list[str]:
    command = data.get("command", _DEFAULT_COMMAND)
    if not isinstance(command, list) or not command:
        raise im.err(("command",), "expected a list of strings")
    out: list[str] = []
    for token in map(str, command):
        out += _token(im, token, data.get("program"), space)
    if not out:
        raise im.err(("command",), "the command is empty once W&B's macros are mapped")
    return out


#: W&B's macros that stand for the parameters (``_args``).
_ARGS_MACROS = ("${args}", "${args_no_boolean_flags}", "${args_no_hyphens}", "${args_json}",
                "${args_json_file}")


def _token(im: Importer, token: str, program: Any, space: _Space) -> list[str]:
    """One token of W&B's command as argv items (none for a macro sweeper has no use for)."""
    if token == "${env}":
        return []  # /usr/bin/env: sweeper runs the argv directly, with the environment
    if token == "${interpreter}":
        return ["python"]
    if token == "${program}":
        if not program:
            raise im.err(("program",), "the command uses ${program} but program is not set")
        return [escape_braces(str(program))]
    if token in _ARGS_MACROS:
        return _args(im, token, space)
    if token.startswith("${envvar:"):
        im.note("command", f"{token} dropped: sweeper runs no shell; the program inherits "
                           "the environment")
        return []
    if "${" in token:
        im.note("command", f"{token!r}: W&B macros inside an argument are not expanded "
                           "(sweeper runs no shell): passed as written")
    return [escape_braces(token)]


def _args(im: Importer, token: str, space: _Space) -> list[str]:
    """``${args}`` and its kin: every parameter and fixed value, as W&B passes them."""
    names = [*space.params, *space.fixed]
    if token in ("${args_json}", "${args_json_file}"):
        env = "$SWEEPER_PARAMS" if token == "${args_json}" else "$SWEEPER_PARAMS_FILE"
        im.note("command", f"{token} dropped: the program can read {env} (the parameters "
                           "as JSON) instead")
        return []
    if token == "${args_no_hyphens}":
        return [f"{escape_braces(space.original[n])}={{{n}}}" for n in names]
    if token.endswith("flags}") and space.booleans:
        im.note("command", "${args_no_boolean_flags}: boolean parameters are passed "
                           "as --name=True / --name=False, not as bare flags")
    return [f"--{escape_braces(space.original[n])}={{{n}}}" for n in names]
