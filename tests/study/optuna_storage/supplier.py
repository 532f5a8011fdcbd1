"""Stands in for ``optuna.testing.storages`` in the vendored tests: every storage mode is
sweeper's storage exactly as ``sweeper.study.open_storage`` returns it, on the database of the
backend the test module runs on (see conftest.py), either bare ("sweeper") or wrapped in the
trial cache that ``optuna.load_study`` / ``optuna.create_study`` put around it
("cached_sweeper"), Optuna's "sqlite" / "cached_sqlite" modes."""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

import optuna
from optuna.storages import BaseStorage

from sweeper.study import open_storage
from sweeper.study.sql.opening import engine_options
from sweeper.study.sql.storage import RetryingRDBStorage

STORAGE_MODES: list[Any] = ["sweeper", "cached_sweeper"]
STORAGE_MODES_HEARTBEAT = STORAGE_MODES

_url: str | None = None


def use(url: str | None) -> None:
    """Point every StorageSupplier at ``url`` (conftest.py, once per module and backend)."""
    global _url
    _url = url


def current_url() -> str:
    assert _url is not None, "no sweeper backend fixture active"
    return _url


class StorageSupplier(AbstractContextManager[BaseStorage]):
    def __init__(self, storage_specifier: str, **kwargs: Any) -> None:
        if storage_specifier not in STORAGE_MODES:
            raise ValueError(f"unknown storage mode {storage_specifier!r}")
        self.storage_specifier = storage_specifier
        #: Optuna's heartbeat options (heartbeat_interval, grace_period, failed_trial_callback):
        #: sweeper's runners do not use Optuna's heartbeat thread, but the storage class must
        #: still honour them, so they go to the same class open_storage returns.
        self.extra_args = kwargs
        self.backend: RetryingRDBStorage | None = None

    def __enter__(self) -> BaseStorage:
        self.backend = open_storage(current_url())
        if self.extra_args:
            url, engine = self.backend.url, self.backend.engine
            self.backend = RetryingRDBStorage(
                url, engine_kwargs=engine_options(url), skip_compatibility_check=True,
                skip_table_creation=True, **self.extra_args)
            engine.dispose()
        if self.storage_specifier == "cached_sweeper":
            return optuna.storages.get_storage(self.backend)
        return self.backend

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> None:
        if self.backend is not None:
            self.backend.engine.dispose()
