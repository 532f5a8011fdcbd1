"""``python -m benchmarks.run [--quick | --full] [--out FILE]`` (``make bench``).

Runs the benchmark items side by side with plain Optuna on the same PostgreSQL, prints a table
with each target and PASS/MISS, writes every figure (machine, versions, parameters, raw timings)
as JSON (default ``benchmarks/results/latest.json``, git-ignored) and the table as markdown
(default ``benchmarks/results.md``, the committed copy the documentation includes). Nothing
is asserted about time: a MISS is reported, never hidden, and the exit code is 0 unless a
section failed.

Sizes: the default finishes in a few minutes on 2 cores; ``--quick`` is a one-minute look;
``--full`` uses the issue's larger sizes (10 seeds, a 10,000-trial enqueue loop, ...).
PostgreSQL: ``SWEEPER_BENCH_PG`` or ``SWEEPER_TEST_PG`` (an admin URL with CREATEDB), else the
local test server of ``make postgres``; each measurement gets a fresh database, dropped after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.common import DISTURBED, REPO, Row, machine_info, versions

SIZES: dict[str, dict[str, Any]] = {
    # Seconds; for tests of the harness itself (tests/test_benchmarks_smoke.py), not figures.
    "tiny": {
        "n": [8], "t": 0.05, "w": 2, "repeats": 1,
        "enqueue_n": 400, "enqueue_loop_n": 40, "latency_sizes": (25, 400),
        "latency_samples": 5, "startup_repeats": 1, "per_trial_n": 5,
        "conn_w": 4, "conn_n": 8, "conn_t": 0.2,
        "dup_side": 4, "dup_w": 4, "dup_t": 0.02,
        "q_dims": 2, "q_trials": 12, "q_seeds": 1, "q_w": 2, "q_delay": 0.0,
        "p_dims": 2, "p_trials": 14, "p_seeds": 1, "p_w": 2, "p_functions": ("sphere",),
        "m_dims": 2, "m_trials": 10, "m_seeds": 1, "m_w": 2, "m_delay": 0.0,
        "m_functions": ("sphere",), "mo_dims": 3, "mo_trials": 10, "mo_population": 4,
        "mo_seeds": 1, "c_trials": 10, "c_seeds": 1,
        "px_threshold_ws": [2], "px_threshold_per_w": 2, "px_threshold_t": 0.05,
        "px_conn_w": 4, "px_conn_n": 8, "px_conn_t": 0.1,
        "px_cap_w": 2, "px_cap_n": 4, "px_cap_t": 0.05,
        "snap_mb": 1, "snap_repeats": 1,
        "gate_segments": (200, 400), "gate_repeats": 1,
    },
    "quick": {
        "n": [200], "t": 0.5, "w": 8, "repeats": 1,
        "enqueue_n": 10_000, "enqueue_loop_n": 300, "latency_sizes": (100, 10_000),
        "latency_samples": 40, "startup_repeats": 2, "per_trial_n": 40,
        "conn_w": 32, "conn_n": 64, "conn_t": 1.0,
        "dup_side": 8, "dup_w": 8, "dup_t": 0.1,
        "q_dims": 5, "q_trials": 100, "q_seeds": 1, "q_w": 8, "q_delay": 0.2,
        "p_dims": 5, "p_trials": 60, "p_seeds": 1, "p_w": 8, "p_methods": ("tpe", "cmaes", "qmc"),
        "m_dims": 5, "m_trials": 60, "m_seeds": 1, "m_w": 8, "m_delay": 0.2,
        "mo_dims": 5, "mo_trials": 80, "mo_population": 16, "mo_seeds": 1,
        "c_trials": 60, "c_seeds": 1,
        "px_threshold_ws": [8, 16], "px_threshold_per_w": 4, "px_threshold_t": 1.0,
        "px_conn_w": 32, "px_conn_n": 128, "px_conn_t": 0.5,
        "px_cap_w": 16, "px_cap_n": 64, "px_cap_t": 0.5,
        "snap_mb": 10, "snap_repeats": 2,
        "gate_segments": (5_000,), "gate_repeats": 3,
    },
    "default": {
        "n": [200, 600], "t": 0.5, "w": 8, "repeats": 1,
        "enqueue_n": 10_000, "enqueue_loop_n": 1_000, "latency_sizes": (100, 10_000),
        "latency_samples": 100, "startup_repeats": 3, "per_trial_n": 100,
        "conn_w": 32, "conn_n": 64, "conn_t": 1.0,
        "dup_side": 8, "dup_w": 8, "dup_t": 0.1,
        "q_dims": 5, "q_trials": 100, "q_seeds": 5, "q_w": 8, "q_delay": 0.2,
        "p_dims": 5, "p_trials": 60, "p_seeds": 2, "p_w": 8,
        "m_dims": 5, "m_trials": 60, "m_seeds": 2, "m_w": 8, "m_delay": 0.2,
        "mo_dims": 5, "mo_trials": 120, "mo_population": 20, "mo_seeds": 2,
        "c_trials": 100, "c_seeds": 3,
        "px_threshold_ws": [8, 16, 32], "px_threshold_per_w": 4, "px_threshold_t": 1.0,
        "px_conn_w": 64, "px_conn_n": 640, "px_conn_t": 0.5,
        "px_cap_w": 64, "px_cap_n": 640, "px_cap_t": 0.5,
        "snap_mb": 10, "snap_repeats": 3,
        "gate_segments": (5_000, 20_000), "gate_repeats": 5,
    },
    "full": {
        "n": [200, 2_000], "t": 0.5, "w": 8, "repeats": 2,
        "enqueue_n": 10_000, "enqueue_loop_n": 10_000, "latency_sizes": (100, 10_000),
        "latency_samples": 300, "startup_repeats": 5, "per_trial_n": 300,
        "conn_w": 32, "conn_n": 128, "conn_t": 1.0,
        "dup_side": 8, "dup_w": 8, "dup_t": 0.1,
        "q_dims": 5, "q_trials": 100, "q_seeds": 10, "q_w": 8, "q_delay": 0.2,
        "p_dims": 5, "p_trials": 60, "p_seeds": 30, "p_w": 8,
        "q_plain_parallel": True,
        "m_dims": 5, "m_trials": 100, "m_seeds": 3, "m_w": 8, "m_delay": 0.2,
        "mo_dims": 5, "mo_trials": 200, "mo_population": 20, "mo_seeds": 5,
        "c_trials": 100, "c_seeds": 10,
        "px_threshold_ws": [8, 16, 32, 64], "px_threshold_per_w": 4, "px_threshold_t": 1.0,
        "px_conn_w": 64, "px_conn_n": 640, "px_conn_t": 0.5,
        "px_cap_w": 64, "px_cap_n": 640, "px_cap_t": 0.5,
        "snap_mb": 10, "snap_repeats": 5,
        "gate_segments": (5_000, 20_000, 50_000), "gate_repeats": 7,
    },
}

SECTIONS = ("startup", "scaling", "duplicates", "connections", "overhead", "quality",
            "methods", "parallel", "proxy", "compute", "snapshots", "gate")


def _section(name: str) -> Callable[[dict[str, Any], Callable[[str], None]],
                                    tuple[list[Row], dict[str, Any]]]:
    import importlib

    module = importlib.import_module(f"benchmarks.{name}")
    fn: Callable[[dict[str, Any], Callable[[str], None]],
                 tuple[list[Row], dict[str, Any]]] = module.run
    return fn


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- output


def format_table(rows: list[Row]) -> str:
    headers = ("item", "measured", "target", "result")
    cells = [(r.item, r.measured, r.target, r.status) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip()
            for cell in cells]
    return "\n".join(out)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(result: dict[str, Any]) -> str:
    m, v = result["machine"], result["versions"]
    lines = [
        "# Benchmarks: sweeper side by side with plain Optuna",
        "",
        "Generated by `python -m benchmarks.run`; do not edit by hand, re-run it. Reproduce "
        "with `make bench` (default size, a few minutes on 2 cores) or `make bench "
        "BENCH_ARGS=--full` (the issue's larger sizes). Each item runs sweeper and plain Optuna "
        "on the same PostgreSQL server, each in a fresh database; figures are ratios because "
        "the machine is shared and noisy. Earlier runs, and what changed between them, are in "
        "the [benchmark history](history.md), which no run rewrites.",
        "",
        f"- date: {result['generated_at']}",
        f"- command: `{result['command']}` (size `{result['size']}`)",
        f"- machine: {m['nproc']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, "
        f"{m['platform']}; load average at start {_load(m)}",
        f"- versions: Python {v['python']}, sweeper {v['sweeper']}, optuna {v['optuna']}, "
        f"SQLAlchemy {v['sqlalchemy']}, psycopg2 {v['psycopg2']}, PostgreSQL "
        f"{v.get('postgresql')} (max_connections {v.get('postgresql_max_connections')})",
        f"- wall time of the whole run: {result['wall_s']:.0f} s",
        "",
        "| item | measured | target | result |",
        "|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(f"| {_md_cell(r['item'])} | {_md_cell(r['measured'])} | "
                     f"{_md_cell(r['target'])} | {r['status']} |")
    notes = result.get("notes") or []
    if notes:
        lines += ["", "Notes (computed from the figures above):", ""]
        lines += [f"- {n}" for n in notes]
    if result.get("disturbed_runs_repeated"):
        lines += ["", "Runs repeated because something outside the benchmark disturbed them "
                  "(the figures come from the undisturbed repeat):", ""]
        lines += [f"- {_md_cell(d.splitlines()[0])}" for d in result["disturbed_runs_repeated"]]
    if result.get("errors"):
        lines += ["", "Sections that failed:", ""]
        lines += [f"- {k}: {e.splitlines()[-1] if e else ''}" for k, e in
                  result["errors"].items()]
    lines += ["", "Raw timings, parameters and per-function figures are in the JSON the same run "
              "writes (`benchmarks/results/latest.json`, not committed).", ""]
    return "\n".join(lines)


def _block_markers(section: str) -> tuple[str, str]:
    return f"<!-- section {section}: generated -->", f"<!-- end section {section} -->"


def section_block(result: dict[str, Any], section: str) -> str:
    """One section's rows with the facts of the run that measured them, between markers, so
    a run of some sections (``--only``) replaces just their block in the markdown."""
    start, end = _block_markers(section)
    m, v = result["machine"], result["versions"]
    rows = result["sections"][section]["rows"]
    lines = [start, f"## Section `{section}`", "",
             f"From `{result['command']}` (size `{result['size']}`), {result['generated_at']}; "
             f"{m['nproc']} cores ({m['cpu_model']}), load average at start {_load(m)}; optuna "
             f"{v['optuna']}; this section took {result['sections'][section]['wall_s']:.0f} s. "
             "Where the table at the top has rows of this section, these replace them.",
             "", "| item | measured | target | result |", "|---|---|---|---|"]
    lines += [f"| {_md_cell(r['item'])} | {_md_cell(r['measured'])} | {_md_cell(r['target'])} "
              f"| {r['status']} |" for r in rows]
    # A section may explain its figures: raw["notes"], one bullet each.
    lines += ["", *(f"- {n}" for n in result["sections"][section]["raw"]["notes"])] \
        if result["sections"][section].get("raw", {}).get("notes") else []
    return "\n".join([*lines, end])


def merge_sections(previous: str, result: dict[str, Any]) -> str:
    """``previous`` (a generated results.md) with the blocks of the sections in ``result``
    replaced, or appended when it has none yet; everything else is kept as it was."""
    text = previous.rstrip("\n")
    for section in result["sections"]:
        start, end = _block_markers(section)
        block = section_block(result, section)
        if start in text and end in text:
            head, rest = text.split(start, 1)
            text = head + block + rest.split(end, 1)[1]
        else:
            text += "\n\n" + block
    return text + "\n"


def _load(m: dict[str, Any]) -> str:
    load = m.get("load_average_at_start")
    return " / ".join(f"{x:.2f}" for x in load) if load else "n/a"


def notes(result: dict[str, Any]) -> list[str]:
    """Where the time over ideal goes, derived from the recorded figures (not opinion)."""
    from benchmarks.common import median
    from benchmarks.overhead import target

    out: list[str] = []
    sec = result["sections"]
    for part in sec.values():  # a section's own notes (raw["notes"]), e.g. compute's
        out += part.get("raw", {}).get("notes", [])
    start = sec.get("startup", {}).get("raw", {})
    if start:
        pt = start["per_trial"]
        out.append(f"One runner process takes {median(start['startup']['runner_one_trial_s']):.2f}"
                   f" s to start and run a 0 s trial (imports "
                   f"{median(start['startup']['runner_imports_s']):.2f} s); in one process a 0 s "
                   f"trial costs {pt['sweeper_ms']:.1f} ms through the index protocol against "
                   f"{pt['plain_ms']:.1f} ms in plain study.optimize.")
    over = sec.get("overhead", {}).get("raw", {})
    for n in sorted({r["n"] for r in over.get("runs", [])}):
        runs = [r for r in over["runs"] if r["n"] == n and r["who"] == "sweeper"
                and r.get("phases", {}).get("ready_s")]
        if not runs:
            continue
        r = sorted(runs, key=lambda x: x["wall_s"])[len(runs) // 2]
        ph, t, w = r["phases"], over["t_s"], over["workers"]
        ideal = n * t / w
        ready = ph["ready_s"]
        stop = ph.get("stop_s", ph["end_s"])
        per_trial = (sum(stop - x for x in ready) - n * t) / n * 1000.0
        started = {"forked": ", forked", "exec": f", exec'd {result['machine']['nproc']} at a "
                   "time"}.get(ph.get("workers", ""), "")
        out.append(
            f"Overhead N={n}, ideal {ideal:.1f} s, {target(n):.2f}x budget "
            f"{(target(n) - 1) * ideal:.2f} s; where a "
            f"sweeper run of {r['wall_s']:.1f} s went: {ph['backend_s']:.2f} s to open the "
            f"storage and enqueue; "
            f"workers ready {median(ready) - ph['backend_s']:.2f} s later (median; last "
            f"{max(ready) - ph['backend_s']:.2f} s{started}); then {per_trial:.0f} ms per trial "
            f"per worker beyond the {t:g} s sleep "
            f"(database work and the idle tail); {ph['end_s'] - stop:.2f} s to stop the workers.")
    return out


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args, name, only = _arguments(argv)
    sizes = dict(SIZES[name], size=name)  # sections with sizes of their own key on the name
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Worker processes import benchmarks.objectives; the local backend puts the cwd on their path.
    os.chdir(REPO)
    os.environ.setdefault("SWEEPER_LOG_LEVEL", "WARNING")

    result = _run_sections(args, name, only, sizes)
    _print_table(result, name)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nJSON: {out}")
    _write_markdown(result, args, name, only)
    return 1 if result["errors"] else 0


def _arguments(argv: list[str] | None) -> tuple[argparse.Namespace, str, list[str]]:
    """(the parsed arguments, the size's name, the sections to run)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="about a minute, one size each")
    size.add_argument("--full", action="store_true", help="the issue's larger sizes")
    size.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "latest.json"),
                        help="JSON output (default: benchmarks/results/latest.json)")
    parser.add_argument("--markdown", help="markdown copy of the table (default: "
                        "benchmarks/results.md for the default and --full sizes, none for "
                        "--quick; '-' for none); with --only, an existing file keeps its "
                        "other figures and gets a block per section run")
    parser.add_argument("--only", help=f"comma-separated sections of {', '.join(SECTIONS)}")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",")] if args.only else list(SECTIONS)
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    return args, _size_name(args), only


