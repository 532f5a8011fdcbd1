"""Commands on a spec file alone (no storage, no cluster): validate, plan, render."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import click

from sweeper import protocol
from sweeper.cli._common import _errors, _job_options, _load, set_option
from sweeper.cli._group import cli


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--no-import", is_flag=True,
              help="Do not import the entrypoint or look for the command's script (they live "
                   "only in the trial image).")
@set_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: the normalised spec's summary on stdout.")
@_errors
def validate(spec_file: str, no_import: bool, overrides: tuple[str, ...], fmt: str) -> None:
    """Check a spec file: schema, ranges, grid size, entrypoint importable, the command's
    script found (unless the spec names the image it runs in: its paths are the image's)."""
    from sweeper.spec.paths import image_paths_note
    from sweeper.spec.pod_security import pod_security_warnings

    spec = _load(spec_file, check_entrypoint=not no_import, overrides=overrides,
                 image_paths=True)
    note = image_paths_note(spec) if not no_import else None
    if note:
        click.echo(f"note: {note}", err=True)
    warnings = [*spec.warnings, *pod_security_warnings(spec, overrides)]
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    if fmt == "json":
        normalised = spec.to_dict()
        click.echo(json.dumps({
            "valid": True, "file": spec_file, "name": spec.name, "method": spec.method,
            "indexes": spec.index_count, "parallelism": spec.parallelism,
            "objectives": [{"metric": o.metric, "direction": o.direction}
                           for o in spec.objectives],
            "parameters": normalised["parameters"], "trial": normalised["trial"],
            "spec_hash": spec.spec_hash, "warnings": warnings}, indent=2))
        return
    what = spec.trial.entrypoint or "command " + " ".join(spec.trial.command)
    what = what.splitlines()[0][:60] + ("..." if len(what) > 60 or "\n" in what else "")
    n = len(spec.parameters)
    size = "open-ended (until the budget is spent)" if spec.open_ended else \
        f"{spec.trials} {'index' if spec.trials == 1 else 'indexes'}"
    click.echo(f"ok: {spec.name}: {spec.method}, {size}, {n} "
               f"{'parameter' if n == 1 else 'parameters'}, objective "
               + ", ".join(f"{o.direction} {o.metric}" for o in spec.objectives)
               + f", trial {what}")


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--limit", type=int, default=None, help="Show only the first N indexes.")
@set_option
@_errors
def plan(spec_file: str, fmt: str, limit: int | None, overrides: tuple[str, ...]) -> None:
    """Show JOB_ID -> hyperparameter set (grid, random, qmc); the adaptive methods (tpe, gp,
    cmaes, nsga2, nsga3) ask their sampler when a trial starts."""
    from sweeper.space import planned_sets

    spec = _load(spec_file, check_entrypoint=False, overrides=overrides)
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

    # A parameter whose when: condition does not hold in a set is not part of it: an empty
    # cell ("-" would read as a value).
    table = format_table(["JOB_ID", *names], [[i, *(p.get(n, "") for n in names)]
                                              for i, p in sets])
    click.echo("\n".join(line.rstrip() for line in table.splitlines()))
    if limit is not None and limit < spec.trials:
        click.echo(f"... {spec.trials - limit} more")


def _ranges(spec: Any) -> str:
    from sweeper.report import format_table

    rows = []
    for p in spec.parameters:
        if p.values is not None or p.choices is not None:
            row = [p.name, p.type, ", ".join(map(str, p.values or p.choices)), "", ""]
        else:
            row = [p.name, p.type, f"[{p.low}, {p.high}]", p.step or "", "yes" if p.log else ""]
        if spec.is_conditional:
            row.append(" and ".join(f"{parent} in {list(allowed)}" if len(allowed) > 1
                                    else f"{parent} = {allowed[0]}" for parent, allowed in p.when))
        rows.append(row)
    headers = ["parameter", "type", "range", "step", "log"]
    return format_table(headers + (["when"] if spec.is_conditional else []), rows)


def _publish_code(spec: Any, storage: str | None, new_code: bool) -> str | None:
    """Upload the spec's code snapshot where the rendered Job's pods fetch it: the artifact
    store, else (with ``--storage``) the sweep's study, whose record render then creates or
    resumes; None with a warning when there is neither."""
    from sweeper.code.launch import (
        check_change,
        check_fits,
        prepare,
        publish,
        recorded_code,
        summary,
    )
    from sweeper.code.stores import open_code_store, store_kind

    code = prepare(spec, None)
    if code is None:
        return None
    if store_kind(spec.artifacts) == "artifacts":
        store = open_code_store(spec, protocol.DEFAULT_STORAGE, None, None)
        where = f"{'uploaded to' if store.put(code.snapshot) else 'already in'} {store.where}"
    elif storage:
        from sweeper.study import create_or_resume, open_storage, redact

        check_fits(spec, code, storage)
        opened = open_storage(storage)
        recorded, ran = recorded_code(opened, spec.name)
        code = replace(code, recorded=recorded, ran=ran)
        line = check_change(spec.name, code, new_code=new_code, refuse=True)
        if line:
            click.echo(f"note: {line}", err=True)
        sweep, _ = create_or_resume(opened, spec)
        publish(sweep, code, storage, upload=True)
        where = f"stored in sweep {spec.name} at {redact(storage)}"
    else:
        click.echo("warning: no artifact store (artifacts.store: s3, or a filesystem path every "
                   "pod mounts) and no --storage: render cannot publish the code snapshot, so "
                   "the pods import the code from the image; set one, or trial.code: null to "
                   "say so", err=True)
        return None
    click.echo(f"{summary(code)} {where}", err=True)
    for warning in code.snapshot.warnings:
        click.echo(f"warning: the code snapshot: {warning}", err=True)
    return str(code.snapshot.digest)


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--parallelism", "-p", type=click.IntRange(min=1),
              help="Pods at once (default: the spec's parallelism).")
