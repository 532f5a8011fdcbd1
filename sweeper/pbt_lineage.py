"""A PBT member's lineage (:data:`sweeper.protocol.PBT_ATTR`), as runners write it and
``sweeper status`` / ``export`` show it. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def segment(from_step: int, params: Mapping[str, Any], parent: int | None = None,
            parent_step: int | None = None) -> dict[str, Any]:
    """One entry of a lineage: the params the member trains with from ``from_step`` on, and
    the trial number and checkpoint step it copied (None for its first segment)."""
    return {"from_step": from_step, "params": dict(params), "parent": parent,
            "parent_step": parent_step}


def describe(lineage: Any) -> str:
    """A lineage in a few words: ``from #3 at step 7`` (its last copy, and how many there
    were when more than one); ``-`` for none (or an attribute that is not a lineage)."""
    if not isinstance(lineage, Sequence) or isinstance(lineage, str):
        return "-"
    copies = [s for s in lineage if isinstance(s, Mapping) and s.get("parent") is not None]
    if not copies:
        return "-"
    last = copies[-1]
    more = f" ({len(copies)} copies)" if len(copies) > 1 else ""
    return f"from #{last['parent']} at step {last.get('parent_step')}{more}"
