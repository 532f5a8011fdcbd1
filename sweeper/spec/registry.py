"""The one map from spec names to Optuna classes: pruner types and sampler methods.

The validator checks a spec's ``pruner:`` and ``sampler:`` options by building exactly what the
trial runner will build from them, so a spec that validates is one the runner can start. Optuna
is imported only when a class is needed (it is slow to import, and most of sweeper's commands
never touch a sampler).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sweeper.spec.seeds import index_seed

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.samplers import BaseSampler

    from sweeper.spec.model import SweepSpec

#: Pruner type (``pruner: {type: ...}``) -> class name in ``optuna.pruners``.
_PRUNER_CLASSES = {
    "none": "NopPruner",
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "hyperband": "HyperbandPruner",
    "successive_halving": "SuccessiveHalvingPruner",
}
PRUNERS = tuple(_PRUNER_CLASSES)


@dataclass(frozen=True)
class MethodInfo:
    """What a ``method:`` is in Optuna's terms."""

    #: The class in ``optuna.samplers`` whose keyword arguments ``sampler:`` takes (checked
    #: against its signature), or None when the method takes no options.
    options_class: str | None
    #: The class a runner samples with, in ``optuna.samplers`` or, for a name in
    #: :data:`OWN_SAMPLERS`, sweeper's subclass of one. Planned sets are enqueued as fixed
    #: params, which any sampler returns; a seeded RandomSampler covers anything left to sample.
    runner_class: str
    #: Sets are a pure function of (spec, index), enqueued up front.
    planned: bool
    #: "any", "single" (one objective only) or "multi" (two or more objectives).
    objectives: str = "any"
    #: What sweeper sets unless the spec says otherwise.
    defaults: Mapping[str, Any] = field(default_factory=dict)
    #: For planned methods with options: the only keywords that mean something (sweeper plans
    #: the sets itself, so the class's other keywords would be silently ignored).
    only: frozenset[str] | None = None


#: Method -> how it samples. The validator checks ``sampler:`` through this map and the runner
#: builds its sampler from it, so a spec that validates is one the runner can start.
METHOD_INFO: Mapping[str, MethodInfo] = {
    "grid": MethodInfo(None, "RandomSampler", planned=True),
    "random": MethodInfo(None, "RandomSampler", planned=True),
    # Sobol (or Halton) points computed by sweeper.qmc from (seed, index), enqueued up front.
    "qmc": MethodInfo("QMCSampler", "RandomSampler", planned=True,
                      only=frozenset({"qmc_type", "scramble"})),
    # constant_liar explicitly because its default differs between Optuna 4 (False) and 5
    # (True), and parallel runners need it; multivariate because sweep parameters interact.
    "tpe": MethodInfo("TPESampler", "TPESampler", planned=False,
                      defaults={"constant_liar": True, "multivariate": True}),
    # GPSampler, its running trials penalised locally instead of fantasised (issue 29;
    # sweeper._optuna_compat._gp): the same options, the same sequential proposals.
    "gp": MethodInfo("GPSampler", "LocalPenaltyGPSampler", planned=False),
    "cmaes": MethodInfo("CmaEsSampler", "CmaEsSampler", planned=False, objectives="single"),
    "nsga2": MethodInfo("NSGAIISampler", "NSGAIISampler", planned=False, objectives="multi"),
    "nsga3": MethodInfo("NSGAIIISampler", "NSGAIIISampler", planned=False, objectives="multi"),
}
#: Methods whose runners' asks wait for the asks of runners that started before them: GP's
#: ask takes seconds, and runners asking at once would not see each other's pending points
#: (issue 29; docs/parallel.md).
ASKS_IN_ORDER = frozenset({"gp"})
#: Runner classes that are sweeper's own subclasses of Optuna's (in ``sweeper._optuna_compat``).
OWN_SAMPLERS = frozenset({"LocalPenaltyGPSampler"})
#: Added for a conditional space: TPE's ``group`` decomposes the search space by which
#: parameters occur together, so the multivariate model sees each branch of a condition whole
#: (without it, conditional parameters would be sampled independently).
TPE_CONDITIONAL_DEFAULTS: Mapping[str, Any] = {"group": True}
#: Keyword annotations a spec can write in YAML; others (callables, arrays) cannot be options.
_SCALAR_TYPES = frozenset({"int", "float", "bool", "str", "None"})
#: Never an option: the seed is derived per index from the spec's ``seed``.
_RESERVED = frozenset({"seed"})


