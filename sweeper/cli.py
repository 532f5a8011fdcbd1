"""The ``sweeper`` command. Click only: parse arguments, call the library, print.

Results go to stdout, diagnostics and progress to stderr. Every SweeperError becomes one line
and its exit code (2: bad input or unreachable storage, 1: some index failed, 3: backend);
no traceback for user mistakes (``-v`` shows them).
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sweeper import __version__
from sweeper.errors import SpecError, SweeperError, SweepFailedError

logger = logging.getLogger("sweeper")
F = TypeVar("F", bound=Callable[..., Any])
EXIT_INTERRUPTED = 130


def _errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SweeperError as e:
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                logger.exception("details")
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)

    return wrapper  # type: ignore[return-value]


storage_option = click.option(
    "--storage", metavar="URL",
    help="Study storage: sqlite:///file.db or postgresql://user:pw@host/db "
         "(default: $SWEEPER_STORAGE, then the spec's storage:, then sqlite:///sweeps.db).")
format_option = click.option("--format", "fmt", type=click.Choice(["table", "json", "yaml"]),
                             default="table", show_default=True, help="Output format.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sweeper")
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv: debug).")
def cli(verbose: int) -> None:
    """Hyperparameter sweeps: a YAML search space -> an Optuna study -> indexed trial runners,
    on local processes or as one Kubernetes Indexed Job."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("sweeper").setLevel(min(level, logging.INFO) if verbose else level)
    for noisy in ("sqlalchemy", "alembic", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING if verbose < 2 else logging.INFO)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING if verbose < 2 else optuna.logging.INFO)


# --------------------------------------------------------------------------- validate / plan


def _load(path: str, *, check_entrypoint: bool) -> Any:
    from sweeper.spec import load_spec

    spec = load_spec(path)
    if check_entrypoint and spec.trial.entrypoint:
        from sweeper.entrypoint import load_entrypoint

        load_entrypoint(spec.trial.entrypoint, source=spec.source)
    if check_entrypoint and spec.trial.command:
        import shutil

        exe = spec.trial.command[0]
        if "{" not in exe and shutil.which(exe) is None and not Path(exe).exists():
            raise SpecError(f"command {exe!r} not found on PATH", source=spec.source,
                            field="trial.command")
    return spec


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--no-import", is_flag=True,
              help="Do not import the entrypoint (it lives only in the trial image).")
@_errors
def validate(spec_file: str, no_import: bool) -> None:
    """Check a spec file: schema, ranges, grid size, entrypoint importable."""
    spec = _load(spec_file, check_entrypoint=not no_import)
    what = spec.trial.entrypoint or "command " + " ".join(spec.trial.command)
    what = what.splitlines()[0][:60] + ("..." if len(what) > 60 or "\n" in what else "")
    click.echo(f"ok: {spec.name}: {spec.method}, {spec.trials} indexes, "
               f"{len(spec.parameters)} parameters, objective "
               + ", ".join(f"{o.direction} {o.metric}" for o in spec.objectives)
               + f", trial {what}")


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--limit", type=int, default=None, help="Show only the first N indexes.")
@_errors
def plan(spec_file: str, fmt: str, limit: int | None) -> None:
    """Show JOB_ID -> hyperparameter set (grid, random); tpe is adaptive."""
    from sweeper.space import planned_sets

    spec = _load(spec_file, check_entrypoint=False)
    names = [p.name for p in spec.parameters]
    if spec.is_adaptive:
        rows = [{"job_id": i, "params": "adaptive"} for i in range(spec.trials)][:limit]
        if fmt == "json":
            click.echo(json.dumps({"name": spec.name, "method": spec.method,
                                   "indexes": spec.trials, "adaptive": True}, indent=2))
            return
        click.echo(f"{spec.name}: {spec.trials} indexes, method {spec.method}: adaptive "
                   "(each runner asks the sampler when it starts)")
        click.echo(_ranges(spec))
        return
    sets = []
    for i, params in planned_sets(spec):
        if limit is not None and i >= limit:
            break
        sets.append((i, params))
    if fmt == "json":
        click.echo(json.dumps({"name": spec.name, "method": spec.method,
                               "indexes": spec.trials, "adaptive": False,
                               "sets": [{"job_id": i, "params": p} for i, p in sets]},
                              indent=2))
        return
    from sweeper.report import format_table

    click.echo(format_table(["JOB_ID", *names], [[i, *(p[n] for n in names)] for i, p in sets]))
    if limit is not None and limit < spec.trials:
        click.echo(f"... {spec.trials - limit} more")


