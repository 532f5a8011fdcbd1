"""The application layer: one typed function per user action, callable from Python and
notebooks as from the CLI. Each takes typed options and returns a frozen view model that the
CLI renders (a table for people, the view model's ``asdict`` for ``--format json``); errors are
:class:`sweeper.errors.SweeperError` subclasses, turned into exit codes by the CLI alone."""
