"""The documentation site's generated pages, written when the site is built (docs/hooks.py).

- ``reference/cli.md`` walks the click command tree of ``sweeper.cli.cli``: every command, its
  usage line, help text and options, as ``--help`` prints them.
- ``reference/spec.md`` walks the spec model (``sweeper/spec/model.py``): for every section,
  the keys the validator accepts (``sweeper.spec.SPEC_KEYS``), each key's type
  and default from the frozen dataclass field of the same name, and a one-line description
  from ``docs/spec-keys.yml``. A key the validator accepts with no description there, or a
  description of a key it no longer accepts, is an error: the build (``mkdocs build --strict``)
  and ``tests/test_docs.py`` fail, so the page cannot drift from the code.
- ``reference/app.md``: ``sweeper.app``, the application layer, from its docstrings: every
  function it exports (signature, docstring) and every options or view dataclass (docstring,
  fields with their types and ``#:`` comments, properties and methods), by module; then the
  dataclasses of other modules those views hold (``StatusView.rows[i].status``), so a notebook
  user follows a view to its fields on one page;
- ``reference/trial-context.md``: ``trial_runner.TrialContext``, what user code receives: its
  docstring, then every public method and property with its signature and docstring, in
  source order.
- ``examples.md``: every spec of ``search_spaces/``, each with its leading comment (what it
  shows), the spec itself and the command that runs it.
- ``benchmarks/*.md``: the committed benchmark pages of ``benchmarks/``, included as they are.

Run on its own, ``python docs/gen_reference.py OUT_DIR`` writes the pages under OUT_DIR.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # document this checkout's code, not an installed copy
    sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Page:
    path: str  # relative to docs/
    text: str


def pages() -> list[Page]:
    return [Page("reference/cli.md", cli_page()), Page("reference/spec.md", spec_page()),
            Page("reference/trial-context.md", trial_context_page()),
            Page("reference/app.md", app_page()),
            Page("examples.md", examples_page()), *benchmark_pages()]


# --------------------------------------------------------------------------- TrialContext


def trial_context_page() -> str:
    from trial_runner import TrialContext

    out = ["# TrialContext", "",
           "`trial_runner.TrialContext` is what an `entrypoint` function receives as `ctx` "
           "(`from trial_runner import TrialContext, TrialPruned`). This page is generated "
           "from its docstrings.", "", inspect.cleandoc(TrialContext.__doc__ or ""), ""]
    for name, member in public_members(TrialContext):
        out += [f"## `{name}`", "", "```python", signature_line(name, member), "```", "",
                inspect.cleandoc(docstring_of(member)), ""]
    return "\n".join(out)


def public_members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties of ``cls``, in source order."""
    found = [(n, m) for n, m in vars(cls).items()
             if not n.startswith("_") and (isinstance(m, property) or inspect.isfunction(m))]
    return sorted(found, key=lambda nm: _function_of(nm[1]).__code__.co_firstlineno)


def _function_of(member: Any) -> Any:
    return member.fget if isinstance(member, property) else member


def docstring_of(member: Any) -> str:
    return _function_of(member).__doc__ or ""


class _Annotation(str):
    """An annotation as written in the source (``from __future__ import annotations`` keeps
    them as strings), shown without quotes."""

    def __repr__(self) -> str:
        return str(self)


def signature_line(name: str, member: Any) -> str:
    if isinstance(member, property):
        return f"ctx.{name}  # -> {inspect.signature(_function_of(member)).return_annotation}"
    sig = inspect.signature(member)
    params = [p.replace(annotation=_Annotation(p.annotation))
              if isinstance(p.annotation, str) else p
              for p in list(sig.parameters.values())[1:]]  # without self
    returns = sig.return_annotation
    sig = sig.replace(parameters=params, return_annotation=_Annotation(returns)
                      if isinstance(returns, str) else returns)
    return f"ctx.{name}{sig}"


# --------------------------------------------------------------------------- sweeper.app


