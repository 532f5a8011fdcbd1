"""Where the overhead comes from (no targets; explains item 1): a trial runner's start-up as a
fresh process, and the per-trial database work of the index protocol against plain Optuna's
``study.optimize`` loop, both with zero-second trials in one process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from typing import Any

from benchmarks.common import (
    REPO,
    Row,
    fresh_database,
    median,
    optuna_storage,
    plain_env,
    undisturbed,
)


def _python(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=REPO, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def runner_startup(repeats: int) -> dict[str, Any]:
    """Wall time of ``python -m trial_runner`` running one 0 s trial, and of its imports."""
    from benchmarks.sweeps import sleep_spec
    from sweeper.spec import parse_spec_dict
    from sweeper.study import create_or_resume
    from sweeper.study.sql import open_sql_store

    with fresh_database("startup") as (_, url):
        storage = open_sql_store(url)
        create_or_resume(storage, parse_spec_dict(sleep_spec("bench-startup", repeats + 1, 0.0,
                                                             1), source="<benchmark>"))
        storage.close()
        env = dict(plain_env(), SWEEPER_STORAGE=url, SWEEPER_STUDY="bench-startup",
                   SWEEPER_LOG_LEVEL="WARNING")
        imports = [_python(["-c", "import trial_runner.main"], env) for _ in range(repeats)]
        interpreter = [_python(["-c", "pass"], env) for _ in range(repeats)]
        runs = [_python(["-m", "trial_runner", "--index", str(i)], dict(env, JOB_ID=str(i)))
                for i in range(repeats)]
        plain = [_python(["-c", "import optuna, optuna.storages, sqlalchemy.orm"], env)
                 for _ in range(repeats)]
    return {"interpreter_s": interpreter, "runner_imports_s": imports, "runner_one_trial_s": runs,
            "plain_optuna_imports_s": plain}


def command_startup(repeats: int) -> dict[str, Any]:
    """A ``trial.command`` trial (``sh -c 'echo loss=1'``) from the start of its pod's runner
    to the end of the trial's container, as one pod runs it: the runner starting the program
    itself (one container, ``python -m trial_runner``) against the split pod of an image
    without sweeper (sweeper.shim: the runner and the shim, run by /bin/sh here, started
    together, timed until the shim exits with the runner's code; the runner, a sidecar, is
    then stopped as the kubelet stops it). Container start-up itself is the cluster's, not
    measured here."""
    import signal
    import tempfile

    from benchmarks.sweeps import spec_dict
    from sweeper import protocol, shim
    from sweeper.spec import parse_spec_dict
    from sweeper.study import create_or_resume
    from sweeper.study.sql import open_sql_store

    doc = spec_dict("bench-command", method="random", trials=2 * repeats, parallelism=1,
                    entrypoint="unused:unused",
                    parameters={"x1": {"type": "float", "low": -5.0, "high": 5.0}})
    doc["trial"] = {"command": ["sh", "-c", "echo loss=1"], "retries": 0}

    def split(index: int, env: dict[str, str]) -> float:
        with tempfile.TemporaryDirectory(prefix="bench-shim-") as d:
            t0 = time.perf_counter()
            sh = subprocess.Popen(["/bin/sh", "-c", shim.SCRIPT, "sweeper-shim", d])
            runner = subprocess.Popen(
                [sys.executable, "-m", "trial_runner", "--index", str(index)], cwd=REPO,
                env=dict(env, JOB_ID=str(index), **{protocol.ENV_EXCHANGE_DIR: d}),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            code = sh.wait()
            took = time.perf_counter() - t0
            runner.send_signal(signal.SIGTERM)
            runner.wait(timeout=60)
        if code != protocol.EXIT_OK:
            raise RuntimeError(f"the shim of index {index} exited {code}")
        return took

    with fresh_database("command_startup") as (_, url):
        storage = open_sql_store(url)
        create_or_resume(storage, parse_spec_dict(doc, source="<benchmark>"))
        storage.close()
        env = dict(plain_env(), SWEEPER_STORAGE=url, SWEEPER_STUDY="bench-command",
                   SWEEPER_LOG_LEVEL="WARNING")
        one, beside = [], []
        for i in range(repeats):  # in turn, so that a busy moment of the machine hits both
            one.append(_python(["-m", "trial_runner", "--index", str(2 * i)],
                               dict(env, JOB_ID=str(2 * i))))
            beside.append(split(2 * i + 1, env))
    return {"one_container_s": one, "beside_s": beside}


def per_trial(n: int) -> dict[str, Any]:
    """Mean in-process cost of one 0 s trial: sweeper's run_index (claim, trial, report, tell)
    against plain ``study.optimize`` with an objective doing the same (2 params, 1 report)."""
    import optuna

    from benchmarks.plain import _objective
    from benchmarks.sweeps import sleep_spec
    from sweeper.entrypoint import load_entrypoint
    from sweeper.spec import parse_spec_dict
    from sweeper.study import create_or_resume
    from sweeper.study.sql import open_sql_store
    from trial_runner.runner import RunnerSettings, run_index

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with fresh_database("per_trial") as (_, url):
        spec = parse_spec_dict(sleep_spec("bench-per-trial", n, 0.0, 1), source="<benchmark>")
        storage = open_sql_store(url)
        sweep, _ = create_or_resume(storage, spec)
        objective = load_entrypoint("trial_runner.examples.synthetic:sleep")
        settings = RunnerSettings(checkpoint_root=REPO / ".sweeper" / "bench-checkpoints")
        run_index(sweep, 0, objective, settings)  # warm-up
        t0 = time.perf_counter()
        for i in range(1, n):
            run_index(sweep, i, objective, settings)
        sweeper_ms = (time.perf_counter() - t0) / (n - 1) * 1000.0
        storage.close()

        plain_storage = optuna_storage(url)
        study = optuna.create_study(study_name="bench-plain-per-trial", storage=plain_storage,
                                    sampler=optuna.samplers.RandomSampler(seed=0))
        obj = _objective(2, 0.0, grid=False)
        study.optimize(obj, n_trials=1)
        t0 = time.perf_counter()
        study.optimize(obj, n_trials=n - 1)
        plain_ms = (time.perf_counter() - t0) / (n - 1) * 1000.0
        plain_storage.engine.dispose()
    return {"n": n, "sweeper_ms": sweeper_ms, "plain_ms": plain_ms}


def run(sizes: dict[str, Any], log: Any) -> tuple[list[Row], dict[str, Any]]:
    os.environ.setdefault("SWEEPER_LOG_LEVEL", "WARNING")
    log("startup: trial runner process start-up")
    st = undisturbed(partial(runner_startup, sizes["startup_repeats"]), "runner start-up", log)
    log("startup: a command trial's runner in one container vs beside the shim")
    cmd = undisturbed(partial(command_startup, sizes["startup_repeats"]),
                      "command trial start-up", log)
    log("startup: per-trial database work, sweeper run_index vs plain study.optimize")
    pt = undisturbed(partial(per_trial, sizes["per_trial_n"]), "per-trial cost", log)
    runner, imports = median(st["runner_one_trial_s"]), median(st["runner_imports_s"])
    beside, one = median(cmd["beside_s"]), median(cmd["one_container_s"])
    rows = [
        Row("runner start-up (python -m trial_runner, one 0 s trial)",
            f"{runner * 1000:.0f} ms wall (imports {imports * 1000:.0f} ms, bare interpreter "
            f"{median(st['interpreter_s']) * 1000:.0f} ms; plain optuna imports "
            f"{median(st['plain_optuna_imports_s']) * 1000:.0f} ms)", "-", "INFO",
            {"runner_s": runner, "imports_s": imports}),
        Row("command trial start-up: runner beside the shim (an image without sweeper) vs "
            "in one container",
            f"{beside * 1000:.0f} ms vs {one * 1000:.0f} ms = {beside / one:.2f}", "-", "INFO",
            {"beside_s": beside, "one_container_s": one}),
        Row("per-trial cost in one process (0 s trial)",
            f"sweeper run_index {pt['sweeper_ms']:.1f} ms vs plain optimize "
            f"{pt['plain_ms']:.1f} ms = {pt['sweeper_ms'] / pt['plain_ms']:.2f}", "-", "INFO",
            dict(pt)),
    ]
    return rows, {"startup": st, "command_startup": cmd, "per_trial": pt}
