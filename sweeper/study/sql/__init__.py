"""The index store on a database (PostgreSQL or SQLite): the only place with SQL against
Optuna's tables (``tests/study/test_sql_confined.py`` holds every other module to that).

- :mod:`.store`: :class:`SqlStore`, the interface's implementation, one line per operation;
- :mod:`.storage`: the retrying RDBStorage under it, the Optuna storage sweeper hands Optuna;
- :mod:`.opening`: opening a database (engine settings, schema, index, one-line failures);
- :mod:`.oneshot`: a step as one statement and round trip (PostgreSQL);
- :mod:`.writes`: what "already done" looks like for writes a retry must recognise (tokens);
- :mod:`._bulk`: the locked bulk insert that enqueues plans and creates attempts;
- :mod:`.index`: an index's attempts, claiming one, the next attempt, failing stale ones;
- :mod:`.record`: the sweep record and its plan, in one locked transaction;
- :mod:`.stop`: the stop attribute and the counts the stop rules read;
- :mod:`.trials`: a running trial's batched writes, opening a claimed trial in one query;
- :mod:`.summaries`, :mod:`.stats`, :mod:`.artifacts`: the reads of status, list, metrics
  and delete.

Which SQL a step sends on PostgreSQL or SQLite is this package's business; callers hold the
interface (:class:`sweeper.study.store.IndexStore`).
"""

from sweeper.study.sql.opening import open_sql_store
from sweeper.study.sql.store import SqlStore

__all__ = ["SqlStore", "open_sql_store"]
