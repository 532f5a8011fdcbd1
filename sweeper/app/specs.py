"""What a spec file alone gives (no storage, no cluster, except where ``render`` publishes
the code): :func:`validate` (the normalised spec's summary), :func:`plan` (JOB_ID ->
hyperparameter set) and :func:`render` (the Kubernetes objects ``run --backend kubernetes``
submits). Each returns a view model with its renderings beside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sweeper import protocol
from sweeper.app.options import JobOverrides
from sweeper.app.sweeps import load_spec_file
from sweeper.report import format_table
from sweeper.spec import SweepSpec

Say = Callable[[str], None]


# --------------------------------------------------------------------------- validate


@dataclass(frozen=True)
class Validation:
    """A valid spec: ``notes`` and ``warnings`` (stderr lines without their prefix)."""

    file: str
    spec: SweepSpec
    notes: tuple[str, ...]
    warnings: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        """``validate --format json``: the normalised spec's summary."""
        spec = self.spec
        normalised = spec.to_dict()
        return {"valid": True, "file": self.file, "name": spec.name, "method": spec.method,
                "indexes": spec.index_count, "parallelism": spec.parallelism,
                "objectives": [{"metric": o.metric, "direction": o.direction}
                               for o in spec.objectives],
                "parameters": normalised["parameters"], "trial": normalised["trial"],
                "spec_hash": spec.spec_hash, "warnings": list(self.warnings)}

    def text(self) -> str:
        """One line: ``ok: NAME: METHOD, N indexes, ...``."""
        spec = self.spec
        what = spec.trial.entrypoint or "command " + " ".join(spec.trial.command or ())
        what = what.splitlines()[0][:60] + ("..." if len(what) > 60 or "\n" in what else "")
        n = len(spec.parameters)
        size = "open-ended (until the budget is spent)" if spec.open_ended else \
            f"{spec.trials} {'index' if spec.trials == 1 else 'indexes'}"
        return (f"ok: {spec.name}: {spec.method}, {size}, {n} "
                f"{'parameter' if n == 1 else 'parameters'}, objective "
                + ", ".join(f"{o.direction} {o.metric}" for o in spec.objectives)
                + f", trial {what}")


def validate(spec_file: str, *, check_imports: bool = True,
             overrides: tuple[str, ...] = ()) -> Validation:
    """Check a spec file: schema, ranges, grid size, and (``check_imports``) the entrypoint
    importable and the command's script found, unless the spec names the image it runs in.
    Raises SpecError."""
    from sweeper.spec.paths import image_paths_note
    from sweeper.spec.pod_security import pod_security_warnings

    spec = load_spec_file(spec_file, check_entrypoint=check_imports, overrides=overrides,
                          image_paths=True)
    note = image_paths_note(spec) if check_imports else None
    return Validation(spec_file, spec, (note,) if note else (),
                      (*spec.warnings, *pod_security_warnings(spec, overrides)))


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Plan:
    """JOB_ID -> hyperparameter set of a grid, random or qmc sweep (the first ``limit``);
    an adaptive one (``sets`` None) asks its sampler when each trial starts."""

    spec: SweepSpec
    sets: tuple[tuple[int, dict[str, Any]], ...] | None
    limit: int | None = None

    def record(self) -> dict[str, Any]:
        spec = self.spec
        record: dict[str, Any] = {"name": spec.name, "method": spec.method,
                                  "indexes": spec.trials, "adaptive": self.sets is None}
        if self.sets is not None:
            record["sets"] = [{"job_id": i, "params": p} for i, p in self.sets]
        return record

    def text(self) -> str:
        spec = self.spec
        if self.sets is None:
            return (f"{spec.name}: {spec.trials} indexes, method {spec.method}: adaptive "
                    f"(each runner asks the sampler when it starts)\n{_ranges(spec)}")
        names = [p.name for p in spec.parameters]
        # A parameter whose when: condition does not hold in a set is not part of it: an
        # empty cell ("-" would read as a value).
        table = format_table(["JOB_ID", *names], [[i, *(p.get(n, "") for n in names)]
                                                  for i, p in self.sets])
        lines = [line.rstrip() for line in table.splitlines()]
        if self.limit is not None and self.limit < spec.trials:
            lines.append(f"... {spec.trials - self.limit} more")
        return "\n".join(lines)


def plan(spec_file: str, *, limit: int | None = None,
         overrides: tuple[str, ...] = ()) -> Plan:
    """The planned sets of the spec's indexes (the first ``limit``). Raises SpecError."""
    from sweeper.space import planned_sets

    spec = load_spec_file(spec_file, check_entrypoint=False, overrides=overrides)
    if spec.is_adaptive:
        return Plan(spec, None, limit)
    sets = []
    for i, params in planned_sets(spec):
        if limit is not None and i >= limit:
            break
        sets.append((i, params))
    return Plan(spec, tuple(sets), limit)