def app_page() -> str:
    """``sweeper.app``: every exported function (signature and docstring) and every options
    or view dataclass (its docstring, fields, properties and methods), grouped by module in
    the order the package's docstring lists them; then the values those views hold (the
    dataclasses of other modules their fields name), so a reader can follow ``view.rows[0]``
    to its fields without leaving the page."""
    import sweeper.app as app

    out = ["# Application layer (Python API)", "",
           "`sweeper.app` holds one function per user action; the CLI only parses its options, "
           "calls these and renders what they return. Notebooks and scripts call them the "
           "same way: [Use sweeper from Python](../python.md) reads sweeps, "
           "[Run, grow, stop and delete sweeps](../running.md#from-python) launches and "
           "manages them. This page is generated from the docstrings.", "",
           _markdown(app.__doc__), ""]
    exported = app_exports()
    for module, names in exported.items():
        out += [f"## `{module}`", ""]
        for name in names:
            out += _member_section(name, getattr(app, name))
    held = held_values([getattr(app, n) for names in exported.values() for n in names])
    if held:
        out += ["## Values the views hold", "",
                "The dataclasses of other modules that the options and views above hold "
                "(`StatusView.rows[i].status` is an `IndexStatus`, and so on).", ""]
        for cls in held:
            out += _member_section(f"{cls.__module__}.{cls.__name__}", cls)
    return "\n".join(out)


def app_exports() -> dict[str, list[str]]:
    """``sweeper.app.__all__`` by defining module: the modules in the order the package's
    docstring names them (``:mod:`.status```), the others after them; names as listed."""
    import re

    import sweeper.app as app

    order = [f"sweeper.app.{m}" for m in re.findall(r":mod:`\.(\w+)`", app.__doc__ or "")]
    by_module: dict[str, list[str]] = {}
    for name in app.__all__:
        by_module.setdefault(getattr(app, name).__module__, []).append(name)
    rank = {m: k for k, m in enumerate(order)}
    return dict(sorted(by_module.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def _member_section(name: str, member: Any) -> list[str]:
    if dataclasses.is_dataclass(member) and isinstance(member, type):
        return [f"### class `{name}`", "", _markdown(class_doc(member)), "",
                *_fields_table(member), *_class_members(member)]
    if inspect.isfunction(member):
        return [f"### `{name}`", "", "```python", f"{name}{_plain_signature(member)}", "```",
                "", _markdown(member.__doc__), ""]
    return []


def class_doc(cls: type) -> str:
    """The class's own docstring ("" for the one dataclasses writes: ``Name(field, ...)``)."""
    doc = cls.__doc__ or ""
    return "" if doc.startswith(f"{cls.__name__}(") else doc


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines right above each field of ``cls`` in its source."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in lines:
        text = line.strip()
        if text.startswith("#:"):
            pending.append(text[2:].strip())
            continue
        head = text.split(":", 1)[0]
        if pending and ":" in text and head.isidentifier():
            found[head] = " ".join(pending)
        pending = []
    return found


def _fields_table(cls: type) -> list[str]:
    fields = dataclasses.fields(cls)
    if not fields:
        return []
    comments = field_comments(cls)
    rows = ["| field | type | what |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {_code(str(f.type))} | {_cell(_markdown(comments.get(f.name)))} |"
             for f in fields]
    return [*rows, ""]


def _class_members(cls: type) -> list[str]:
    """The public properties and methods a dataclass adds to its fields."""
    out: list[str] = []
    for name, member in public_members(cls):
        if isinstance(member, property):
            line = f"{name}  # -> {inspect.signature(_function_of(member)).return_annotation}"
        else:
            sig = _plain_signature(member)
            line = f"{name}{sig.replace(parameters=list(sig.parameters.values())[1:])}"
        out += [f"`{cls.__name__}.{line}`: {_markdown(docstring_of(member)) or '-'}", ""]
    return out


#: Where :func:`held_values` stops: the spec has its own reference page (reference/spec.md).
HELD_ELSEWHERE = "sweeper.spec"


def _named_dataclasses(cls: type) -> Iterator[type]:
    """The dataclasses of ``sweeper`` that the annotations of ``cls``'s fields name."""
    import re

    names = vars(sys.modules[cls.__module__])
    for f in dataclasses.fields(cls):
        for word in re.findall(r"[A-Za-z_]\w*", str(f.type)):
            found = names.get(word)
            if isinstance(found, type) and dataclasses.is_dataclass(found) \
                    and found.__module__.startswith("sweeper.") \
                    and not found.__module__.startswith(HELD_ELSEWHERE):
                yield found


def held_values(roots: Sequence[Any], depth: int = 2) -> list[type]:
    """The dataclasses outside ``sweeper.app`` (and the spec) that the fields of the
    dataclasses in ``roots`` name, and up to ``depth`` levels down those their fields name,
    in the order met. ``sweeper.app``'s own dataclasses are looked through, not counted."""
    seen: list[type] = []
    level = [r for r in roots if dataclasses.is_dataclass(r) and isinstance(r, type)]
    done: set[type] = set(level)
    for _ in range(depth):
        found_here: list[type] = []
        while level:
            for found in _named_dataclasses(level.pop(0)):
                if found in done:
                    continue
                done.add(found)
                if found.__module__.startswith("sweeper.app"):
                    level.append(found)  # one of the page's own: look through it
                else:
                    found_here.append(found)
        seen += found_here
        level = list(found_here)
    return seen


def _markdown(doc: str | None) -> str:
    """A reST docstring as Markdown: roles (``:func:`x```) and double backquotes as code."""
    import re

    text = re.sub(r":[a-z]+:`~?\.?([^`]+)`", r"`\1`", inspect.cleandoc(doc or ""))
    return text.replace("``", "`")


def _plain_signature(fn: Any) -> inspect.Signature:
    sig = inspect.signature(fn)
    params = [p.replace(annotation=_Annotation(p.annotation), default=p.default)
              if isinstance(p.annotation, str) else p for p in sig.parameters.values()]
    returns = sig.return_annotation
    return sig.replace(parameters=params, return_annotation=_Annotation(returns)
                       if isinstance(returns, str) else returns)


# --------------------------------------------------------------------------- examples


def examples_page() -> str:
    import yaml

    out = ["# Examples", "",
           "Every spec in `search_spaces/`, runnable as it is from the repository's root "
           "(`make install` first). Generated from the files.", ""]
    for path in sorted((REPO / "search_spaces").glob("*.yaml")):
        text = path.read_text()
        lines = text.splitlines()
        comment = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
        body = "\n".join(line for line in lines if not line.startswith("#")).strip()
        name = yaml.safe_load(text)["name"]
        out += [f"## {name}", "", " ".join(comment) or "(no description)", "",
                "```yaml", body, "```", "", "```sh",
                f"sweeper run search_spaces/{path.name}", "```", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- the CLI


def commands() -> Iterator[tuple[str, click.Command, click.Context]]:
    """(full name, command, its context) for the group and every command under it, in the
    order ``--help`` lists them."""
    from sweeper.cli import cli

    def walk(cmd: click.Command, ctx: click.Context, path: str) -> Iterator[
            tuple[str, click.Command, click.Context]]:
        yield path, cmd, ctx
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk(sub, click.Context(sub, info_name=name, parent=ctx),
                                    f"{path} {name}")

    yield from walk(cli, click.Context(cli, info_name="sweeper"), "sweeper")


def _help_text(cmd: click.Command) -> str:
    text = inspect.cleandoc((cmd.help or "").split("\f", 1)[0])
    lines = (line for line in text.splitlines() if line.strip() != "\b")
    return html.escape("\n".join(lines), quote=False)


def _cell(text: str) -> str:
    """Plain text for one table cell (a pipe would end the cell)."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _code(text: str) -> str:
    """A code span for one table cell (the tables extension keeps its pipes)."""
    return f"`{' '.join(text.split())}`" if text else ""


def option_rows(cmd: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    """(``--option METAVAR``, help with click's [default: ...]) for every option, as
    ``--help`` shows them (the help option included)."""
    rows = []
    for param in cmd.get_params(ctx):
        if not isinstance(param, click.Option):  # arguments are in the usage line
            continue
        record = param.get_help_record(ctx)
        if record is not None:
            rows.append(record)
    return rows


def cli_page() -> str:
    from sweeper.errors import EXIT_CODES

    out = ["# CLI reference", "",
           "Generated from the click commands of `sweeper.cli` when this site is built: the "
           "same text as `sweeper COMMAND --help`. The [guide](../running.md) shows the "
           "commands at work.", "", "## Exit codes", "",
           "Every command exits with one of these (`sweeper.errors.EXIT_CODES`); an error is "
           "one line on stderr, no traceback (`-v` shows it).", "",
           "| code | meaning |", "|---|---|"]
    out += [f"| {code} | {_cell(meaning)} |" for code, meaning in EXIT_CODES]
    out.append("")
    for path, cmd, ctx in commands():
        out += [f"## `{path}`", "", _help_text(cmd), "", "```text", cmd.get_usage(ctx), "```",
                ""]
        if isinstance(cmd, click.Group):
            subs = [f"`{path} {name}`" for name in cmd.list_commands(ctx)]
            out += ["Commands: " + ", ".join(subs) + ".", ""]
        rows = option_rows(cmd, ctx)
        if rows:
            out += ["| option | what |", "|---|---|"]
            out += [f"| {_code(opt)} | {_cell(what)} |" for opt, what in rows]
            out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class Section:
    path: str  # the dotted path of the section in the YAML ("" for the top level)
    keys: Sequence[str]  # what the validator accepts there
    model: type | None  # the dataclass whose fields give types and defaults
    title: str


def sections() -> list[Section]:
    from sweeper.spec import SPEC_KEYS, k8s_model, model

    models: dict[str, tuple[type | None, str]] = {
        "": (model.SweepSpec, "Top level"),
        "trial": (model.TrialSpec, "`trial:`"),
        "trial.resources": (model.Resources, "`trial.resources:`"),
        "trial.metrics": (model.MetricsSpec, "`trial.metrics:`"),
        "parameters.NAME": (model.Parameter, "`parameters:` (one entry per parameter)"),
        "stop": (model.StopSpec, "`stop:`"),
        "scheduler": (model.SchedulerSpec, "`scheduler:`"),
        "budget": (model.BudgetSpec, "`budget:`"),
        "cost": (model.CostSpec, "`cost:`"),
        "artifacts": (model.ArtifactsSpec, "`artifacts:`"),
        "data": (model.DataSpec, "`data:`"),
        "kubernetes": (k8s_model.KubernetesSpec, "`kubernetes:`"),
        "kubernetes.volumes[]": (k8s_model.Volume, "`kubernetes.volumes:` (a list)"),
        "kubernetes.tolerations[]": (None, "`kubernetes.tolerations:` (a list, as in a pod "
                                           "spec)"),
    }
    missing = sorted(set(SPEC_KEYS) - set(models))
    if missing:
        raise SpecDrift(f"sections of SPEC_KEYS with no page section: {', '.join(missing)}")
    return [Section(path, SPEC_KEYS[path], *models[path]) for path in SPEC_KEYS]


#: Model fields that are not spec keys of the same name: field -> the keys that set it
#: (an empty tuple: not a key at all, the spec's own bookkeeping).
FIELD_KEYS: Mapping[str, tuple[str, ...]] = {
    "SweepSpec.objectives": ("objective",),
    "SweepSpec.open_ended": ("trials",),  # trials left out beside a budget
    "SweepSpec.source": (), "SweepSpec.base_dir": (), "SweepSpec.warnings": (),
    "Parameter.name": (),  # the key under parameters:
    "Volume.kind": ("pvc", "config_map", "secret", "nfs", "empty_dir"),
    "Volume.source": ("pvc", "config_map", "secret"),
    "Volume.server": ("nfs",), "Volume.path": ("nfs",), "Volume.size_limit": ("empty_dir",),
    "DataSpec.bucket": ("s3",), "DataSpec.prefix": ("s3",),
    "Objective.metric": ("objective",), "Objective.direction": ("objective",),
    "Pruner.type": ("pruner",), "Pruner.options": ("pruner",),
    "SchedulerSpec.pbt": ("perturbation_interval", "quantile_fraction", "resample_probability",
                          "perturbation_factors"),
}

#: One line per key the validator accepts, by dotted path (types and defaults come from the
#: model, not from there).
DESCRIPTIONS_FILE = Path(__file__).with_name("spec-keys.yml")


def descriptions() -> dict[str, str]:
    import yaml

    data = yaml.safe_load(DESCRIPTIONS_FILE.read_text())
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise SpecDrift(f"{DESCRIPTIONS_FILE}: expected a mapping of dotted key to one line")
    return {str(k): v for k, v in data.items()}


class SpecDrift(Exception):
    """The spec model and docs/spec-keys.yml disagree."""


def _dotted(section: Section, key: str) -> str:
    return f"{section.path}.{key}" if section.path else key


#: Where the YAML's default is not the model field's (computed elsewhere, or no field).
def _default_overrides() -> dict[str, str]:
    from sweeper.study.stop import BRAKE_RULE, DEFAULT_BRAKE

    return {"trials": "grid: the grid's size", "objective": "required",
            "storage": "`sqlite:///sweeps.db`",
            "stop.max_failed_trials": f"- (`{BRAKE_RULE}` brake: {DEFAULT_BRAKE})",
            "pruner": "`{type: none}`"}


def _type_name(annotation: str) -> str:
    """The model's annotation, read as YAML: unset is the default column's `-`."""
    from sweeper.spec.model import METHODS

    text = annotation.replace(" | None", "")
    if text == "Method":
        return " | ".join(METHODS)
    if text.startswith("Literal["):
        return text[len("Literal["):-1].replace("'", "").replace(", ", " | ")
    return text


def _default(model: type | None, key: str) -> tuple[str, str]:
    """(type, default) of a key from the model field of the same name; ("", "") if none."""
    if model is None:
        return "", ""
    f = {f.name: f for f in dataclasses.fields(model)}.get(key)
    if f is None:
        return "", ""
    typ = _type_name(str(f.type))
    if f.default is not dataclasses.MISSING:
        value: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return typ, "required"
    return typ, "see below" if dataclasses.is_dataclass(value) else _yaml_value(value)


def _yaml_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Mapping):
        return "`{}`" if not value else f"`{dict(value)}`"
    if isinstance(value, tuple | list):
        return "`[]`" if not value else f"`{list(value)}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def check_descriptions() -> None:
    accepted = {_dotted(s, k) for s in sections() for k in s.keys}
    described = set(descriptions())
    missing = sorted(accepted - described)
    stale = sorted(described - accepted)
    if missing or stale:
        raise SpecDrift(f"{DESCRIPTIONS_FILE.name}: "
                        + (f"no description for {', '.join(missing)}; " if missing else "")
                        + (f"describes keys the validator does not accept: {', '.join(stale)}"
                           if stale else ""))
    for s in sections():
        if s.model is None:
            continue
        for f in dataclasses.fields(s.model):
            field_name = f"{s.model.__name__}.{f.name}"
            unknown = [k for k in FIELD_KEYS.get(field_name, (f.name,)) if k not in s.keys]
            if unknown:
                raise SpecDrift(f"model field {field_name} is no key of "
                                f"{s.path or 'the top level'} ({', '.join(unknown)}); map it "
                                "in FIELD_KEYS")


def _docstring(model: type | None) -> str:
    doc = model.__doc__ if model is not None else None
    # A dataclass without a docstring gets "Name(field: type, ...)": not documentation.
    if model is None or not doc or doc.startswith(f"{model.__name__}("):
        return ""
    return inspect.cleandoc(doc).replace("``", "`")


def _methods_table() -> list[str]:
    from sweeper.spec.registry import METHOD_INFO

    rows = ["| `method:` | sets | `sampler:` takes | objectives | sweeper sets |",
            "|---|---|---|---|---|"]
    for name, info in METHOD_INFO.items():
        sets = "planned (enqueued up front)" if info.planned else "adaptive (asked at start)"
        options = f"`{info.options_class}` keywords" if info.options_class else "-"
        if info.only:
            options += " (" + ", ".join(f"`{o}`" for o in sorted(info.only)) + " only)"
        defaults = ", ".join(f"`{k}: {str(v).lower()}`" for k, v in info.defaults.items())
        rows.append(f"| `{name}` | {sets} | {options} | {info.objectives} | {defaults or '-'} |")
    return rows


def _pruners() -> str:
    from sweeper.spec.registry import PRUNERS, pruner_class

    return ", ".join(f"`{p}` (`optuna.pruners.{pruner_class(p).__name__}`)" for p in PRUNERS)


def spec_page() -> str:
    check_descriptions()
    what = descriptions()
    overrides = _default_overrides()
    out = ["# Spec reference", "",
           "Every key a spec file may hold, generated from the spec model "
           "(`sweeper/spec/model.py`) and the keys the validator accepts when this site is "
           "built. Any other key is an error with a suggestion (`paralellism`: did you mean "
           "'parallelism'?); a mistake is one line naming the file, the line and the field, "
           "exit code 2. Types are the model's; `-` means unset. The guide "
           "[Writing a sweep](../spec.md) shows them in use.", ""]
    for s in sections():
        out += [f"## {s.title}", ""]
        doc = _docstring(s.model)
        if doc:
            out += [doc, ""]
        if s.path == "":
            out += ["Methods (`method:`), from `sweeper/spec/registry.py`:", "",
                    *_methods_table(), "", f"Pruners (`pruner: {{type: ...}}`): {_pruners()}.",
                    ""]
        out += ["| key | type | default | what |", "|---|---|---|---|"]
        for key in s.keys:
            dotted = _dotted(s, key)
            typ, default = _default(s.model, key)
            default = overrides.get(dotted, default)
            out.append(f"| `{dotted}` | {_code(typ)} | {default} | {what[dotted]} |")
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- benchmarks


#: Committed pages of benchmarks/ shown on the site, as they are.
BENCHMARK_PAGES = ("history.md", "results.md", "results-proxy.md")


def benchmark_pages() -> list[Page]:
    return [Page(f"benchmarks/{name}", (REPO / "benchmarks" / name).read_text())
            for name in BENCHMARK_PAGES]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python docs/gen_reference.py OUT_DIR", file=sys.stderr)
        return 2
    for page in pages():
        target = Path(argv[0]) / page.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page.text)
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
