"""Commands on a spec file alone (no storage, no cluster): validate, plan, render."""

from __future__ import annotations

import json
from typing import Any

import click

from sweeper.cli._common import _errors, _job_options, _load
from sweeper.cli._group import cli


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


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Pods at once (default: the spec's parallelism).")
@_job_options
@_errors
def render(spec_file: str, parallelism: int | None, image: str | None, namespace: str | None,
           storage_secret: str | None, storage_proxy: str | None) -> None:
    """Print the Kubernetes objects `run --backend kubernetes` submits, as YAML (no storage,
    no cluster: for kubectl apply -f - or GitOps)."""
    import yaml

    from sweeper.backends.manifests import render as render_objects
    from sweeper.backends.manifests import with_kubernetes

    spec = _load(spec_file, check_entrypoint=False).with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret,
                           storage_proxy=storage_proxy)
    click.echo(yaml.safe_dump_all(render_objects(spec), sort_keys=False), nl=False)