def _size_name(args: argparse.Namespace) -> str:
    for name in ("full", "quick", "tiny"):
        if getattr(args, name):
            return name
    return "default"


def _run_sections(args: argparse.Namespace, name: str, only: list[str],
                  sizes: dict[str, Any]) -> dict[str, Any]:
    """Every section of ``only``, a broken one reported and the others still run: the
    result's record (rows, raw figures, errors, notes, the machine and versions)."""
    started = time.perf_counter()
    command = "python -m benchmarks.run"
    if name != "default":
        command += f" --{name}"
    if args.only:
        command += f" --only {shlex.quote(args.only)}"
    result: dict[str, Any] = {
        "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "size": name, "parameters": sizes, "machine": machine_info(), "versions": versions(),
        "sections": {}, "rows": [], "errors": {},
    }
    hint = "" if name == "full" else " (--full for the issue's larger sizes)"
    log(f"benchmarks, size {name!r}{hint}: {', '.join(only)}")
    for section in only:
        t0 = time.perf_counter()
        try:
            rows, raw = _section(section)(sizes, log)
        except Exception:  # noqa: BLE001 - one broken section is reported, the others still run
            result["errors"][section] = traceback.format_exc()
            log(f"{section} FAILED:\n{result['errors'][section]}")
            continue
        result["sections"][section] = {"rows": [r.as_dict() for r in rows], "raw": raw,
                                       "wall_s": time.perf_counter() - t0}
        result["rows"] += [r.as_dict() for r in rows]
    result["wall_s"] = time.perf_counter() - started
    result["disturbed_runs_repeated"] = list(DISTURBED)
    result["notes"] = notes(result)
    return result