@_job_options
@set_option
@click.option("--storage", metavar="URL",
              help="Without an artifact store: keep the code snapshot in this study storage "
                   "(the one the pods use), creating or resuming the sweep's record there.")
@click.option("--code", "code_choice", type=click.Choice(["new"]), default=None,
              help="new: with --storage, the code changed since the sweep last ran; its "
                   "remaining trials run the new snapshot (default: exit code 2).")
@_errors
def render(spec_file: str, parallelism: int | None, image: str | None, namespace: str | None,
           storage_secret: str | None, storage_proxy: str | None,
           overrides: tuple[str, ...], storage: str | None, code_choice: str | None) -> None:
    """Print the Kubernetes objects `run --backend kubernetes` submits, as YAML (no storage,
    no cluster): the ConfigMap NAME-spec and the Job (a JobSet when trial.nodes > 1). With an
    artifact store, the code snapshot (trial.code) is uploaded there and the Job names it.
    Without one, --storage keeps it in the study (render then creates the sweep's record).
    Applied on their own (kubectl apply -f -, GitOps), the first trial runner creates the
    sweep from the spec."""
    import yaml

    from sweeper.backends.manifests import checkpoint_warning, with_kubernetes
    from sweeper.backends.manifests import render as render_objects
    from sweeper.spec import KubernetesSpec, durable_checkpoints_error
    from sweeper.spec.pod_security import pod_security_warnings

    spec = _load(spec_file, check_entrypoint=False, overrides=overrides)
    spec = spec.with_overrides(parallelism=parallelism)
    spec = with_kubernetes(spec, image=image, namespace=namespace, storage_secret=storage_secret,
                           storage_proxy=storage_proxy)
    if (e := durable_checkpoints_error(spec)) is not None:
        raise e
    code = _publish_code(spec, storage, code_choice == "new")
    default_image = KubernetesSpec().image
    if spec.kubernetes.image == default_image and code is None:
        click.echo(f"note: no kubernetes.image in the spec and no --image: the Job runs "
                   f"{default_image}, which holds only sweeper's built-in examples; publish "
                   "the code as a snapshot (an artifact store) or build it into an image FROM "
                   "it (docs/your-cluster.md)", err=True)
    if spec.trial.nodes > 1:  # gangs of pods: a JobSet (sweeper.backends.jobset)
        from sweeper.backends.jobset import render as render_jobset

        objects = render_jobset(spec, code=code)
    else:
        objects = render_objects(spec, code=code)
    warning = checkpoint_warning(spec)
    for line in ([warning] if warning else []) + pod_security_warnings(spec, overrides):
        click.echo(f"warning: {line}", err=True)
    click.echo(yaml.safe_dump_all(objects, sort_keys=False), nl=False)
