"""The Optuna series this package knows (checked on import) and its experimental warnings."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import optuna

from sweeper.errors import SweeperError

#: ``major.minor`` series of Optuna whose private API this package was written and tested for.
SUPPORTED_SERIES = ("5.0",)


class UnsupportedOptunaError(SweeperError, ImportError):
    """The installed Optuna is a series this module does not know (see the module docstring)."""

    exit_code = 2


def check_version(version: str) -> None:
    """Raise :class:`UnsupportedOptunaError` unless ``version`` is of a supported series."""
    series = ".".join(version.split(".")[:2])
    if series not in SUPPORTED_SERIES:
        raise UnsupportedOptunaError(
            f"sweeper works with optuna {' or '.join(s + '.x' for s in SUPPORTED_SERIES)}, "
            f"found optuna {version}: pip install 'optuna~={SUPPORTED_SERIES[-1]}.0'")


check_version(optuna.__version__)


# --------------------------------------------------------------------------- experimental


@contextlib.contextmanager
def experimental_on_purpose() -> Iterator[None]:
    """Build what sweeper uses on purpose although this series marks it experimental
    (NSGAIIISampler for nsga3, TPESampler's group=True over a conditional space, CmaEsSampler's
    and GPSampler's experimental options, GrpcStorageProxy) without its ExperimentalWarning:
    nothing a user of sweeper can act on, it would land on the terminal of ``sweeper run``
    (which builds the runners' sampler before forking them) and in every index's log."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


