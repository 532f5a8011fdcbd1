"""The documentation cannot drift from the code: the generated CLI page names every command
and option of ``sweeper.cli``, the generated spec page every key the validator accepts and
every field of the spec model; the README stays a front page whose links resolve. No network,
no MkDocs: the generator is plain Python (``make docs`` builds the site itself)."""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest
import yaml

from sweeper.cli import cli
from sweeper.spec import SPEC_KEYS, SweepSpec, k8s_model, model

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _commands(group: click.Group, ctx: click.Context, path: str) -> list[
        tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        out.append((f"{path} {name}", cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, click.Context(cmd, info_name=name, parent=ctx), f"{path} {name}")
    return out


def _section(page: str, heading: str) -> str:
    """The text under ``## `heading``` up to the next second-level heading."""
    start = page.index(f"## `{heading}`\n")
    end = page.find("\n## ", start + 1)
    return page[start:end if end != -1 else len(page)]


def test_the_cli_page_names_every_command_and_option(gen: ModuleType) -> None:
    page = gen.cli_page()
    commands = _commands(cli, click.Context(cli, info_name="sweeper"), "sweeper")
    assert len(commands) >= 15
    for path, cmd in [("sweeper", cli), *commands]:
        section = _section(page, path)
        for param in cmd.params:
            names = [*param.opts, *param.secondary_opts] if isinstance(param, click.Option) \
                else [param.human_readable_name]
            for name in names:
                assert name in section, f"{path}: {name} is missing from reference/cli.md"
        first_help_line = (cmd.help or "").strip().splitlines()[0]
        assert html.escape(first_help_line, quote=False) in section, path


def test_the_cli_page_lists_every_exit_code(gen: ModuleType) -> None:
    from sweeper.errors import EXIT_CODES, SweeperError

    page = gen.cli_page()
    table = page[page.index("## Exit codes\n"):page.index("## `sweeper`")]
    codes = {code for code, _ in EXIT_CODES}
    for code, _ in EXIT_CODES:
        assert f"\n| {code} | " in table, code
    assert {0, 1, 2, 3, 75, 130} <= codes

    def subclasses(cls: type) -> list[type]:
        return [cls, *(c for s in cls.__subclasses__() for c in subclasses(s))]

    raised = {cls.exit_code for cls in subclasses(SweeperError)  # type: ignore[attr-defined]
              if cls.__module__.startswith("sweeper.")}
    assert raised <= codes, raised - codes  # every error's code is documented


def test_every_spec_key_and_model_field_is_on_the_spec_page(gen: ModuleType) -> None:
    page = gen.spec_page()
    for path, keys in SPEC_KEYS.items():
        for key in keys:
            dotted = f"{path}.{key}" if path else key
            assert f"| `{dotted}` |" in page, f"{dotted} is missing from reference/spec.md"
    # Every field of every dataclass of the model is a key on the page, or one the generator
    # maps to the keys that set it (FIELD_KEYS), or bookkeeping (compare=False: not a key).
    classes = [c for module in (model, k8s_model)
               for _, c in inspect.getmembers(module, inspect.isclass)
               if dataclasses.is_dataclass(c) and c.__module__ == module.__name__]
    assert {SweepSpec, model.TrialSpec, model.StopSpec, k8s_model.Volume} <= set(classes)
    for cls in classes:
        for f in dataclasses.fields(cls):
            if not f.compare:
                continue
            for key in gen.FIELD_KEYS.get(f"{cls.__name__}.{f.name}", (f.name,)):
                assert re.search(rf"\| `(?:[\w.\[\]]+\.)?{re.escape(key)}` \|", page), \
                    f"model field {cls.__name__}.{f.name} ({key}) is missing from the spec page"


def test_a_spec_key_without_a_description_fails_the_build(
        gen: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    described = yaml.safe_load((DOCS / "spec-keys.yml").read_text())
    del described["stop.patience"]
    described["stop.gone"] = "a key the validator does not accept"
    partial = tmp_path / "spec-keys.yml"
    partial.write_text(yaml.safe_dump(described))
    monkeypatch.setattr(gen, "DESCRIPTIONS_FILE", partial)
    with pytest.raises(gen.SpecDrift, match=r"no description for stop\.patience.*stop\.gone"):
        gen.spec_page()


def test_the_spec_page_takes_defaults_from_the_model(gen: ModuleType) -> None:
    page = gen.spec_page()
    assert "| `parallelism` | `int` | `1` |" in page
    assert f"| `kubernetes.image` | `str` | `{k8s_model.KubernetesSpec().image}` |" in page
    assert "| `trial.retries` | `int` | `1` |" in page


def test_the_nav_names_every_page_and_every_page_exists(gen: ModuleType) -> None:
    config = (REPO / "mkdocs.yml").read_text()
    nav = re.findall(r"^\s+- [^:\n]+: (\S+\.md)$", config, re.M)
    generated = {p.path for p in gen.pages()}
    for page in nav:
        assert (DOCS / page).is_file() or page in generated, page
    written = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert written | generated == set(nav), "a page is missing from mkdocs.yml's nav"


def test_the_readme_is_a_front_page() -> None:
    text = (REPO / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) < 150
    assert lines[0] == "# sweeper" and lines[2] == "```sh"
    assert lines[3].startswith("make demo ") and lines[4].startswith("make test ")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+://", target):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"



def test_the_trial_context_reference_documents_every_public_member(gen: ModuleType) -> None:
    from trial_runner import TrialContext

    members = gen.public_members(TrialContext)
    assert {"report", "should_prune", "save_checkpoint", "load_checkpoint", "device"} <= \
        {name for name, _ in members}
    undocumented = [name for name, m in members if not gen.docstring_of(m).strip()]
    assert undocumented == [], "TrialContext members without a docstring: " \
        f"{undocumented} (docs/reference/trial-context.md would show them bare)"
    page = gen.trial_context_page()
    for name, _ in members:
        assert f"## `{name}`" in page and f"ctx.{name}" in page


def test_the_examples_page_shows_every_spec_of_search_spaces(gen: ModuleType) -> None:
    import yaml

    page = gen.examples_page()
    for path in sorted((REPO / "search_spaces").glob("*.yaml")):
        spec = yaml.safe_load(path.read_text())
        assert f"## {spec['name']}\n" in page, path.name
        assert f"sweeper run search_spaces/{path.name}" in page
        assert path.read_text().splitlines()[0].startswith("#"), \
            f"{path.name} has no leading comment saying what it shows"


def test_the_app_reference_documents_every_export_and_what_its_views_hold(
        gen: ModuleType) -> None:
    import sweeper.app as app

    page = gen.app_page()
    exported = gen.app_exports()
    assert sorted(n for names in exported.values() for n in names) == sorted(app.__all__)
    # The modules in the order the package's docstring lists them: status before results.
    modules = list(exported)
    assert modules.index("sweeper.app.status") < modules.index("sweeper.app.results")
    undocumented = []
    for name in app.__all__:
        member = getattr(app, name)
        if dataclasses.is_dataclass(member):
            assert f"### class `{name}`" in page, name
            doc = gen.class_doc(member)
            for f in dataclasses.fields(member):
                assert f"| `{f.name}` |" in page, f"{name}.{f.name}"
        else:
            assert f"### `{name}`" in page and f"\n{name}(" in page, name
            doc = member.__doc__ or ""
        if not doc.strip():
            undocumented.append(name)
    assert undocumented == [], f"sweeper.app exports without a docstring: {undocumented}"
    from sweeper.report import Rung
    from sweeper.study.values import IndexStatus

    held = gen.held_values([app.StatusView, app.SweepList])
    assert IndexStatus in held and Rung in held
    assert not [c for c in held if c.__module__.startswith(("sweeper.spec", "sweeper.app"))]
    for cls in held:
        assert f"### class `{cls.__module__}.{cls.__name__}`" in page
    # A field's ``#:`` comment is its description on the page.
    assert "| `finished_indexes` | `int` | Indexes whose latest attempt is COMPLETE or " \
           "PRUNED. |" in page
