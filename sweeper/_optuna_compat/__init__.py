"""Every use sweeper makes of Optuna's private API, in one place, for the one Optuna it knows.

Optuna's public API has no way to finish a trial without re-reading it, to register a trial
created outside the API in a study's trial cache, to write several attributes in one
transaction, to name its RDB tables, or to open a storage without reloading its migrations;
sweeper needs them on its hot paths. Its gRPC proxy is served alone on a port with fixed
channel options; sweeper's serves its own service beside Optuna's and reconnects quickly.
GPSampler has no option for how it treats running trials; sweeper's ``gp`` penalises their
neighbourhoods (``_gp``) instead of its Monte Carlo fantasies.
Each private name used here has a contract test in ``tests/test_optuna_compat.py`` (the GP's in
``tests/test_optuna_compat_gp.py``).
Importing this module on an Optuna series it was not written for fails at once with one line:
check the contract tests against the new series, then add it to :data:`SUPPORTED_SERIES`.

No other module of ``sweeper`` or ``trial_runner`` touches an ``_underscored`` Optuna name.
"""

from __future__ import annotations

from typing import Any

from sweeper._optuna_compat._base import (
    SUPPORTED_SERIES,
    UnsupportedOptunaError,
    check_version,
    experimental_on_purpose,
)
from sweeper._optuna_compat._grpc import (
    OPTUNA_SERVICE_PREFIX,
    GrpcStorageProxyOnChannel,
    add_optuna_storage_servicer,
    cached_storage,
    is_finishing_request,
)
from sweeper._optuna_compat._storages import (
    PRIVATE_TRIAL_PATH,
    RDBStoragePrivateRetries,
    RDBTables,
    add_to_cache,
    backend_of,
    cached_rdb_backend,
    rdb_tables,
    share_alembic_script,
    trial_value,
)
from sweeper._optuna_compat._trials import (
    FrozenStudy,
    distribution_contains,
    fixed_params_of,
    own_copy,
    reset_trials_cache,
    storage_of,
    study_id_of,
    tell,
    tell_trial,
    trial_from_frozen,
    trial_id_of,
    update_cached_trial,
)
from sweeper._optuna_compat._views import PrunedView

__all__ = [
    "OPTUNA_SERVICE_PREFIX",
    "PRIVATE_TRIAL_PATH",
    "SUPPORTED_SERIES",
    "ArtifactStore",
    "FrozenStudy",
    "GrpcStorageProxyOnChannel",
    "LocalPenaltyGPSampler",
    "PrunedView",
    "RDBStoragePrivateRetries",
    "RDBTables",
    "UnsupportedOptunaError",
    "add_optuna_storage_servicer",
    "add_to_cache",
    "backend_of",
    "cached_rdb_backend",
    "cached_storage",
    "check_version",
    "distribution_contains",
    "experimental_on_purpose",
    "fixed_params_of",
    "is_finishing_request",
    "own_copy",
    "rdb_tables",
    "reset_trials_cache",
    "share_alembic_script",
    "storage_of",
    "study_id_of",
    "tell",
    "tell_trial",
    "trial_from_frozen",
    "trial_id_of",
    "trial_value",
    "update_cached_trial",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: `import optuna` does not load optuna.artifacts, and only a gp
    # sweep needs the GP sampler.
    if name == "ArtifactStore":
        from optuna.artifacts._protocol import ArtifactStore

        return ArtifactStore
    if name == "LocalPenaltyGPSampler":
        from sweeper._optuna_compat._gp import LocalPenaltyGPSampler

        return LocalPenaltyGPSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
