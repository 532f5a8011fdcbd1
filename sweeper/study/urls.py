"""Storage URLs: which one to use, the driver behind it, and how to print it safely."""

from __future__ import annotations

import os
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


def redact(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe to print or log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable storage URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def scrub(text: str, url: str) -> str:
    """Remove the password of ``url`` from an error message (drivers sometimes echo it)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    text = text.replace(url, redact(url))
    if password:
        text = text.replace(password, "***")
    return text
