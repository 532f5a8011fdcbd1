"""The artifacts a study's trials recorded (Optuna keeps them as trial system attributes)."""

from __future__ import annotations

import sqlalchemy as sa
from optuna.storages import RDBStorage

from sweeper.study.retry import with_retry

#: Optuna's key prefix of an artifact's trial system attribute (``optuna.artifacts``).
ARTIFACT_ATTR_PREFIX = "artifacts:"


def artifact_ids(storage: RDBStorage, study_id: int) -> list[str]:
    """The ids of every artifact the trials of a study recorded (one query, no trial loaded):
    what ``sweeper delete`` removes from the store."""
    def query() -> list[str]:
        with storage.engine.connect() as conn:
            keys = conn.execute(sa.text(
                "SELECT a.key FROM trial_system_attributes a JOIN trials t "
                "ON t.trial_id = a.trial_id WHERE t.study_id = :s AND a.key LIKE :p "
                "ORDER BY a.key"), {"s": study_id, "p": ARTIFACT_ATTR_PREFIX + "%"}).all()
        return [key[len(ARTIFACT_ATTR_PREFIX):] for (key,) in keys]

    return with_retry(query, what="list artifacts")
