"""`sweeper run` of the ``ddp`` objective (tests.support.cluster_objectives) under torchrun on
the local backend, for the torchrun and multi-node tests: a grid over ``x``, a median pruner
that prunes at once, the ranks' marker files under ``tmp_path/markers``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from sweeper.cli import cli


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 's.db'}"


def run_ddp(tmp_path: Path, name: str, xs: list[int], trial: dict[str, Any],
            **fixed: Any) -> Result:
    """``trial``: the launcher's keys (``nproc``, ``nodes``); ``fixed``: the objective's."""
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    spec = {"name": name, "method": "grid", "parallelism": 1,
            "objective": {"metric": "loss", "direction": "minimize"},
            "pruner": {"type": "median", "n_startup_trials": 0, "n_warmup_steps": 0},
            "trial": {"entrypoint": "tests.support.cluster_objectives:ddp", "retries": 1,
                      "launcher": "torchrun", **trial, "fixed": {"steps": 3, **fixed}},
            "parameters": {"x": {"type": "int", "values": xs}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return CliRunner().invoke(cli, ["run", str(path), "--storage", sqlite_url(tmp_path),
                                    "--log-dir", str(tmp_path / "logs")],
                              env={"MARKER_DIR": str(markers)}, catch_exceptions=False)
