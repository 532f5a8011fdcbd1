"""Small spec builders shared by tests (a spec in tmp_path using the fast synthetic objective)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sweeper.spec import SweepSpec, parse_spec

QUADRATIC = "trial_runner.examples.synthetic:quadratic"


def spec_dict(name: str = "t-sweep", method: str = "grid", **over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "method": method,
        "objective": {"metric": "loss", "direction": "minimize"},
        "parallelism": 2,
        "seed": 7,
        "trial": {"entrypoint": QUADRATIC, "fixed": {"epochs": 2}, "retries": 1},
        "parameters": {
            "a": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
            "b": {"type": "categorical", "choices": ["x", "y"]},
        },
    }
    if method != "grid":
        d["trials"] = 6
        d["parameters"] = {"a": {"type": "float", "low": 0.0, "high": 1.0},
                           "n": {"type": "int", "low": 1, "high": 8}}
    for k, v in over.items():
        if k == "trial":
            d[k] = {**d[k], **v}
            if "command" in v:
                d[k].pop("entrypoint", None)
        else:
            d[k] = v
    return d


def make_spec(**kw: Any) -> SweepSpec:
    return parse_spec(yaml.safe_dump(spec_dict(**kw), sort_keys=False))


def write_spec(tmp_path: Path, **kw: Any) -> Path:
    path = tmp_path / f"{kw.get('name', 't-sweep')}.yaml"
    path.write_text(yaml.safe_dump(spec_dict(**kw), sort_keys=False))
    return path
