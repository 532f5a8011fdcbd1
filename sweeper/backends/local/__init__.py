"""The local backend: trial runners as worker processes on this machine (see
:mod:`sweeper.backends.local.backend`)."""

from sweeper.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
