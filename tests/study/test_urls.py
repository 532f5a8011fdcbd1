"""Storage URLs: precedence, the psycopg2 driver, and never printing a password."""

from __future__ import annotations

import pytest

from sweeper.errors import StorageError
from sweeper.study import open_storage
from sweeper.study.urls import driver_url, redact, resolve_storage_url, scrub
from tests.support.helpers import make_spec


def test_urls_hide_passwords_and_use_psycopg2() -> None:
    url = "postgresql://alice:s3cret@db:5432/sweeps"
    assert redact(url) == "postgresql://alice:***@db:5432/sweeps"
    assert driver_url(url) == "postgresql+psycopg2://alice:s3cret@db:5432/sweeps"
    assert driver_url("postgres://a@h/d") == "postgresql+psycopg2://a@h/d"
    assert redact("sqlite:///x.db") == "sqlite:///x.db"
    assert scrub(f"could not connect to {url}: rejected", url) == \
        "could not connect to postgresql://alice:***@db:5432/sweeps: rejected"


@pytest.mark.parametrize("password", ["postgres", "alice", "db", "sweeps", "postgresql", "5432"])
def test_masking_follows_the_url_structure_whatever_the_password(password: str) -> None:
    """A password equal to the scheme, the user, the host or the database name: only the
    password's own place in the URL is masked."""
    url = f"postgresql://alice:{password}@db:5432/sweeps"
    assert redact(url) == "postgresql://alice:***@db:5432/sweeps"
    message = f"cannot open storage {redact(url)}: connection to db port 5432 refused " \
              f'(user "alice", database "sweeps")'
    assert scrub(message, url) == message
    assert scrub(f"failed: {url}", url) == "failed: postgresql://alice:***@db:5432/sweeps"


def test_secret_query_values_are_masked() -> None:
    url = "postgresql://alice@db/sweeps?sslmode=require&sslpassword=k3y&application_name=x"
    assert redact(url) == "postgresql://alice@db/sweeps?sslmode=require&sslpassword=***" \
        "&application_name=x"
    assert redact("grpc://proxy:13000?token=abc") == "grpc://proxy:13000?token=***"


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
