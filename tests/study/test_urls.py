"""Storage URLs: precedence, the psycopg2 driver, and never printing a password."""

from __future__ import annotations

import pytest

from sweeper.errors import StorageError
from sweeper.study import driver_url, open_storage, redact, resolve_storage_url, scrub
from tests.support.helpers import make_spec


def test_urls_hide_passwords_and_use_psycopg2() -> None:
    url = "postgresql://alice:s3cret@db:5432/sweeps"
    assert redact(url) == "postgresql://alice:***@db:5432/sweeps"
    assert driver_url(url) == "postgresql+psycopg2://alice:s3cret@db:5432/sweeps"
    assert driver_url("postgres://a@h/d") == "postgresql+psycopg2://a@h/d"
    assert redact("sqlite:///x.db") == "sqlite:///x.db"
    assert "s3cret" not in scrub(f"could not connect to {url}: password s3cret rejected", url)


def test_storage_precedence() -> None:
    spec = make_spec(storage="sqlite:///from-spec.db")
    assert resolve_storage_url("sqlite:///flag.db", spec, {"SWEEPER_STORAGE": "e"}) == \
        "sqlite:///flag.db"
    assert resolve_storage_url(None, spec, {"SWEEPER_STORAGE": "sqlite:///env.db"}) == \
        "sqlite:///env.db"
    assert resolve_storage_url(None, spec, {}) == "sqlite:///from-spec.db"
    assert resolve_storage_url(None, None, {}) == "sqlite:///sweeps.db"


def test_unreachable_database_is_one_line_without_password() -> None:
    with pytest.raises(StorageError) as e:
        open_storage("postgresql://u:hunter2-pw@127.0.0.1:1/db")
    msg = str(e.value)
    assert "hunter2-pw" not in msg and "\n" not in msg
    assert "postgresql://u:***@127.0.0.1:1/db" in msg
