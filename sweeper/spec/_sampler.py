"""The ``method:`` and ``sampler:`` sections: which method can serve the spec (refused with the
reason when it cannot), its options checked against the Optuna class's signature by building
it through the runner's registry, and one warning line where Optuna would quietly sample some
parameters independently instead of with the method the spec names."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from sweeper.spec import registry
from sweeper.spec.checks import Checks, describe_types, kind_of, option_ok
from sweeper.spec.grid import grid_size_of, grid_values
from sweeper.spec.model import Objective, Parameter
from sweeper.spec.yamldoc import Path_

#: Values ``sampler: {qmc_type: ...}`` takes (what Optuna's QMCSampler and scipy share).
QMC_TYPES = ("sobol", "halton")
_MULTI = "nsga2, nsga3, tpe, gp, random, qmc or grid"
_SINGLE = "tpe, gp or cmaes"


def method_fits(v: Checks, method: str, objectives: tuple[Objective, ...]) -> None:
    """Refuse a method that cannot serve this many objectives, saying why and what can."""
    fits = registry.METHOD_INFO[method].objectives
    if fits == "multi" and len(objectives) < 2:
        raise v.err(("method",), f"{method} is a multi-objective method (it keeps a Pareto "
                                 "front): give objective a list of two or more {metric, "
                                 f"direction}}, or use {_SINGLE} for one objective")
    if fits == "single" and len(objectives) > 1:
        raise v.err(("method",), f"{method} optimises one objective only (Optuna's "
                                 f"{registry.METHOD_INFO[method].options_class} refuses "
                                 f"multi-objective studies): use {_MULTI}")


def sampler_options(v: Checks, value: Any, path: Path_, method: str,
                    conditional: bool) -> dict[str, Any]:
    """``sampler:``: keyword arguments of the method's Optuna sampler, checked by building it."""
    if value is None:
        return {}
    m = v.plain(v.mapping(value, path), path)
    if not m:
        return m
    cls = registry.options_class(method)
    if cls is None:
        raise v.err(path, f"sampler options do not apply to method {method}: its sets are "
                          "fixed by (seed, index)")
    v.mapping(m, path, sorted(registry.option_names(method)))
    class_options(v, m, path, cls)
    if m.get("n_ei_candidates", 1) < 1:
        raise v.err((*path, "n_ei_candidates"), f"must be >= 1, got {m['n_ei_candidates']}")
    if method == "qmc":
        v.choice(m.get("qmc_type", "sobol"), (*path, "qmc_type"), QMC_TYPES)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            options = m if method != "qmc" else {}
            if not registry.METHOD_INFO[method].planned:
                registry.build_sampler(method, options, seed=None, conditional=conditional)
            else:
                factory: Callable[..., Any] = cls
                factory(seed=0, **m)
    except (TypeError, ValueError, ImportError) as e:
        raise v.err(path, f"invalid {method} sampler options: {e}") from None
    return m


def class_options(v: Checks, m: Mapping[str, Any], path: Path_, cls: type) -> None:
    """Check keyword options (``sampler:``, ``pruner:``) against the types an Optuna class
    declares (a string where an int belongs would otherwise only fail inside a running trial)."""
    types = registry.option_types(cls)
    for k, x in m.items():
        want = types[k][0] if k in types else frozenset()
        if not option_ok(x, want):
            raise v.err((*path, k), f"expected {describe_types(want)}, got {kind_of(x)}")
        if isinstance(x, (int, float)) and not isinstance(x, bool) and x < 0:
            raise v.err((*path, k), f"must be >= 0, got {x}")


def sampler_warnings(v: Checks, method: str, options: dict[str, Any],
                     params: tuple[Parameter, ...], trials: int) -> list[str]:
    """One line each for what Optuna would do quietly: sample some parameters independently
    (at random) rather than with the method's model, or never get past its first phase."""
    out = _model_warnings(v, method, options, params)
    if method in ("nsga2", "nsga3"):
        population = options.get("population_size", 50)
        if population >= trials:
            out.append(_warn(v, ("trials",), f"{trials} trials do not fill one {method} "
                             f"generation (population_size {population}): every trial is "
                             "random; lower sampler.population_size or raise trials"))
    return out


def _model_warnings(v: Checks, method: str, options: dict[str, Any],
                    params: tuple[Parameter, ...]) -> list[str]:
    """The parameters the method's model leaves out (sampled independently at random)."""
    conditional = [p.name for p in params if p.when]
    path: Path_ = ("method",)
    if method == "cmaes":
        return _cmaes_warnings(v, params, conditional)
    if method in ("gp", "nsga2", "nsga3") and conditional:
        return [_warn(v, path, f"{method} samples the conditional parameters "
                      f"{_names(conditional)} independently at random (Optuna's "
                      f"{registry.METHOD_INFO[method].options_class} models only the "
                      "parameters every trial has); tpe models conditional spaces")]
    if method == "tpe" and conditional and options.get("group") is False \
            and options.get("multivariate", True):
        return [_warn(v, ("sampler", "group"), "multivariate TPE without group samples "
                      f"the conditional parameters {_names(conditional)} independently")]
    return []


def _cmaes_warnings(v: Checks, params: tuple[Parameter, ...], conditional: list[str]
                    ) -> list[str]:
    out = []
    categorical = [p.name for p in params if p.values is not None or p.choices is not None]
    fallback = list(dict.fromkeys(categorical + conditional))
    numeric = [p.name for p in params if p.name not in fallback]
    if fallback:
        out.append(_warn(v, ("method",), f"cmaes samples {_names(fallback)} independently at "
                         "random: Optuna's CMA-ES models only float and int ranges that "
                         "every trial has (categorical, values: and when: parameters fall "
                         "back); use tpe for such spaces"))
    if len(numeric) == 1:
        out.append(_warn(v, ("method",), f"cmaes needs two or more float/int parameters; with "
                         f"only {numeric[0]!r} Optuna samples it at random"))
    return out


def grid_warnings(v: Checks, params: tuple[Parameter, ...], trials: int) -> list[str]:
    """A grid cut short by ``trials`` runs its first points in order, the last parameter
    fastest: the first parameters never take most of their values. Say which."""
    size = grid_size_of(params)
    if trials >= size or any(p.when for p in params):
        return []
    short, stride = [], 1
    for p in reversed(params):
        n = len(grid_values(p))
        taken = min(n, -(-trials // stride))
        if taken < n:
            short.append(f"{p.name} takes {taken} of its {n} values")
        stride *= n
    return [_warn(v, ("trials",), f"{trials} trials < the grid's {size} points: the grid runs "
                  f"its first {trials} points in order (last parameter fastest), so "
                  f"{'; '.join(reversed(short))}; use method random or qmc to sample it")]


def _names(names: list[str]) -> str:
    return ", ".join(names)


def _warn(v: Checks, path: Path_, message: str) -> str:
    """``file:line: field: message``, the same shape as an error."""
    return v.err(path, message).render()
