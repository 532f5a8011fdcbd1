"""Trials -> stable records for scripts: ``sweeper export`` (csv, json) and ``sweeper best``.

Pure: takes frozen trials, returns dicts and text; no storage access. The field names are a
documented interface (docs/export-formats.md): add fields, never rename or remove them.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from optuna.trial import FrozenTrial

from sweeper.accounting import Cost, cost_of
from sweeper.accounting import trial_record as usage_record
from sweeper.artifacts import trial_artifacts
from sweeper.protocol import (
    CODE_ATTR,
    CODE_VERSION_ATTR,
    DEVICE_ATTR,
    HASH_ATTR,
    HISTORY_ATTR,
    PBT_ATTR,
    RETRY_OF_ATTR,
)
from sweeper.report import trial_record
from sweeper.spec import SweepSpec

FORMAT_VERSION = 1

#: The fixed leading CSV columns; then values.<metric>, params.<name>, the fixed trailing
#: columns, then user_attrs.<key> (sorted).
CSV_HEAD = ("number", "index", "attempt", "retry_of", "state")
CSV_TAIL = ("duration_s", "datetime_start", "datetime_complete", "fail_reason", "device",
            "code_version", "code", "spec_hash", "artifacts", "gpu_hours", "cpu_hours", "steps",
            "cost")


def trial_export_record(t: FrozenTrial, metrics: Sequence[str],
                        cost: Cost | None = None) -> dict[str, Any]:
    """Everything that makes a trial comparable, JSON-able, in a fixed key order; ``usage``:
    what its segments consumed (:mod:`sweeper.accounting`), in money too with ``cost``."""
    base = trial_record(t, metrics)
    attrs = t.user_attrs
    history = attrs.get(HISTORY_ATTR)
    return _clean({
        "number": base["number"],
        "index": base["index"],
        "attempt": base["attempt"],
        "retry_of": attrs.get(RETRY_OF_ATTR),
        "state": base["state"],
        "values": base["values"],
        "params": base["params"],
        "user_attrs": base["user_attrs"],
        "history": history if isinstance(history, dict) else {},
        "fail_reason": base["fail_reason"],
        "datetime_start": base["datetime_start"],
        "datetime_complete": base["datetime_complete"],
        "duration_s": base["duration_s"],
        "device": attrs.get(DEVICE_ATTR),
        "code_version": attrs.get(CODE_VERSION_ATTR),
        "code": attrs.get(CODE_ATTR),
        "spec_hash": attrs.get(HASH_ATTR),
        "artifacts": [{"artifact_id": a.artifact_id, "filename": a.filename,
                       "mimetype": a.mimetype} for a in trial_artifacts(t)],
        "usage": usage_record(attrs, cost),
        # A PBT member's lineage (scheduler: {type: pbt}): its segments, as stored.
        **({"pbt": attrs[PBT_ATTR]} if PBT_ATTR in attrs else {}),
    })


def export_document(spec: SweepSpec, trials: Iterable[FrozenTrial]) -> dict[str, Any]:
    """The ``--format json`` document: the sweep's identity and every trial, by number."""
    metrics = [o.metric for o in spec.objectives]
    return {
        "format_version": FORMAT_VERSION,
        "study": spec.name,
        "method": spec.method,
        "spec_hash": spec.spec_hash,
        "objectives": [{"metric": o.metric, "direction": o.direction} for o in spec.objectives],
        "parameters": [p.name for p in spec.parameters],
        **({"currency": spec.cost.currency} if spec.cost is not None else {}),
        "trials": [trial_export_record(t, metrics, cost_of(spec))
                   for t in sorted(trials, key=lambda t: t.number)],
    }


def csv_columns(doc: dict[str, Any]) -> list[str]:
    metrics = [o["metric"] for o in doc["objectives"]]
    params = list(doc["parameters"])
    for r in doc["trials"]:
        for name in r["params"]:
            if name not in params:
                params.append(name)
    user = sorted({k for r in doc["trials"] for k in r["user_attrs"]})
    pbt = ["pbt"] if any("pbt" in r for r in doc["trials"]) else []
    return [*CSV_HEAD, *(f"values.{m}" for m in metrics), *(f"params.{p}" for p in params),
            *CSV_TAIL, *pbt, *(f"user_attrs.{k}" for k in user)]


def csv_rows(doc: dict[str, Any]) -> list[dict[str, str]]:
    """One flat row per trial (``history`` is JSON-only: it does not fit a cell)."""
    out = []
    for r in doc["trials"]:
        row: dict[str, Any] = {k: r[k] for k in CSV_HEAD}
        for m, v in (r["values"] or {}).items():
            row[f"values.{m}"] = v
        for name, v in r["params"].items():
            row[f"params.{name}"] = v
        for k in CSV_TAIL[:-4]:  # the usage's four come next
            row[k] = r[k]
        row["artifacts"] = [a["filename"] for a in r["artifacts"]] or None
        for k in ("gpu_hours", "cpu_hours", "steps", "cost"):
            row[k] = r["usage"].get(k)
        if "pbt" in r:  # the segments as one JSON cell
            row["pbt"] = r["pbt"]
        for k, v in r["user_attrs"].items():
            row[f"user_attrs.{k}"] = v
        out.append({k: _cell(v) for k, v in row.items()})
    return out


def to_csv(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=csv_columns(doc), lineterminator="\n",
                            extrasaction="raise")
    writer.writeheader()
    writer.writerows(csv_rows(doc))
    return buf.getvalue()


def to_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _cell(v: Any) -> str:
    """CSV text: empty for null, true/false, numbers as Python writes them, JSON otherwise."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def _clean(value: Any) -> Any:
    """Non-finite floats -> strings ("inf", "nan"), so the document is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value
