"""What the command modules share: SweeperError -> one line and an exit code, the common
options, loading a spec file, opening a stored sweep, the Kubernetes client factory."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sweeper.errors import SpecError, SweeperError

logger = logging.getLogger("sweeper")
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
format_option = click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]),
                             default="table", show_default=True, help="Output format.")


def _load(path: str, *, check_entrypoint: bool) -> Any:
    from sweeper.spec import load_spec

    spec = load_spec(path)
    if check_entrypoint and spec.trial.entrypoint:
        from sweeper.entrypoint import load_entrypoint

        load_entrypoint(spec.trial.entrypoint, source=spec.source)
    if check_entrypoint and spec.trial.command:
        import shutil

        exe = spec.trial.command[0]
        if "{" not in exe and shutil.which(exe) is None and not Path(exe).exists():
            raise SpecError(f"command {exe!r} not found on PATH", source=spec.source,
                            field="trial.command")
    return spec


def _open_sweep(name: str, storage: str | None) -> tuple[Any, str]:
    from sweeper.study import load_sweep, open_storage, resolve_storage_url

    url = resolve_storage_url(storage)
    return load_sweep(open_storage(url), name), url


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
