"""``sweeper proxy``'s security options (:class:`~sweeper.app.proxy.SecurityOptions`): who
may call it (``--auth``), TLS, limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sweeper.app.proxy import SecurityOptions
from sweeper.cli._common import collect

F = TypeVar("F", bound=Callable[..., Any])
KEYS = ("auth", "audience", "namespace", "kubeconfig", "auth_cache_ttl", "tls_cert", "tls_key",
        "insecure_plaintext", "max_message_mb", "rate", "burst")


def security_options(fn: F) -> F:
    """The security options as one ``security`` parameter."""
    fn = collect("security", SecurityOptions, KEYS)(fn)
    options = [
        click.option("--auth", type=click.Choice(["kubernetes", "secret", "none"]),
                     help="Who may call: kubernetes (every call carries a ServiceAccount "
                          "token for --audience, checked with TokenReview; trial pods reach "
                          "only their own sweep, others need the admin role), secret (the "
                          "token in $SWEEPER_PROXY_SECRET), none (anyone who reaches the port: "
                          "a warning). Default: kubernetes; on a loopback --host a random "
                          "secret in a file only this user can read, in the user's runtime "
                          "directory, which sweeper commands and runners of this user find "
                          "there for this address."),
        click.option("--audience", default="sweeper-proxy", show_default=True,
                     help="The token audience the proxy accepts."),
        click.option("--namespace", metavar="NS",
                     help="The namespace whose trial pods may call (default: this pod's, "
                          "else sweeper); the admin role is checked there."),
        click.option("--kubeconfig", type=click.Path(dir_okay=False), metavar="PATH",
                     help="For TokenReview and SubjectAccessReview (default: $KUBECONFIG, "
                          "~/.kube/config, then the pod's ServiceAccount)."),
        click.option("--auth-cache-ttl", type=click.FloatRange(min=0), default=60.0,
                     show_default=True,
                     help="Seconds a reviewed token is trusted before it is reviewed again."),
        click.option("--tls-cert", type=click.Path(dir_okay=False), metavar="PEM",
                     help="Serve TLS with this certificate chain (and --tls-key)."),
        click.option("--tls-key", type=click.Path(dir_okay=False), metavar="PEM"),
        click.option("--insecure-plaintext", is_flag=True,
                     help="Serve plaintext on a non-loopback --host (only behind a network "
                          "that encrypts, e.g. a service mesh)."),
        click.option("--max-message-mb", type=click.FloatRange(min=0.001), default=16.0,
                     show_default=True, help="The largest request accepted."),
        click.option("--rate", type=click.FloatRange(min=0), default=200.0, show_default=True,
                     help="Calls per second one caller may make on average (0: no limit)."),
        click.option("--burst", type=click.IntRange(min=1), default=1000, show_default=True,
                     help="Calls one caller may make at once above --rate."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn
