"""Storage URLs: which one to use, the driver behind it, and how to print it safely."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from sweeper.protocol import DEFAULT_STORAGE, ENV_STORAGE

if TYPE_CHECKING:
    from sweeper.spec import SweepSpec


def resolve_storage_url(flag: str | None, spec: SweepSpec | None = None,
                        env: Mapping[str, str] | None = None) -> str:
    """``--storage`` flag > ``SWEEPER_STORAGE`` env > spec ``storage:`` > sqlite:///sweeps.db."""
    env = os.environ if env is None else env
    return flag or env.get(ENV_STORAGE) or (spec.storage if spec else None) \
        or DEFAULT_STORAGE


def driver_url(url: str) -> str:
    """Users write ``postgresql://``; SQLAlchemy 2.1 maps that to psycopg 3, we ship psycopg2."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix):]
    return url


#: Query parameters whose values are secrets (``?sslpassword=...``, ``?token=...``).
_SECRET_QUERY = re.compile(r"(?i)^(password|passwd|pwd|sslpassword|secret|token|key|"
                           r"access_key|secret_key|api_key)$")
#: A URL inside a message: a scheme, ``://`` and what follows up to whitespace or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact(url: str) -> str:
    """The URL with its password (and any secret query value) replaced by ``***``, by
    parsing it: the user, host, scheme and database name stay as they are, whatever the
    password is (safe to print or log)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparseable storage URL>"
    netloc = parts.netloc
    if password is not None:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = "&".join(_redact_pair(pair) for pair in parts.query.split("&")) \
        if parts.query else parts.query
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _redact_pair(pair: str) -> str:
    name, eq, _ = pair.partition("=")
    return f"{name}=***" if eq and _SECRET_QUERY.match(name) else pair


def scrub(text: str, url: str) -> str:
    """An error message with the password of every URL in it masked (drivers sometimes echo
    the URL), by the URL's structure. The password standing alone as a word is masked too,
    unless it is also the user, host, scheme, port or database name of the URL: masking those
    would mangle the message, and they are printed anyway."""
    text = _URL_IN_TEXT.sub(lambda m: redact(m.group(0)), text.replace(url, redact(url)))
    try:
        parts = urlsplit(url)
        password, port = parts.password, parts.port
    except ValueError:
        return text
    shown = {parts.username, parts.hostname, parts.scheme, parts.path.strip("/"), str(port)}
    if password and password not in shown:
        text = re.sub(rf"(?<![\w*]){re.escape(password)}(?![\w*])", "***", text)
    return text
