"""One error hierarchy. Library code raises these; only sweeper.cli turns them into exit codes
(:data:`EXIT_CODES` lists every code the CLI exits with)."""

from __future__ import annotations

from typing import Final


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


class StorageUnavailableError(StorageError):
    """The storage did not answer within the retry window (a server restarting or failing
    over, a proxy that is down, too many connections): the input may be right, a retry later
    may succeed. Its own exit code, so that scripts and schedulers can tell it from a
    mistake (EX_TEMPFAIL of sysexits.h)."""

    exit_code = 75


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


class OptionError(SweeperError):
    """Options that do not go together, or a value outside what the sweep allows (an index
    past its last one): a usage problem, found before anything is written."""

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


#: What ``sweeper`` exits with after Ctrl-C or SIGTERM (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED: Final = 130

#: Every exit code of the ``sweeper`` command and what it means (the CLI reference's table).
EXIT_CODES: Final[tuple[tuple[int, str], ...]] = (
    (0, "done"),
    (SweepFailedError.exit_code, "the sweep ran, some index failed for good"),
    (SpecError.exit_code, "bad input, no retry helps: the spec, an option, the storage URL, "
                          "password or database, an unknown sweep"),
    (BackendError.exit_code, "the backend (local processes, Kubernetes) failed"),
    (StorageUnavailableError.exit_code, "the storage stayed unreachable for all of "
                                        "--storage-wait: the input may be right, try later"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C, SIGTERM): run the same command again to go on"),
)
