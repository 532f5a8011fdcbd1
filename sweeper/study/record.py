"""The sweep record: a study whose user attrs hold the normalised spec and its hash. Running
the same spec again resumes the study; raising ``trials`` grows it (the new indexes follow the
old ones, enqueued in the same locked transaction as the record); any other change under the
same name is refused (:mod:`.growth`). The store writes it (``IndexStore.create_or_resume``);
this module holds what a process keeps of it: the :class:`Sweep`."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import optuna

from sweeper._optuna_compat import reset_trials_cache
from sweeper.errors import SpecError, StudyNotFoundError
from sweeper.protocol import SPEC_ATTR, SPEC_DIR_ATTR, UID_ATTR, state_key
from sweeper.spec import SweepSpec, load_stored
from sweeper.study.values import IndexStatus

if TYPE_CHECKING:
    from sweeper.study.open import StudyStorage


@dataclass(frozen=True)
class Sweep:
    """A sweep as stored: the study plus its normalised spec."""

    storage: StudyStorage
    study_id: int
    spec: SweepSpec
    #: The number of indexes this launch grew the sweep from (None: it did not grow it).
    grown_from: int | None = field(default=None, compare=False)
    #: One Study per thread for runner_study(), keyed by thread id.
    _runner_studies: dict[int, optuna.Study] = field(default_factory=dict, compare=False,
                                                     repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @functools.cached_property
    def uid(self) -> str | None:
        """The sweep's identity (protocol.UID_ATTR); None for a study from before it."""
        uid = self.storage.get_study_user_attrs(self.study_id).get(UID_ATTR)
        return uid if isinstance(uid, str) else None

    @property
    def state_key(self) -> str:
        """Where this sweep's checkpoints and local logs live, under their roots."""
        return state_key(self.name, self.uid)

    def study(self, sampler: optuna.samplers.BaseSampler | None = None,
              pruner: optuna.pruners.BasePruner | None = None) -> optuna.Study:
        return optuna.load_study(study_name=self.name, storage=self.storage, sampler=sampler,
                                 pruner=pruner)

    def runner_study(self, sampler: optuna.samplers.BaseSampler,
                     pruner: optuna.pruners.BasePruner) -> optuna.Study:
        """The study for the next index this thread runs, with that index's sampler and pruner.
        A worker that runs many indexes keeps one Study, so its trial cache reads only what
        changed (a fresh Study per index made TPE and pruners reload every trial of the study
        per index) and the study is not looked up again."""
        key = threading.get_ident()
        study = self._runner_studies.get(key)
        if study is None:
            study = self._runner_studies[key] = self.study(sampler=sampler, pruner=pruner)
        else:
            study.sampler, study.pruner = sampler, pruner
            reset_trials_cache(study)  # re-read once per trial, as ask() does
        return study


@dataclass(frozen=True)
class InheritedSweep:
    """An open sweep handed to a worker forked from the process that opened it: the local
    backend builds it and passes it, as an argument, to the runner's entry function the forked
    child calls (``trial_runner.main.main(argv, inherited=...)``). The worker takes over this
    Sweep (the parent's storage object, the runner's study already loaded) instead of opening
    the storage and reading the sweep again, where it is the one it was told to open."""

    storage_url: str
    sweep: Sweep

    def sweep_for(self, storage_url: str, name: str) -> Sweep | None:
        """The sweep, if it is ``name`` on ``storage_url``; else None (open them as usual)."""
        if storage_url != self.storage_url or self.sweep.name != name:
            return None
        return self.sweep


def load_sweep(storage: StudyStorage, name: str) -> Sweep:
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        raise StudyNotFoundError(f"no sweep named {name!r} in this storage") from None
    attrs = storage.get_study_user_attrs(study_id)
    if SPEC_ATTR not in attrs:
        raise StudyNotFoundError(f"study {name!r} exists but was not created by sweeper")
    spec = load_stored(attrs[SPEC_ATTR], source=f"<study {name}>")
    base_dir = attrs.get(SPEC_DIR_ATTR)
    if isinstance(base_dir, str):
        spec = replace(spec, base_dir=base_dir)
    return Sweep(storage, study_id, spec)


def create_or_resume(storage: StudyStorage, spec: SweepSpec) -> tuple[Sweep, bool]:
    """Create the study and enqueue its plan, or resume it if this exact spec already ran:
    (sweep, created). The same spec with more ``trials`` grows the sweep
    (``sweep.grown_from`` says from how many). Any other difference under the same name
    raises SpecError, naming this spec's file, before anything is written."""
    try:
        got = storage.create_or_resume(spec)
    except SpecError as e:
        raise SpecError(e.message, source=spec.source, field=e.field) from None
    return Sweep(storage, got.study_id, spec, grown_from=got.grown_from), got.created


def unfinished_indexes(table: Iterable[IndexStatus]) -> list[int]:
    return [s.index for s in table if s.state not in ("COMPLETE", "PRUNED")]


def indexes_to_run(sweep: Sweep, *, created: bool) -> list[int]:
    """What a launch runs: every index of a sweep it has just created (nothing of it has run:
    no query needed), else the indexes without a finished trial."""
    if created:
        return list(range(sweep.spec.trials))
    table = sweep.storage.index_table(sweep.study_id, sweep.spec.index_count)
    if not sweep.spec.open_ended:
        return unfinished_indexes(table)
    # Open-ended: the unfinished indexes started so far, then fresh ones up to the ceiling
    # (the budget gate stops the sweep long before).
    return unfinished_indexes(table) + list(range(len(table), sweep.spec.trials))