def pruner_class(ptype: str) -> type[BasePruner]:
    """The Optuna class of a pruner type (KeyError for a name not in ``PRUNERS``)."""
    import optuna.pruners

    cls: type[BasePruner] = getattr(optuna.pruners, _PRUNER_CLASSES[ptype])
    return cls


def sampler_class(method: str) -> type[BaseSampler]:
    """The class a method's runners sample with (KeyError for an unknown method)."""
    import importlib

    name = METHOD_INFO[method].runner_class
    home = "sweeper._optuna_compat" if name in OWN_SAMPLERS else "optuna.samplers"
    cls: type[BaseSampler] = getattr(importlib.import_module(home), name)
    return cls


def options_class(method: str) -> type[BaseSampler] | None:
    """The Optuna class whose keyword arguments the method's ``sampler:`` options are (None:
    the method takes none)."""
    import optuna.samplers

    name = METHOD_INFO[method].options_class
    return None if name is None else getattr(optuna.samplers, name)


def option_names(method: str) -> set[str]:
    """The ``sampler:`` keys a method accepts: its class's keywords that YAML can express."""
    cls = options_class(method)
    if cls is None:
        return set()
    only = METHOD_INFO[method].only
    names = {n for n, (types, _) in option_types(cls).items()
             if types and types <= _SCALAR_TYPES} - _RESERVED
    return names & only if only is not None else names


def build_pruner(ptype: str, options: Mapping[str, Any]) -> BasePruner:
    return pruner_class(ptype)(**dict(options))


def sampler_defaults(method: str, conditional: bool = False) -> dict[str, Any]:
    """What sweeper passes unless the spec's ``sampler:`` says otherwise."""
    defaults = dict(METHOD_INFO[method].defaults)
    if method == "tpe" and conditional:
        defaults.update(TPE_CONDITIONAL_DEFAULTS)
    return defaults


def build_sampler(method: str, options: Mapping[str, Any], seed: int | None,
                  conditional: bool = False) -> BaseSampler:
    factory: Callable[..., BaseSampler] = sampler_class(method)  # every one takes a seed
    if METHOD_INFO[method].planned:
        return factory(seed=seed)  # the options shaped the plan, not the runner's sampler
    return factory(seed=seed, **{**sampler_defaults(method, conditional), **options})


def make_pruner(spec: SweepSpec) -> BasePruner:
    return build_pruner(spec.pruner.type, spec.pruner.options)


def make_sampler(spec: SweepSpec, index: int) -> BaseSampler:
    """Seeded per index: the same seed everywhere would make parallel TPE runners propose
    identical start points. Under promotion ASHA an adaptive method sees each paused trial
    as PRUNED at its rung (``sweeper.samplers.PausedAsPruned``), as it sees a trial a
    stopping pruner stopped. A method in :data:`ASKS_IN_ORDER` samples after the runners that
    started before it (``sweeper.samplers.AfterEarlierAsks``)."""
    from sweeper._optuna_compat import experimental_on_purpose

    with experimental_on_purpose():  # nsga3, a conditional tpe, ...: chosen, not news
        sampler = build_sampler(spec.method, spec.sampler, index_seed(spec.seed, index),
                                conditional=spec.is_conditional)
    if spec.is_adaptive and spec.scheduler.type == "asha":
        from sweeper.samplers import PausedAsPruned

        sampler = PausedAsPruned(sampler)
    if spec.method in ASKS_IN_ORDER and spec.parallelism > 1:
        from sweeper.samplers import AfterEarlierAsks

        return AfterEarlierAsks(sampler)
    return sampler


def keyword_names(cls: type) -> set[str]:
    """The keyword arguments ``cls`` accepts: the option names a spec may give it."""
    return {n for n, p in inspect.signature(cls).parameters.items()
            if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def option_types(cls: type) -> dict[str, tuple[frozenset[str], bool]]:
    """name -> (scalar type names its annotation allows, required) for ``cls``'s keywords."""
    out = {}
    for n, p in inspect.signature(cls).parameters.items():
        if n == "self" or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        ann = p.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
        out[n] = (frozenset(t.strip() for t in text.split("|")), p.default is p.empty)
    return out
