"""The ``sweeper`` command. Click only: parse arguments into one options object each, call
the application layer (:mod:`sweeper.app`), render its view models.

Results go to stdout, diagnostics and progress to stderr. Every SweeperError becomes one line
and its exit code (``sweeper.errors.EXIT_CODES``: 1 some index failed, 2 bad input, 3 backend,
75 a storage that stayed unreachable, 130 interrupted); no traceback for user mistakes (``-v``
shows them).

The commands live in private modules by job (_spec, _run, _inspect, _manage, _cluster, _import,
_proxy) and attach themselves to the group in _group when imported here (its GroupOptions is
the context's object); _common holds what they share, the one place that turns a
SweeperError into its exit code among it. The kubernetes client and torch are not imported
before a command needs them.
"""

from __future__ import annotations

# Imported for their side effect: each attaches its commands to ``cli``.
from sweeper.cli import _cluster, _import, _inspect, _manage, _proxy, _run, _spec  # noqa: F401
from sweeper.cli._group import cli

__all__ = ["cli", "main"]


def main() -> None:
    cli(prog_name="sweeper")