def _ranges(spec: Any) -> str:
    from sweeper.report import format_table

    rows = []
    for p in spec.parameters:
        if p.values is not None or p.choices is not None:
            rows.append([p.name, p.type, ", ".join(map(str, p.values or p.choices)), "", ""])
        else:
            rows.append([p.name, p.type, f"[{p.low}, {p.high}]", p.step or "", "yes" if p.log
                         else ""])
    return format_table(["parameter", "type", "range", "step", "log"], rows)


# --------------------------------------------------------------------------- run


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@storage_option
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Trials at once (default: the spec's parallelism).")
@click.option("--backend", type=click.Choice(["local", "kubernetes"]), default="local",
              show_default=True)
@click.option("--log-dir", type=click.Path(file_okay=False), default=".sweeper/logs",
              show_default=True, help="Local backend: one log file per index under NAME/.")
@_errors
def run(spec_file: str, storage: str | None, parallelism: int | None, backend: str,
        log_dir: str) -> None:
    """Create (or resume) the sweep and run every index that has no finished trial."""
    from sweeper.study import resolve_storage_url

    spec = _load(spec_file, check_entrypoint=backend == "local")
    spec = spec.with_overrides(parallelism=parallelism)
    url = resolve_storage_url(storage, spec)
    if backend == "local":
        from sweeper.backends.local import LocalBackend

        impl: Any = LocalBackend(Path(log_dir) / spec.name)
    else:
        raise click.UsageError("the kubernetes backend is not available in this build")
    _launch(spec, url, impl, resume_only=False)


def _launch(spec: Any, url: str, backend: Any, *, resume_only: bool) -> None:
    from sweeper.report import Progress
    from sweeper.study import create_or_resume, index_table, open_storage, redact, \
        unfinished_indexes

    storage = open_storage(url)
    sweep, created = create_or_resume(storage, spec)
    todo = unfinished_indexes(index_table(storage, spec, sweep.study_id))
    done = spec.trials - len(todo)
    click.echo(f"sweep {spec.name}: {spec.method}, {spec.trials} indexes, parallelism "
               f"{spec.parallelism}, backend {backend.name}, storage {redact(url)}", err=True)
    if not created:
        click.echo(f"resuming: {done} of {spec.trials} indexes already finished", err=True)
    progress = Progress(sweep)
    result = None
    if todo:
        try:
            result = backend.run(sweep, todo, storage_url=url, parallelism=spec.parallelism,
                                 tick=progress.tick)
        finally:
            progress.close()
    _summary(sweep, url)
    if result is not None and result.detached:
        return
    if result is not None and result.interrupted:
        click.echo("interrupted: running trials were stopped and marked FAIL; run the same "
                   "command again to finish the missing indexes", err=True)
        sys.exit(EXIT_INTERRUPTED)
    missing = unfinished_indexes(index_table(storage, spec, sweep.study_id))
    if missing:
        raise SweepFailedError(f"{len(missing)} index(es) failed for good: "
                               f"{_ranges_of(missing)}; see `sweeper status {spec.name}`")


def _ranges_of(indexes: list[int]) -> str:
    out: list[str] = []
    for i in sorted(indexes):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = out[-1].split("-")[0] + f"-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _summary(sweep: Any, url: str) -> None:
    from sweeper.report import format_table, top_trials
    from sweeper.study import redact

    study = sweep.study()
    top = top_trials(study, 5)
    metrics = [o.metric for o in sweep.spec.objectives]
    names = [p.name for p in sweep.spec.parameters]
    if top:
        title = "Pareto-optimal trials" if len(metrics) > 1 else "best trials"
        click.echo(f"\n{title} of {sweep.name}:")
        click.echo(format_table(["trial", "index", *metrics, *names], [
            [t.number, t.user_attrs.get("sweeper:index"), *(t.values or []),
             *(t.params.get(n) for n in names)] for t in top]))
    else:
        click.echo(f"\n{sweep.name}: no complete trial yet")
    storage_flag = "" if url == "sqlite:///sweeps.db" else f" --storage '{redact(url)}'"
    click.echo(f"\ncompare trials: sweeper dashboard {sweep.name}{storage_flag}", err=True)


# --------------------------------------------------------------------------- status / best


def _open_sweep(name: str, storage: str | None) -> tuple[Any, str]:
    from sweeper.study import load_sweep, open_storage, resolve_storage_url

    url = resolve_storage_url(storage)
    return load_sweep(open_storage(url), name), url


@cli.command()
@click.argument("name")
@storage_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@_errors
def status(name: str, storage: str | None, fmt: str) -> None:
    """Trial counts by state and the per-index table."""
    from sweeper.report import format_table
    from sweeper.study import index_table, state_counts

    sweep, _ = _open_sweep(name, storage)
    counts = state_counts(sweep.storage, sweep.study_id)
    table = index_table(sweep.storage, sweep.spec, sweep.study_id)
    metrics = [o.metric for o in sweep.spec.objectives]
    finished = sum(1 for s in table if s.state in ("COMPLETE", "PRUNED"))
    if fmt == "json":
        click.echo(json.dumps({
            "name": sweep.name, "method": sweep.spec.method, "indexes": sweep.spec.trials,
            "finished_indexes": finished, "trials_by_state": counts,
            "per_index": [{"index": s.index, "state": s.state, "attempts": s.attempts,
                           "trial_number": s.trial_number,
                           "values": dict(zip(metrics, s.values, strict=False))
                           if s.values else None} for s in table]}, indent=2))
        return
    click.echo(f"{sweep.name}: {finished}/{sweep.spec.trials} indexes finished; trials: "
               + ", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())))
    click.echo(format_table(["index", "state", "attempts", "trial", *metrics], [
        [s.index, s.state, s.attempts, s.trial_number, *(s.values or [None] * len(metrics))]
        for s in table]))


@cli.command()
@click.argument("name")
@storage_option
@click.option("--format", "fmt", type=click.Choice(["json", "yaml", "table"]), default="json",
              show_default=True)
@_errors
def best(name: str, storage: str | None, fmt: str) -> None:
    """The best trial (every Pareto-optimal trial for multi-objective sweeps)."""
    from sweeper.report import best_trials, dumps, format_table, trial_record

    sweep, _ = _open_sweep(name, storage)
    metrics = [o.metric for o in sweep.spec.objectives]
    trials = best_trials(sweep.study())
    if not trials:
        raise SweepFailedError(f"sweep {name!r} has no complete trial yet")
    records = [trial_record(t, metrics) for t in trials]
    if fmt == "table":
        names = [p.name for p in sweep.spec.parameters]
        click.echo(format_table(["trial", "index", *metrics, *names], [
            [r["number"], r["index"], *(r["values"] or {}).values(),
             *(r["params"].get(n) for n in names)] for r in records]))
        return
    data: Any = records[0] if len(metrics) == 1 else {"pareto_front": records}
    if len(metrics) == 1:
        data = {"study": name, "directions": [o.direction for o in sweep.spec.objectives],
                **records[0]}
    else:
        data = {"study": name, "directions": [o.direction for o in sweep.spec.objectives],
                "pareto_front": records}
    click.echo(dumps(data, fmt))


# --------------------------------------------------------------------------- dashboard


@cli.command()
@click.argument("name", required=False)
@storage_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8080, show_default=True)
@_errors
def dashboard(name: str | None, storage: str | None, host: str, port: int) -> None:
    """Serve optuna-dashboard on the sweep storage (works while a sweep runs)."""
    from sweeper.study import load_sweep, open_storage, redact, resolve_storage_url

    url = resolve_storage_url(storage)
    store = open_storage(url)
    path = "/dashboard"
    if name:
        sweep = load_sweep(store, name)
        path = f"/dashboard/studies/{sweep.study_id}"
    click.echo(f"optuna-dashboard for {redact(url)} on http://{host}:{port}{path} "
               "(Ctrl-C to stop)", err=True)
    import optuna_dashboard

    try:
        optuna_dashboard.run_server(store, host=host, port=port)
    except OSError as e:
        raise SweeperError(f"cannot serve on {host}:{port}: {e.strerror}") from None
    except KeyboardInterrupt:
        pass


def main() -> None:
    cli(prog_name="sweeper")


if __name__ == "__main__":
    main()
