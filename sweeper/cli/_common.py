"""What the command modules share: SweeperError -> one line and an exit code, the common
options, loading a spec file, a NAME argument (a sweep name or its spec file) and opening the
sweep it names without creating anything, the Kubernetes client factory."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import click

from sweeper.cli._group import storage_wait_s
from sweeper.errors import SweeperError

logger = logging.getLogger("sweeper")
#: The local backend's log directory (`run --log-dir`); each sweep logs under NAME-UID8/.
DEFAULT_LOG_DIR = ".sweeper/logs"
F = TypeVar("F", bound=Callable[..., Any])


def _errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SweeperError as e:
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                logger.exception("details")
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)

    return wrapper  # type: ignore[return-value]


storage_option = click.option(
    "--storage", metavar="URL",
    help="Study storage: sqlite:///file.db or postgresql://user:pw@host/db "
         "(default: $SWEEPER_STORAGE, then the spec's storage:, then sqlite:///sweeps.db).")
set_option = click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Change the spec before it is validated: a dotted key and a YAML value, e.g. "
         "--set trial.fixed.epochs=1 --set parallelism=4 (repeatable).")


def _load(path: str, *, check_entrypoint: bool, overrides: tuple[str, ...] = (),
          image_paths: bool = False) -> Any:
    """The spec at ``path``; ``check_entrypoint``: its entrypoint imports and its command's
    program and script exist here, unless ``image_paths`` and the spec names the image its
    trials run in (the command's paths are then the image's)."""
    from sweeper.spec import load_spec
    from sweeper.spec.paths import named_image

    spec = load_spec(path, overrides)
    if check_entrypoint and spec.trial.entrypoint:
        from sweeper.entrypoint import load_entrypoint

        load_entrypoint(spec.trial.entrypoint, source=spec.source, base_dir=spec.base_dir)
    if check_entrypoint and spec.trial.command and \
            not (image_paths and named_image(spec) is not None):
        from sweeper.spec.paths import check_command

        check_command(spec)
    return spec


name_storage_option = click.option(
    "--storage", metavar="URL",
    help="Study storage: sqlite:///file.db or postgresql://user:pw@host/db (default: "
         "$SWEEPER_STORAGE, then the storage: of a spec file given as NAME, then "
         "sqlite:///sweeps.db). Never created: a storage that does not exist is an error.")


@dataclass(frozen=True)
class _Target:
    """What a NAME argument names: a sweep name, or a spec file (its name and storage:)."""

    name: str
    url: str
    spec: Any | None = None


def _target(name_or_spec: str, storage: str | None) -> _Target:
    """NAME or a spec file in its place: an argument ending in .yaml/.yml is a spec file (a
    sweep name, a DNS label, never has a dot), read for its name and storage:."""
    from sweeper.study.urls import resolve_storage_url

    if name_or_spec.endswith((".yaml", ".yml")):
        spec = _load(name_or_spec, check_entrypoint=False)
        return _Target(spec.name, resolve_storage_url(storage, spec), spec)
    return _Target(name_or_spec, resolve_storage_url(storage))


def _open(url: str, *, create: bool = True) -> Any:
    """The storage at ``url``, waiting ``--storage-wait`` for one that is unavailable (a line
    on stderr while it waits; exit code 75 after that); permanent errors fail at once."""
    from sweeper.study import open_storage

    return open_storage(url, create=create, connect_deadline_s=storage_wait_s())


def _open_existing(url: str, name: str | None = None) -> Any:
    """The storage at ``url`` opened without creating anything (commands that only read, and
    delete); a storage that does not exist is "no sweep named NAME" with the reason."""
    from sweeper.errors import StorageMissingError, StudyNotFoundError

    try:
        return _open(url, create=False)
    except StorageMissingError as e:
        if name is None:
            raise
        raise StudyNotFoundError(f"no sweep named {name!r}: {e}") from None


def _load_target(target: _Target) -> Any:
    """The stored sweep ``target`` names; not found names the storage and what it holds."""
    from sweeper.errors import StudyNotFoundError
    from sweeper.study import load_sweep

    store = _open_existing(target.url, target.name)
    try:
        sweep = load_sweep(store, target.name)
    except StudyNotFoundError as e:
        raise StudyNotFoundError(_not_found(store, target) or str(e)) from None
    if target.spec is not None and target.spec.base_dir is not None:
        # The file at hand says where its relative paths start (resume from another place).
        sweep = replace(sweep, spec=replace(sweep.spec, base_dir=target.spec.base_dir))
    return sweep


#: Sweep names a "not found" message lists before it says how many more there are.
_NAMES_SHOWN = 10


def _not_found(store: Any, target: _Target) -> str | None:
    """"no sweep named X in STORAGE" and what is there; None if a study of that name exists
    (the caller's own message then says what is wrong with it)."""
    import difflib

    from sweeper.study.urls import redact

    sweeps, others = store.study_names()
    if target.name in sweeps or target.name in others:
        return None
    where = f"no sweep named {target.name!r} in {redact(target.url)}"
    close = difflib.get_close_matches(target.name, sweeps, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    if not sweeps:
        other = f" ({len(others)} other Optuna stud{'y' if len(others) == 1 else 'ies'})" \
            if others else ""
        return f"{where}: it has no sweeps{other}"
    shown = ", ".join(sweeps[:_NAMES_SHOWN])
    more = f", ... ({len(sweeps) - _NAMES_SHOWN} more: sweeper list)" \
        if len(sweeps) > _NAMES_SHOWN else ""
    return f"{where}; {hint}sweeps there: {shown}{more}"


def _open_sweep(name_or_spec: str, storage: str | None) -> tuple[Any, str]:
    """The stored sweep NAME (or the sweep of a spec file) and its storage URL."""
    target = _target(name_or_spec, storage)
    return _load_target(target), target.url


def _job_options(fn: F) -> F:
    """Overrides of the spec's kubernetes: section (render, run, resume)."""
    for option in reversed([
        click.option("--image", metavar="IMAGE", help="Kubernetes: trial-runner image "
                     "(default: the spec's kubernetes.image)."),
        click.option("--namespace", "-n", metavar="NS",
                     help="Kubernetes: namespace (default: the spec's, else sweeper)."),
        click.option("--storage-secret", metavar="NAME",
                     help="Kubernetes: Secret whose key (kubernetes.storage_secret_key, "
                          "default url) holds the storage URL the pods use."),
        click.option("--storage-proxy", metavar="HOST:PORT",
                     help="Kubernetes: the pods reach the study through this `sweeper proxy` "
                          "(kubernetes.storage_proxy) and get no database Secret."),
    ]):
        fn = option(fn)
    return fn


def _cluster_options(fn: F) -> F:
    """How to reach the cluster (default: $KUBECONFIG or ~/.kube/config, else in-cluster)."""
    fn = click.option("--context", metavar="NAME", help="Kubernetes: kubeconfig context.")(fn)
    return click.option("--kubeconfig", type=click.Path(dir_okay=False), metavar="PATH",
                        help="Kubernetes: kubeconfig file.")(fn)


def _clients(kubeconfig: str | None, context: str | None, timeout_s: float = 30.0) -> Any:
    from sweeper.backends.kubernetes import ClientFactory

    return ClientFactory(kubeconfig, context, request_timeout_s=timeout_s)


def _ranges_of(indexes: list[int]) -> str:
    out: list[str] = []
    for i in sorted(indexes):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = out[-1].split("-")[0] + f"-{i}"
        else:
            out.append(str(i))
    return ",".join(out)
