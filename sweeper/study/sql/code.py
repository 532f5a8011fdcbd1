"""Code snapshots kept in the study: one part per study system attribute
(``protocol.code_part_key``), read one at a time (Optuna's API reads every attribute of a
study at once)."""

from __future__ import annotations

import json

import sqlalchemy as sa
from optuna.storages import RDBStorage

from sweeper.protocol import code_part_key
from sweeper.study.retry import with_retry
from sweeper.study.values import CodePart


def code_part(storage: RDBStorage, study_id: int, digest_hex: str, part: int
              ) -> CodePart | None:
    """Part ``part`` of snapshot ``digest_hex`` in study ``study_id`` (None: not there)."""
    key = code_part_key(digest_hex, part)

    def query() -> str | None:
        with storage.engine.connect() as conn:
            return conn.execute(sa.text(
                "SELECT value_json FROM study_system_attributes "
                "WHERE study_id = :s AND key = :k"), {"s": study_id, "k": key}).scalar()

    raw = with_retry(query, what="read the code snapshot")
    if raw is None:
        return None
    value = json.loads(raw)
    return CodePart(int(value["parts"]), str(value["data"]))
