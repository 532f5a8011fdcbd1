"""Runs Optuna 5.0.0's own storage tests (vendored here, see README.md) against the storage
sweeper hands to Optuna, on a fresh SQLite file and on a fresh PostgreSQL database per test
module. Every test starts on an empty schema. Under CI=true a missing PostgreSQL fails."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from optuna.storages._rdb import models

from sweeper.study import open_storage
from tests.conftest import PG_ADMIN_URL
from tests.study.optuna_storage import supplier

HERE = Path(__file__).parent

#: Vendored tests that do not run, and why (reported as deselected).
DESELECTED = {
    "test_get_storage": "tests optuna.storages.get_storage's own defaults, no sweeper storage",
}

#: Tables whose rows a test may leave behind; the schema's bookkeeping tables stay.
_DATA_TABLES = [t for t in reversed(models.BaseModel.metadata.sorted_tables)
                if t.name not in ("version_info", "alembic_version")]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, dropped = [], []
    for item in items:
        if HERE not in item.path.parents:
            keep.append(item)
            continue
        name = getattr(item, "originalname", item.name)
        (dropped if name in DESELECTED else keep).append(item)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("sweeper_backend") == "postgresql":
            item.add_marker(pytest.mark.postgres)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="module", params=["sqlite", "postgresql"], autouse=True)
def sweeper_backend(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh database for this module: SQLite file or PostgreSQL database (created and
    dropped through the SWEEPER_TEST_PG server), with the schema sweeper creates."""
    admin: sa.Engine | None = None
    name = f"sweeper_optuna_{uuid.uuid4().hex[:10]}"
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('optuna-storage') / 'optuna.db'}"
    else:
        admin = request.getfixturevalue("pg_admin")
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    open_storage(url).engine.dispose()
    supplier.use(url)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TEST_DB_URL", url)  # what Optuna's test_with_server.py reads
        mp.delenv("TEST_DB_MODE", raising=False)
        yield url
    supplier.use(None)
    if admin is not None:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(autouse=True)
def _empty_database(sweeper_backend: str) -> None:
    """Optuna's tests expect an empty storage (e.g. ``get_all_studies() == [one]``)."""
    engine = sa.create_engine(sweeper_backend.replace("postgresql://",
                                                      "postgresql+psycopg2://", 1))
    try:
        with engine.begin() as conn:
            for table in _DATA_TABLES:
                conn.execute(table.delete())
    finally:
        engine.dispose()
