"""One error hierarchy. Library code raises these; only sweeper.cli turns them into exit codes."""

from __future__ import annotations


class SweeperError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class SpecError(SweeperError):
    """The spec (YAML file or stored sweep record) is invalid. Nothing was written."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.field = field
        super().__init__(self.render())

    def render(self) -> str:
        where = self.source or "<spec>"
        if self.line is not None:
            where += f":{self.line}"
        field = f" {self.field}:" if self.field else ""
        # One line always: a message quoting a library error may carry newlines.
        return " ".join(f"{where}:{field} {self.message}".splitlines())


class StorageError(SweeperError):
    """The study storage cannot be reached or used. Messages never contain a password."""

    exit_code = 2


class StorageMissingError(StorageError):
    """A command that only reads was pointed at a storage that does not exist (a SQLite file
    that is not there, a database without Optuna's tables): nothing was created."""


class StudyNotFoundError(StorageError):
    """No sweep of that name in the storage."""


class BackendError(SweeperError):
    """A backend (local processes, Kubernetes) failed to launch or watch the sweep."""

    exit_code = 3


class SweepFailedError(SweeperError):
    """The sweep ran, but some indexes failed for good."""

    exit_code = 1


class NotConfirmedError(SweeperError):
    """A destructive command was not confirmed and cannot ask (stdin is not a terminal)."""

    exit_code = 2


class ArtifactError(SweeperError):
    """The artifact store (filesystem or S3) cannot be used. Messages never contain secrets.
    Not a StorageError: inside a trial it fails that trial, it does not stop the runner."""

    exit_code = 2


class CodeError(SweeperError):
    """The trial's code snapshot cannot be made or used: a code directory that does not exist
    or is empty, a snapshot over its store's limit, an archive whose hash does not match or
    that would write outside its directory. No retry fixes it."""

    exit_code = 2


class PortInUseError(SweeperError):
    """A port a command must listen on is taken: choose another (a usage problem)."""

    exit_code = 2
