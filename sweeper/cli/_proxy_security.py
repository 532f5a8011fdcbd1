"""``sweeper proxy``'s security options: who may call it (``--auth``), TLS, limits; and the
loopback default, a secret in a file only this user can read
(:mod:`sweeper.study.remote.localsecret`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from sweeper.errors import SweeperError

if TYPE_CHECKING:
    from sweeper.proxy.auth import Authenticator
    from sweeper.proxy.limits import Limits
    from sweeper.proxy.tls import ServerTLS


def security_options(fn: Any) -> Any:
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


@dataclass(frozen=True)
class Security:
    """What the options ask of the proxy: ProxyServer's ``auth``, ``limits`` and ``tls``, and
    on a loopback address without --auth the secret to publish once the port is bound."""

    auth: Authenticator | None
    limits: Limits
    tls: ServerTLS | None
    local_secret: str | None = None

    def server_kwargs(self) -> dict[str, Any]:
        return {"auth": self.auth, "limits": self.limits, "tls": self.tls}


def build_security(host: str, port: int, opts: dict[str, Any]) -> Security:
    """The proxy's security from the options (a usage error for a combination that would
    serve plaintext off loopback)."""
    from sweeper.proxy.limits import Limits
    from sweeper.proxy.tls import ServerTLS
    from sweeper.study.remote.localsecret import is_loopback

    loopback = is_loopback(host)
    tls = None
    if opts["tls_cert"] or opts["tls_key"]:
        if not (opts["tls_cert"] and opts["tls_key"]):
            raise click.UsageError("--tls-cert and --tls-key go together")
        tls = ServerTLS.from_files(opts["tls_cert"], opts["tls_key"])
    elif not loopback and not opts["insecure_plaintext"]:
        raise click.UsageError(f"--host {host} is not loopback: serve TLS (--tls-cert, "
                               "--tls-key) or pass --insecure-plaintext")
    limits = Limits(max_message_bytes=int(opts["max_message_mb"] * 1024 * 1024),
                    rate=opts["rate"], burst=opts["burst"])
    mode = opts["auth"] or ("local" if loopback else "kubernetes")
    if mode == "local":
        from sweeper.proxy.auth import SharedSecret
        from sweeper.study.remote.credentials import new_local_secret
        from sweeper.study.remote.localsecret import existing_secret

        secret = existing_secret(host, port) or new_local_secret()
        return Security(SharedSecret(secret, name="holder of the local proxy secret"), limits,
                        tls, local_secret=secret)
    return Security(_authenticator(mode, opts), limits, tls)


def _authenticator(mode: str, opts: dict[str, Any]) -> Authenticator | None:
    if mode == "none":
        return None
    if mode == "secret":
        from sweeper.proxy.auth import SharedSecret

        secret = os.environ.get("SWEEPER_PROXY_SECRET", "")
        if len(secret) < 16:
            raise SweeperError("--auth secret needs $SWEEPER_PROXY_SECRET (16 characters "
                               "or more)")
        return SharedSecret(secret, name="holder of the proxy secret")
    from sweeper.backends.kubernetes.client import ClientFactory
    from sweeper.proxy.kubeauth import KubernetesAuthenticator, in_cluster_namespace

    namespace = opts["namespace"] or in_cluster_namespace()
    return KubernetesAuthenticator(ClientFactory(opts["kubeconfig"]), namespace,
                                   audience=opts["audience"], ttl_s=opts["auth_cache_ttl"])


def announce(security: Security, host: str, port: int) -> None:
    """Before the proxy serves: the loopback secret written to its file (its path said, never
    the secret), or the one-line warning of a proxy that lets anyone in."""
    from sweeper.study.remote.localsecret import write_secret

    if security.local_secret is not None:
        path = write_secret(host, port, security.local_secret)
        click.echo(f"callers need the secret in {path} (mode 0600: this user only); sweeper "
                   "commands and runners of this user read it there", err=True)
    elif security.auth is None:
        click.echo(f"warning: --auth none: anyone who reaches {host}:{port} (on loopback: "
                   "every user of this machine) can read, change and delete every study",
                   err=True)
