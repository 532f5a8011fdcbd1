"""Finding what a command names: a spec file loaded and checked, a NAME argument (a sweep's
name or its spec file) resolved to a storage URL, and the stored sweep it names opened without
creating anything ("no sweep named X" says where it looked and what is there)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sweeper.app.options import StorageOptions
from sweeper.errors import StorageMissingError, StudyNotFoundError
from sweeper.spec import SweepSpec, load_spec
from sweeper.study import StudyStorage, Sweep, load_sweep, open_storage
from sweeper.study.urls import redact, resolve_storage_url

#: Sweep names a "not found" message lists before it says how many more there are.
NAMES_SHOWN = 10


def load_spec_file(path: str, *, check_entrypoint: bool, overrides: tuple[str, ...] = (),
                   image_paths: bool = False) -> SweepSpec:
    """The spec at ``path`` with ``overrides`` (``--set KEY=VALUE``) applied.

    ``check_entrypoint``: its entrypoint imports and its command's program and script exist
    here, unless ``image_paths`` and the spec names the image its trials run in (the
    command's paths are then the image's). Raises SpecError."""
    from sweeper.spec.paths import named_image

    spec = load_spec(path, overrides)
    if check_entrypoint and spec.trial.entrypoint:
        from sweeper.entrypoint import load_entrypoint

        fn = load_entrypoint(spec.trial.entrypoint, source=spec.source, base_dir=spec.base_dir)
        if spec.budget.steps is not None:
            _reports_steps(spec.trial.entrypoint, fn, path, overrides)
    if check_entrypoint and spec.trial.command and \
            not (image_paths and named_image(spec) is not None):
        from sweeper.spec.paths import check_command

        check_command(spec)
    return spec


def _reports_steps(entrypoint: str, fn: Callable[..., Any], path: str,
                   overrides: tuple[str, ...]) -> None:
    """A ``steps`` budget of an entrypoint that certainly reports no step is never spent:
    refused at ``budget.steps`` (undecided programs are left to the run-time rule)."""
    from sweeper.spec import field_error
    from sweeper.step_reports import silent_entrypoint

    why = silent_entrypoint(fn)
    if why is not None:
        raise field_error(path, ("budget", "steps"), f"{entrypoint} {why}, so the trials "
                          "report no steps and a steps budget is never spent: report steps, "
                          "or give the budget in gpu_hours or cpu_hours", overrides)


@dataclass(frozen=True)
class Target:
    """What a NAME argument names: a sweep name, or a spec file (its name and storage:), and
    the storage to find it in."""

    name: str
    url: str
    spec: SweepSpec | None = None
    wait_s: float = 0.0


def target(name_or_spec: str, storage: StorageOptions) -> Target:
    """NAME or a spec file in its place: an argument ending in .yaml/.yml is a spec file (a
    sweep name, a DNS label, never has a dot), read for its name and storage:."""
    if name_or_spec.endswith((".yaml", ".yml")):
        spec = load_spec_file(name_or_spec, check_entrypoint=False)
        return Target(spec.name, resolve_storage_url(storage.url, spec), spec, storage.wait_s)
    return Target(name_or_spec, resolve_storage_url(storage.url), None, storage.wait_s)


def open_at(url: str, wait_s: float, *, create: bool = True) -> StudyStorage:
    """The storage at ``url``, retrying one that is unavailable for ``wait_s`` seconds (a line
    on stderr while it waits; then StorageUnavailableError); permanent errors fail at once."""
    return open_storage(url, create=create, connect_deadline_s=wait_s)


def open_existing(url: str, wait_s: float, name: str | None = None) -> StudyStorage:
    """The storage at ``url`` opened without creating anything (commands that only read, and
    delete); a storage that does not exist is "no sweep named NAME" with the reason."""
    try:
        return open_at(url, wait_s, create=False)
    except StorageMissingError as e:
        if name is None:
            raise
        raise StudyNotFoundError(f"no sweep named {name!r}: {e}") from None


def load_target(found: Target) -> Sweep:
    """The stored sweep ``found`` names; not found names the storage and what it holds."""
    store = open_existing(found.url, found.wait_s, found.name)
    try:
        sweep = load_sweep(store, found.name)
    except StudyNotFoundError as e:
        raise StudyNotFoundError(not_found_message(store, found) or str(e)) from None
    if found.spec is not None and found.spec.base_dir is not None:
        # The file at hand says where its relative paths start (resume from another place).
        sweep = replace(sweep, spec=replace(sweep.spec, base_dir=found.spec.base_dir))
    return sweep


def open_sweep(name_or_spec: str, storage: StorageOptions) -> tuple[Sweep, str]:
    """The stored sweep NAME (or the sweep of a spec file) and its storage URL."""
    found = target(name_or_spec, storage)
    return load_target(found), found.url


def not_found_message(store: StudyStorage, found: Target) -> str | None:
    """"no sweep named X in STORAGE" and what is there; None if a study of that name exists
    (the caller's own message then says what is wrong with it)."""
    sweeps, others = store.study_names()
    if found.name in sweeps or found.name in others:
        return None
    where = f"no sweep named {found.name!r} in {redact(found.url)}"
    close = difflib.get_close_matches(found.name, sweeps, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    if not sweeps:
        other = f" ({len(others)} other Optuna stud{'y' if len(others) == 1 else 'ies'})" \
            if others else ""
        return f"{where}: it has no sweeps{other}"
    shown = ", ".join(sweeps[:NAMES_SHOWN])
    more = f", ... ({len(sweeps) - NAMES_SHOWN} more: sweeper list)" \
        if len(sweeps) > NAMES_SHOWN else ""
    return f"{where}; {hint}sweeps there: {shown}{more}"