def _print_table(result: dict[str, Any], name: str) -> None:
    table_rows = [Row(r["item"], r["measured"], r["target"], r["status"])
                  for r in result["rows"]]
    print(f"\nsweeper benchmarks, size {name} ({result['machine']['nproc']} cores, "
          f"{result['machine']['cpu_model']}; optuna {result['versions']['optuna']}, "
          f"PostgreSQL {result['versions'].get('postgresql')}); {result['wall_s']:.0f} s\n")
    print(format_table(table_rows))
    for n in result["notes"]:
        print(f"\nnote: {n}")
    if result["errors"]:
        print(f"\nFAILED sections: {', '.join(result['errors'])}")


def _write_markdown(result: dict[str, Any], args: argparse.Namespace, name: str,
                    only: list[str]) -> None:
    """The markdown copy: ``--markdown``, else benchmarks/results.md for the default and full
    sizes; a run of some sections replaces only their blocks in an existing file."""
    md_path = args.markdown
    if not md_path:
        md_path = str(REPO / "benchmarks" / "results.md") if name in ("default", "full") else "-"
    if md_path == "-":
        return
    md = Path(md_path)
    md.parent.mkdir(parents=True, exist_ok=True)
    if args.only is not None and md.exists():
        md.write_text(merge_sections(md.read_text(), result))
        print(f"markdown: {md} (sections {', '.join(only)} replaced)")
    else:
        md.write_text(markdown(result))
        print(f"markdown: {md}")

if __name__ == "__main__":
    sys.exit(main())
