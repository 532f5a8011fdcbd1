"""What the command modules share: the one place that turns a SweeperError into one line and
an exit code (:func:`errors`), and the option decorators that build one options object each
(:func:`storage_options`: a :class:`~sweeper.app.options.StorageOptions`,
:func:`cluster_options`: a :class:`~sweeper.app.options.ClusterOptions`,
:func:`job_options`: a :class:`~sweeper.app.options.JobOverrides`)."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from sweeper.app.options import (
    DEFAULT_LOG_DIR,
    DEFAULT_STORAGE_WAIT_S,
    ClusterOptions,
    JobOverrides,
)
from sweeper.cli._group import group_options
from sweeper.errors import SweeperError

logger = logging.getLogger("sweeper")
F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["DEFAULT_LOG_DIR", "cluster_options", "errors", "job_options", "name_storage_option",
           "say", "set_option", "storage_option", "storage_options"]


def errors(fn: F) -> F:
    """The command's SweeperError as ``error: MESSAGE`` on stderr and its exit code (the
    traceback too with -vv)."""
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


def say(line: str) -> None:
    """A line about what a command does, on stderr."""
    click.echo(line, err=True)


def collect(name: str, build: Callable[..., Any], keys: tuple[str, ...]) -> Callable[[F], F]:
    """A decorator that replaces the parameters ``keys`` by one, ``name``, built from them."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs[name] = build(**{k: kwargs.pop(k) for k in keys})
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


RUN_STORAGE_HELP = (
    "Study storage: sqlite:///file.db or postgresql://user:pw@host/db "
    "(default: $SWEEPER_STORAGE, then the spec's storage:, then sqlite:///sweeps.db).")
NAME_STORAGE_HELP = (
    "Study storage: sqlite:///file.db or postgresql://user:pw@host/db (default: "
    "$SWEEPER_STORAGE, then the storage: of a spec file given as NAME, then "
    "sqlite:///sweeps.db). Never created: a storage that does not exist is an error.")

storage_option = click.option("--storage", metavar="URL", help=RUN_STORAGE_HELP)
name_storage_option = click.option("--storage", metavar="URL", help=NAME_STORAGE_HELP)


def storage_options(help_text: str = NAME_STORAGE_HELP,
                    default_wait_s: float = DEFAULT_STORAGE_WAIT_S) -> Callable[[F], F]:
    """``--storage URL`` and the group's ``--storage-wait`` (``default_wait_s`` when not
    given) as one ``storage`` parameter."""
    def decorate(fn: F) -> F:
        fn = collect("storage", lambda storage_url: group_options().storage(
            storage_url, default_wait_s), ("storage_url",))(fn)
        return click.option("--storage", "storage_url", metavar="URL", help=help_text)(fn)

    return decorate


set_option = click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Change the spec before it is validated: a dotted key and a YAML value, e.g. "
         "--set trial.fixed.epochs=1 --set parallelism=4 (repeatable).")


def job_options(fn: F) -> F:
    """Overrides of the spec's kubernetes: section (render, run, resume), as one ``job``
    parameter."""
    fn = collect("job", JobOverrides,
                  ("image", "namespace", "storage_secret", "storage_proxy"))(fn)
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


def _kube_flags(fn: F) -> F:
    fn = click.option("--context", metavar="NAME", help="Kubernetes: kubeconfig context.")(fn)
    return click.option("--kubeconfig", type=click.Path(dir_okay=False), metavar="PATH",
                        help="Kubernetes: kubeconfig file.")(fn)


def cluster_options(namespace_help: str | None = None) -> Callable[[F], F]:
    """How to reach the cluster (default: $KUBECONFIG or ~/.kube/config, else in-cluster),
    and with ``namespace_help`` a ``--namespace``, as one ``cluster`` parameter."""
    def decorate(fn: F) -> F:
        if namespace_help is None:
            fn = collect("cluster", lambda kubeconfig, context: ClusterOptions(
                kubeconfig, context), ("kubeconfig", "context"))(fn)
            return _kube_flags(fn)
        fn = collect("cluster", ClusterOptions, ("kubeconfig", "context", "namespace"))(fn)
        fn = _kube_flags(fn)
        return click.option("--namespace", "-n", metavar="NS", help=namespace_help)(fn)

    return decorate
