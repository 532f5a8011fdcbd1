"""``sweeper proxy``'s security options: who may call it (``--auth``), TLS, limits."""

from __future__ import annotations

import os
from typing import Any

import click

from sweeper.errors import SweeperError


def security_options(fn: Any) -> Any:
    options = [
        click.option("--auth", type=click.Choice(["kubernetes", "secret", "none"]),
                     help="Who may call: kubernetes (every call carries a ServiceAccount "
                          "token for --audience, checked with TokenReview; trial pods reach "
                          "only their own sweep, others need the admin role), secret (the "
                          "token in $SWEEPER_PROXY_SECRET), none. Default: kubernetes, none "
                          "on a loopback --host."),
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


def build_security(host: str, opts: dict[str, Any]) -> dict[str, Any]:
    """ProxyServer's ``auth``, ``limits`` and ``tls`` keyword arguments from the options."""
    from sweeper.proxy.auth import SharedSecret
    from sweeper.proxy.limits import Limits
    from sweeper.proxy.tls import ServerTLS, is_loopback

    loopback = is_loopback(host)
    tls = None
    if opts["tls_cert"] or opts["tls_key"]:
        if not (opts["tls_cert"] and opts["tls_key"]):
            raise click.UsageError("--tls-cert and --tls-key go together")
        tls = ServerTLS.from_files(opts["tls_cert"], opts["tls_key"])
    elif not loopback and not opts["insecure_plaintext"]:
        raise click.UsageError(f"--host {host} is not loopback: serve TLS (--tls-cert, "
                               "--tls-key) or pass --insecure-plaintext")
    mode = opts["auth"] or ("none" if loopback else "kubernetes")
    auth: Any = None
    if mode == "secret":
        secret = os.environ.get("SWEEPER_PROXY_SECRET", "")
        if len(secret) < 16:
            raise SweeperError("--auth secret needs $SWEEPER_PROXY_SECRET (16 characters "
                               "or more)")
        auth = SharedSecret(secret, name="holder of the proxy secret")
    elif mode == "kubernetes":
        from sweeper.backends.kubernetes.client import ClientFactory
        from sweeper.proxy.kubeauth import KubernetesAuthenticator, in_cluster_namespace

        namespace = opts["namespace"] or in_cluster_namespace()
        auth = KubernetesAuthenticator(ClientFactory(opts["kubeconfig"]), namespace,
                                       audience=opts["audience"],
                                       ttl_s=opts["auth_cache_ttl"])
    limits = Limits(max_message_bytes=int(opts["max_message_mb"] * 1024 * 1024),
                    rate=opts["rate"], burst=opts["burst"])
    return {"auth": auth, "limits": limits, "tls": tls}