def _ranges(spec: SweepSpec) -> str:
    rows = []
    for p in spec.parameters:
        row: list[Any]
        if p.values is not None or p.choices is not None:
            row = [p.name, p.type, ", ".join(map(str, p.values or p.choices or ())), "", ""]
        else:
            row = [p.name, p.type, f"[{p.low}, {p.high}]", p.step or "", "yes" if p.log else ""]
        if spec.is_conditional:
            row.append(" and ".join(f"{parent} in {list(allowed)}" if len(allowed) > 1
                                    else f"{parent} = {allowed[0]}" for parent, allowed in p.when))
        rows.append(row)
    headers = ["parameter", "type", "range", "step", "log"]
    return format_table(headers + (["when"] if spec.is_conditional else []), rows)


# --------------------------------------------------------------------------- render


@dataclass(frozen=True)
class RenderOptions:
    """``parallelism`` None: the spec's. ``storage``: without an artifact store, keep the code
    snapshot in this study storage (creating or resuming the sweep's record there).
    ``new_code``: the code changed since the sweep last ran, its remaining trials run the new
    snapshot."""

    parallelism: int | None = None
    job: JobOverrides = field(default_factory=JobOverrides)
    overrides: tuple[str, ...] = ()
    storage: str | None = None
    new_code: bool = False


def render(spec_file: str, options: RenderOptions, say: Say) -> list[dict[str, Any]]:
    """The Kubernetes objects ``run --backend kubernetes`` submits: the ConfigMap NAME-spec
    and the Job (a JobSet when trial.nodes > 1), the code snapshot published where the pods
    fetch it. Notes and warnings go to ``say``. Raises SweeperError."""
    from sweeper.backends.manifests import checkpoint_warning, with_kubernetes
    from sweeper.backends.manifests import render as render_objects
    from sweeper.spec import KubernetesSpec, durable_checkpoints_error
    from sweeper.spec.pod_security import pod_security_warnings

    spec = load_spec_file(spec_file, check_entrypoint=False, overrides=options.overrides)
    spec = spec.with_overrides(parallelism=options.parallelism)
    job = options.job
    spec = with_kubernetes(spec, image=job.image, namespace=job.namespace,
                           storage_secret=job.storage_secret, storage_proxy=job.storage_proxy)
    if (e := durable_checkpoints_error(spec)) is not None:
        raise e
    code = _publish_code(spec, options.storage, options.new_code, say)
    default_image = KubernetesSpec().image
    if spec.kubernetes.image == default_image and code is None:
        say(f"note: no kubernetes.image in the spec and no --image: the Job runs "
            f"{default_image}, which holds only sweeper's built-in examples; publish the code "
            "as a snapshot (an artifact store) or build it into an image FROM it "
            "(docs/your-cluster.md)")
    if spec.trial.nodes > 1:  # gangs of pods: a JobSet (sweeper.backends.jobset)
        from sweeper.backends.jobset import render as render_jobset

        objects = render_jobset(spec, code=code)
    else:
        objects = render_objects(spec, code=code)
    warning = checkpoint_warning(spec)
    for line in ([warning] if warning else []) + pod_security_warnings(spec, options.overrides):
        say(f"warning: {line}")
    return objects


def render_yaml(objects: list[dict[str, Any]]) -> str:
    import yaml

    return str(yaml.safe_dump_all(objects, sort_keys=False))


def _publish_code(spec: SweepSpec, storage: str | None, new_code: bool,
                  say: Say) -> str | None:
    """Upload the spec's code snapshot where the rendered Job's pods fetch it: the artifact
    store, else (with ``storage``) the sweep's study, whose record render then creates or
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
        from sweeper.study import create_or_resume, open_storage
        from sweeper.study.urls import redact

        check_fits(spec, code, storage)
        opened = open_storage(storage)
        recorded, ran = recorded_code(opened, spec.name)
        code = replace(code, recorded=recorded, ran=ran)
        line = check_change(spec.name, code, new_code=new_code, refuse=True)
        if line:
            say(f"note: {line}")
        sweep, _ = create_or_resume(opened, spec)
        publish(sweep, code, storage, upload=True)
        where = f"stored in sweep {spec.name} at {redact(storage)}"
    else:
        say("warning: no artifact store (artifacts.store: s3, or a filesystem path every pod "
            "mounts) and no --storage: render cannot publish the code snapshot, so the pods "
            "import the code from the image; set one, or trial.code: null to say so")
        return None
    say(f"{summary(code)} {where}")
    for warning in code.snapshot.warnings:
        say(f"warning: the code snapshot: {warning}")
    return str(code.snapshot.digest)
