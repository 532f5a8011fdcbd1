"""Opening the study storage: the one place that picks an implementation of the index store
(``grpc://`` is the storage proxy, anything else a database)."""

from __future__ import annotations

from sweeper.study.remote.client import ProxyStorage, is_proxy_url, open_proxy_storage
from sweeper.study.sql import SqlStore, open_sql_store

#: What :func:`open_storage` returns: the database directly, or the proxy in front of it.
#: Both are index stores (:class:`sweeper.study.store.IndexStore`) and Optuna storages.
StudyStorage = SqlStore | ProxyStorage


def open_storage(url: str, *, connect_deadline_s: float = 0.0, pool_size: int = 1,
                 max_overflow: int = 1, prepared: bool = False,
                 create: bool = True) -> StudyStorage:
    """Open (and on first use create) the study storage at ``url``.

    ``connect_deadline_s`` > 0 keeps retrying a storage that is unavailable (not up yet,
    dropping connections, a proxy that is down) that long, with a warning while it waits, then
    raises :class:`sweeper.errors.StorageUnavailableError`; 0 fails at once (a proxy gets a
    few seconds to answer). Permanent errors (wrong password, unknown database or host, an
    unknown schema version) fail at once with one clear line. Errors never contain the
    password.
    ``prepared``: the orchestrator already created and checked the schema (trial runners), so
    skip Optuna's table creation and alembic version check and the index DDL.
    ``create=False`` (commands that only read, and delete): never create anything; a storage
    that does not exist yet raises :class:`sweeper.errors.StorageMissingError`.
    ``grpc://host:port`` is ``sweeper proxy`` (:mod:`sweeper.study.remote.client`).
    """
    if is_proxy_url(url):
        return open_proxy_storage(url, connect_deadline_s=connect_deadline_s)
    return open_sql_store(url, connect_deadline_s=connect_deadline_s, pool_size=pool_size,
                          max_overflow=max_overflow, prepared=prepared, create=create)
