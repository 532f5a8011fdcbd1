"""The digits sweep and the torchrun launcher on a GPU machine: throughput and GPU utilisation.

Run from the repository root on a machine with an NVIDIA GPU, in an environment that has
sweeper's dependencies (``python -m tools.gpu_check --out DIR``). Three runs, each a real
``sweeper run`` of the local backend on SQLite:

* ``digits_tpe.yaml`` as shipped (2 workers, both on the GPU);
* the same sweep with 8 workers packed onto one GPU (``trial.resources.gpu: 0.125``);
* ``digits_ddp.yaml`` under ``launcher: torchrun`` with one rank per GPU (NCCL).

While each runs, ``nvidia-smi`` samples utilisation and memory every 250 ms. The table printed
at the end (and ``DIR/gpu_check.json``) gives each run's wall time, trials by state, the
training throughput the digits example returns (``train_samples_per_s``, median and sum over
trials) and the GPU's mean and peak utilisation. Not part of ``make test``: CI has no GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

RUNS: dict[str, tuple[str, list[str]]] = {
    "digits-tpe, 2 workers": ("digits_tpe.yaml", []),
    "digits-tpe, 8 workers on 1 GPU": ("digits_tpe.yaml", [
        "--set", "parallelism=8", "--set", "trials=32", "--set", "trial.resources.gpu=0.125"]),
    "digits-ddp, torchrun 1 rank/GPU": ("digits_ddp.yaml", [
        "--set", "trial.resources.gpu=1", "--set", "trial.nproc=null",
        "--set", "trial.fixed.epochs=12", "--set", "trials=4"]),
}


def _smi(path: Path) -> subprocess.Popen[bytes]:
    with path.open("wb") as out:
        return subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used",
             "--format=csv,noheader,nounits", "-lms", "250"], stdout=out)


def _utilisation(path: Path) -> dict[str, float]:
    util, mem = [], []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and all(p.replace(".", "").isdigit() for p in parts):
            util.append(float(parts[0]))
            mem.append(float(parts[1]))
    if not util:
        return {}
    return {"gpu_util_mean_pct": round(statistics.fmean(util), 1), "gpu_util_peak_pct": max(util),
            "gpu_mem_peak_mib": max(mem), "samples": len(util)}


def _trials(db: Path, name: str) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    states: dict[str, int] = {}
    rates, devices = [], set()
    for t in study.trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
        rate = t.user_attrs.get("train_samples_per_s")
        if isinstance(rate, (int, float)):
            rates.append(float(rate))
        devices.add(str(t.user_attrs.get("sweeper:device")))
    best = study.best_trial.value if states.get("COMPLETE") else None
    return {"states": states, "devices": sorted(devices), "best": best,
            "samples_per_s_median": round(statistics.median(rates), 1) if rates else None,
            "samples_per_s_max": round(max(rates), 1) if rates else None}


def run_one(label: str, spec: str, extra: list[str], out: Path, k: int) -> dict[str, Any]:
    name = "digits-tpe" if spec.startswith("digits_tpe") else "digits-ddp"
    db = out / f"run{k}.db"
    smi_file = out / f"smi{k}.csv"
    smi = _smi(smi_file)
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", "from sweeper.cli import main; main()", "run",
         str(REPO / "search_spaces" / spec), "--storage", f"sqlite:///{db}",
         "--log-dir", str(out / f"logs{k}"), "--format", "json", *extra],
        capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - began
    smi.terminate()
    smi.wait()
    row: dict[str, Any] = {"run": label, "exit": proc.returncode, "wall_s": round(wall, 1)}
    if proc.returncode not in (0, 1):
        row["stderr"] = proc.stderr[-2000:]
        return row
    row.update(_trials(db, name))
    row.update(_utilisation(smi_file))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check"))
    parser.add_argument("--only", action="append", help="run labels to run (default: all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, (label, (spec, extra)) in enumerate(RUNS.items()):
        if args.only and not any(o in label for o in args.only):
            continue
        row = run_one(label, spec, extra, args.out, k)
        print(json.dumps(row), flush=True)
        rows.append(row)
    (args.out / "gpu_check.json").write_text(json.dumps(rows, indent=1))
    print("\n| run | wall s | trials | device | samples/s median (max) | GPU util mean / peak "
          "| GPU mem peak |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['wall_s']} | {r.get('states')} | {r.get('devices')} | "
              f"{r.get('samples_per_s_median')} ({r.get('samples_per_s_max')}) | "
              f"{r.get('gpu_util_mean_pct')} % / {r.get('gpu_util_peak_pct')} % | "
              f"{r.get('gpu_mem_peak_mib')} MiB |")
    return 0 if all(r["exit"] in (0, 1) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
