"""Small spec builders shared by tests (a spec in tmp_path using the fast synthetic objective)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from sweeper._optuna_compat import distribution_contains
from sweeper.space import distributions
from sweeper.spec import SweepSpec, parse_spec
from sweeper.spec.conditions import drop_inactive, is_active

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


def race_new_attempts(url: str, sweep: Any, index: int, after: Any, racers: int = 4
                      ) -> list[int | None]:
    """``racers`` threads, each on its own storage at ``url``, call ``new_attempt`` for
    ``index`` at the same moment; what each got (a trial id, or None for a loser)."""
    import threading

    from sweeper.space import grid_point
    from sweeper.study import open_storage

    created: list[int | None] = []
    barrier = threading.Barrier(racers)

    def retry() -> None:
        own = open_storage(url)
        barrier.wait()
        created.append(own.new_attempt(sweep.study_id, index, after=after,
                                   params=grid_point(sweep.spec, index)))

    threads = [threading.Thread(target=retry) for _ in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return created


def drop_database(admin: Any, name: str) -> None:
    """``DROP DATABASE .. WITH (FORCE)``, which ends the sessions of our own role; an autovacuum
    worker busy on the database belongs to the server, which a non-superuser may not signal
    ("pg_signal_backend"): wait for it to finish."""
    import time

    import sqlalchemy as sa

    for attempt in range(100):
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            return
        except sa.exc.ProgrammingError as e:
            if "pg_signal_backend" not in str(e) or attempt == 99:
                raise
            time.sleep(0.1)


def stop_process(proc: subprocess.Popen[Any], timeout_s: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not ended within ``timeout_s``; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def contains(spec: SweepSpec, params: dict[str, Any]) -> bool:
    """Whether params is exactly one point of the space (every active parameter, nothing
    else)."""
    dists = distributions(spec)
    if set(params) != set(drop_inactive(spec.parameters, params)) or \
            not set(params) <= set(dists):
        return False
    missing = [p for p in spec.parameters if p.name not in params
               and is_active(p, params)]
    if missing:
        return False
    dists = {n: d for n, d in dists.items() if n in params}
    try:
        return all(distribution_contains(d, params[n]) for n, d in dists.items())
    except (ValueError, TypeError):
        return False
