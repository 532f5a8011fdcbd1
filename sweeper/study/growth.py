"""What may change in a sweep launched again under its name: nothing but ``trials``, upwards
(the sweep grows); anything else is refused with an error naming what differs and how to
start over. Pure: the store calls it with what it read under the study lock."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from sweeper.errors import SpecError
from sweeper.spec import SweepSpec


def grown_from(spec: SweepSpec, stored_hash: Any, stored: Any) -> int:
    """The stored number of indexes if ``spec`` is the stored sweep with more of them; raises
    the changed-spec error otherwise (fewer indexes included: a sweep grows, never shrinks)."""
    old = stored.get("trials") if isinstance(stored, dict) else None
    if not isinstance(old, int) or isinstance(old, bool) or \
            replace(spec, trials=old).spec_hash != stored_hash:
        raise changed_spec_error(spec, stored)
    if spec.trials < old:
        raise SpecError(f"sweep {spec.name!r} has {old} indexes; trials: {spec.trials} would "
                        f"shrink it (a sweep can grow, not shrink){_FIXES.format(spec.name)}",
                        source=spec.source, field="trials")
    return old


#: How to start over under the same name, or keep the old sweep and start another.
_FIXES = ("; to start over, delete the old sweep (`sweeper delete {0}`, with this run's "
          "--storage if any) or change `name:` in the spec")


def changed_spec_error(spec: SweepSpec, stored: Any) -> SpecError:
    """The error for a sweep name already used by a different spec, naming what differs and
    the commands that fix it."""
    changed = []
    if isinstance(stored, dict):
        mine = spec.to_dict()
        changed = [k for k in ("method", "objective", "trials", "seed", "sampler", "pruner",
                               "parameters")
                   # json.dumps keeps key order: parameter order defines grid point i
                   if json.dumps(mine.get(k)) != json.dumps(stored.get(k))]
        if {k: mine["trial"].get(k) for k in ("entrypoint", "command", "fixed")} != \
                {k: stored.get("trial", {}).get(k) for k in ("entrypoint", "command", "fixed")}:
            changed.append("trial")
        if spec.method == "grid" and "parameters" in changed and "trials" in changed:
            changed.remove("trials")  # a grid's size follows from its parameters
    what = f" ({', '.join(changed)} differ)" if changed else ""
    return SpecError(f"a different sweep named {spec.name!r} already exists in this storage"
                     f"{what}{_FIXES.format(spec.name)}", source=spec.source,
                     field=changed[0] if changed else "name")
