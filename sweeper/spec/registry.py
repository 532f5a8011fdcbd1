"""The one map from spec names to Optuna classes: pruner types and sampler methods.

The validator checks a spec's ``pruner:`` and ``sampler:`` options by building exactly what the
trial runner will build from them, so a spec that validates is one the runner can start. Optuna
is imported only when a class is needed (it is slow to import, and most of sweeper's commands
never touch a sampler).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

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
#: Method -> class name in ``optuna.samplers``. Grid and random sets are enqueued as fixed
#: params, which any sampler returns; a seeded RandomSampler covers anything left to sample.
_SAMPLER_CLASSES = {"grid": "RandomSampler", "random": "RandomSampler", "tpe": "TPESampler"}
#: What sweeper sets for TPE unless the spec says otherwise: ``constant_liar`` explicitly
#: because its default differs between Optuna 4 (False) and 5 (True), and parallel runners
#: need it; ``multivariate`` because sweep parameters interact.
TPE_DEFAULTS: Mapping[str, Any] = {"constant_liar": True, "multivariate": True}
#: TPE keywords a spec may not set: the seed is per index, the others take callables.
TPE_RESERVED = frozenset({"seed", "gamma", "weights", "categorical_distance_func",
                          "constraints_func"})


def pruner_class(ptype: str) -> type[BasePruner]:
    """The Optuna class of a pruner type (KeyError for a name not in ``PRUNERS``)."""
    import optuna.pruners

    cls: type[BasePruner] = getattr(optuna.pruners, _PRUNER_CLASSES[ptype])
    return cls


def sampler_class(method: str) -> type[BaseSampler]:
    """The Optuna class a method samples with (KeyError for an unknown method)."""
    import optuna.samplers

    cls: type[BaseSampler] = getattr(optuna.samplers, _SAMPLER_CLASSES[method])
    return cls


def build_pruner(ptype: str, options: Mapping[str, Any]) -> BasePruner:
    return pruner_class(ptype)(**dict(options))


def build_sampler(method: str, options: Mapping[str, Any], seed: int | None) -> BaseSampler:
    defaults = TPE_DEFAULTS if method == "tpe" else {}
    factory: Callable[..., BaseSampler] = sampler_class(method)  # every one takes a seed
    return factory(seed=seed, **{**defaults, **options})


def make_pruner(spec: SweepSpec) -> BasePruner:
    return build_pruner(spec.pruner.type, spec.pruner.options)


def make_sampler(spec: SweepSpec, index: int) -> BaseSampler:
    """Seeded per index: the same seed everywhere would make parallel TPE runners propose
    identical start points."""
    from sweeper.space import index_seed  # lazy: sweeper.space imports this package

    return build_sampler(spec.method, spec.sampler, index_seed(spec.seed, index))


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
