"""The import graph of ``sweeper`` and ``trial_runner``, built from the code: every ``import``
and ``from ... import`` of every module, those inside functions (deferred imports) and
``if TYPE_CHECKING:`` blocks included, between the modules of the two packages. A module's
name in a string (``importlib``, ``python -m``) is not an import.

Rules about the graph (issue 26, "no cycles, no upward imports"):

- no import cycle at all;
- no upward import: each module imports only from its own layer of :data:`LAYERS` or the
  ones below;
- the trial runner never reaches the orchestrator's side (``sweeper.backends``, ``sweeper.cli``):
  no path from a ``trial_runner`` module to one of theirs, direct or through other modules;
- ``sweeper`` never imports ``trial_runner``: the orchestrator names the runner only as a
  module to run (``python -m trial_runner``, the forked worker's ``trial_runner.main:main``);
- the study never reaches the proxy's server (``sweeper.proxy``): opening a storage, even a
  ``grpc://`` one, loads only the client (``sweeper.study.remote``);
- ``sweeper.cli`` parses, calls the application layer (``sweeper.app``) and renders: it never
  imports the study, a backend or the proxy itself;

and about what crosses a module's edge (issue 39, "one module, one concept"): no module imports
a private (``_name``) name another module defines, by ``from m import _name`` or as
``m._name`` on a module it imported; a private module (``sweeper.spec._validate``) is imported
only inside its own package.

``python -m tests.test_import_graph`` prints the graph's cycles.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sweeper", "trial_runner")
#: The orchestrator's side, which the trial runner (a pod's or a worker's process) never loads.
ORCHESTRATOR_ONLY = ("sweeper.backends", "sweeper.cli")

#: The layers of ``sweeper``, bottom first: a module imports only from its own layer and the
#: ones below (the DESIGN.md picture). A module belongs to the last layer naming it or a
#: package above it; ``trial_runner`` sits on top beside the orchestrator's side.
LAYERS: tuple[tuple[str, ...], ...] = (
    # what everything may import: errors, the protocol's names, Optuna's private API
    ("sweeper.errors", "sweeper.protocol", "sweeper.messages", "sweeper._optuna_compat",
     "sweeper.gang", "sweeper"),
    # the spec and the search space it defines; the ledger's arithmetic on its budget
    ("sweeper.spec", "sweeper.qmc", "sweeper.space", "sweeper.accounting"),
    # the study: the index store's interface and values, its SQL implementation, its gRPC
    # client and the wire that client shares with the proxy's server, policies
    ("sweeper.study.store", "sweeper.study.values", "sweeper.study.sql", "sweeper.study.urls",
     "sweeper.study.retry", "sweeper.study.stop", "sweeper.study.growth",
     "sweeper.study.trials", "sweeper.study.remote"),
    # the storage proxy's server, which serves the SQL implementation over the wire
    ("sweeper.proxy",),
    # the one factory that picks an implementation, the sweep a process holds, and the
    # study package's front
    ("sweeper.study.open", "sweeper.study.record", "sweeper.study.ledger", "sweeper.study"),
    # everything that uses a sweep: reports, artifacts, code snapshots, importers, backends
    ("sweeper.artifacts", "sweeper.code", "sweeper.report", "sweeper.export", "sweeper.purge",
     "sweeper.spending",
     "sweeper.runlogs", "sweeper.entrypoint", "sweeper.importers", "sweeper.backends"),
    # the application layer: one function per user action
    ("sweeper.app",),
    # the CLI: parse, call the application layer, render
    ("sweeper.cli",),
    ("trial_runner",),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the most specific prefix naming ``module``."""
    best, depth = -1, -1
    for k, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and name.count(".") > depth:
                best, depth = k, name.count(".")
    assert best >= 0, f"{module} is in no layer of LAYERS"
    return best


Graph = dict[str, set[str]]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path, root)] = path
    return found


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every name an import statement anywhere in ``tree`` imports: ``import a.b`` gives
    ``a.b``; ``from a import b`` gives ``a.b`` (a module, or a name in the module ``a``);
    relative imports resolved against ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from`` import names, a relative one resolved against ``package``."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return base


def _owner(name: str, modules: Iterable[str]) -> str | None:
    """The module of ours that importing ``name`` loads last: itself, or the nearest package
    or module above it (``sweeper.study.Sweep`` -> ``sweeper.study``); None for others'."""
    known = set(modules)
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def build_graph(root: Path = ROOT) -> Graph:
    """module -> the modules of ours it imports directly (itself excluded)."""
    modules = _modules(root)
    graph: Graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = {_owner(name, modules) for name in
                   _imported_names(tree, module, path.name == "__init__.py")}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def strongly_connected(graph: Graph) -> list[frozenset[str]]:
    """The graph's cycles: its strongly connected components of more than one module
    (Tarjan's algorithm, iterative), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return sorted(found, key=lambda c: (-len(c), sorted(c)))


def reachable(graph: Graph, start: str) -> set[str]:
    """Every module that importing ``start`` may load (``start`` excluded unless in a cycle)."""
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


#: Importers left out of the private-name rule: ``sweeper._optuna_compat``, the one package
#: that holds Optuna's private API.
PRIVATE_RULE_EXEMPT = ("sweeper._optuna_compat",)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_module_owner(module: str) -> str | None:
    """The package a private module is private to (``sweeper.spec._yaml`` ->
    ``sweeper.spec``), the deepest private part counting; None for a public module.
    ``sweeper._optuna_compat`` is the shared front of Optuna's private API: public here."""
    parts = module.split(".")
    owner = None
    for k in range(1, len(parts)):
        if _is_private(parts[k]) and ".".join(parts[:k + 1]) != "sweeper._optuna_compat":
            owner = ".".join(parts[:k])
    return owner


def private_imports(root: Path = ROOT) -> list[str]:
    """Every import of another module's private name, one line each (``importer: what``):
    ``from m import _name`` and ``m._name`` where ``_name`` is not a module of ``m``'s own
    package open to the importer, and any import of a private module from outside the
    package it belongs to."""
    modules = _modules(root)
    found = []
    for module, path in modules.items():
        if _in(module, PRIVATE_RULE_EXEMPT):
            continue
        found.extend(f"{module}: {what}" for what in
                     _private_uses(module, path, set(modules)))
    return sorted(found)


def _private_uses(module: str, path: Path, modules: set[str]) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    bound: dict[str, str] = {}  # a local name -> the module of ours it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield from _private_in_import(node, module, package, modules, bound)
    yield from _private_attributes(tree, module, modules, bound)


def _crossing(importer: str, target: str) -> bool:
    """Whether ``target`` is a private module of a package ``importer`` is outside."""
    owner = _private_module_owner(target)
    return owner is not None and not _in(importer, [owner])


def _private_in_import(node: ast.Import | ast.ImportFrom, module: str, package: str,
                       modules: set[str], bound: dict[str, str]) -> Iterator[str]:
    """The private names one import statement takes; the modules of ours it binds go into
    ``bound``."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if _owner(alias.name, modules) is not None:
                if _crossing(module, alias.name):
                    yield f"import {alias.name}"
                if alias.asname:
                    bound[alias.asname] = alias.name
        return
    base = _from_base(node, package)
    if _owner(base, modules) is None:
        return
    for alias in node.names:
        full = f"{base}.{alias.name}"
        if full in modules:
            bound[alias.asname or alias.name] = full
            private = _crossing(module, full)
        else:
            private = _is_private(alias.name) or _crossing(module, base)
        if private:
            yield f"from {base} import {alias.name}"


def _private_attributes(tree: ast.AST, module: str, modules: set[str],
                        bound: dict[str, str]) -> Iterator[str]:
    """``m._name`` on a module ``m`` of ours bound by an import."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound and _is_private(node.attr)):
            full = f"{bound[node.value.id]}.{node.attr}"
            if full not in modules or _crossing(module, full):
                yield full


def _in(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _describe(cycles: Iterable[frozenset[str]]) -> str:
    return "\n".join(f"  {len(c)} modules: {', '.join(sorted(c))}" for c in cycles) or "  none"


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph()


def test_the_graph_holds_every_kind_of_import(graph: Graph) -> None:
    """The builder sees top-level ``from`` imports of a name (an edge to the package that holds
    it), of a module, and imports inside functions."""
    assert "sweeper.protocol" in graph["trial_runner.main"]  # from sweeper import protocol
    assert "sweeper.study" in graph["trial_runner.main"]  # from sweeper.study import Sweep
    assert "trial_runner.launcher" in graph["trial_runner.command"]  # inside run_command
    assert len(graph) > 50 and all(m.startswith(PACKAGES) for m in graph)


def test_the_trial_runner_never_reaches_the_orchestrators_side(graph: Graph) -> None:
    bad = {m: sorted(t for t in reachable(graph, m) if _in(t, ORCHESTRATOR_ONLY))
           for m in graph if _in(m, ["trial_runner"])}
    assert not {m: t for m, t in bad.items() if t}


def test_sweeper_never_imports_the_trial_runner(graph: Graph) -> None:
    bad = {m: sorted(t for t in targets if _in(t, ["trial_runner"]))
           for m, targets in graph.items() if _in(m, ["sweeper"])}
    assert not {m: t for m, t in bad.items() if t}


def test_the_study_never_reaches_the_proxy_server(graph: Graph) -> None:
    bad = {m: sorted(t for t in reachable(graph, m) if _in(t, ["sweeper.proxy"]))
           for m in graph if _in(m, ["sweeper.study"])}
    assert not {m: t for m, t in bad.items() if t}


def test_no_import_cycle(graph: Graph) -> None:
    cycles = strongly_connected(graph)
    assert not cycles, f"import cycles:\n{_describe(cycles)}"


def test_no_upward_import(graph: Graph) -> None:
    """Every import goes to the importer's own layer or one below (deferred imports and
    ``TYPE_CHECKING`` ones included)."""
    upward = sorted(f"{m} ({layer_of(m)}) -> {t} ({layer_of(t)})"
                    for m, targets in graph.items() for t in targets
                    if layer_of(t) > layer_of(m))
    assert upward == []


#: What the CLI never imports directly: it calls sweeper.app for them.
CLI_NEVER_IMPORTS = ("sweeper.study", "sweeper.backends", "sweeper.proxy")


def test_the_cli_imports_no_study_backend_or_proxy(graph: Graph) -> None:
    bad = {m: sorted(t for t in targets if _in(t, CLI_NEVER_IMPORTS))
           for m, targets in graph.items()
           if _in(m, ["sweeper.cli"])}
    assert not {m: t for m, t in bad.items() if t}


def test_every_module_has_a_layer_and_the_layers_order_the_packages() -> None:
    assert layer_of("sweeper.study.sql.index") == layer_of("sweeper.study.store") \
        == layer_of("sweeper.study.remote.client") < layer_of("sweeper.proxy.server") \
        < layer_of("sweeper.study.open") \
        < layer_of("sweeper.backends.local") < layer_of("trial_runner.runner")
    assert layer_of("sweeper._optuna_compat._grpc") == 0 < layer_of("sweeper.spec.model")
    assert layer_of("sweeper.study") == layer_of("sweeper.study.open")


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports() == []


def test_the_private_rule_sees_names_attributes_and_private_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "sweeper"
    (pkg / "inner").mkdir(parents=True)
    for name in ("__init__", "a", "inner/__init__", "inner/_hidden"):
        (pkg / f"{name}.py").write_text("")
    (pkg / "b.py").write_text(
        "from sweeper.a import _x, y\n"
        "from sweeper import a\n"
        "from sweeper.inner._hidden import z\n"
        "import sweeper.inner as inner\n"
        "a._helper()\n"
        "a.public()\n"
        "a.__name__\n"
        "inner._hidden.z\n")
    (pkg / "inner" / "c.py").write_text("from sweeper.inner._hidden import z\n"
                                        "from . import _hidden\n")
    (tmp_path / "trial_runner").mkdir()
    assert private_imports(tmp_path) == [
        "sweeper.b: from sweeper.a import _x",
        "sweeper.b: from sweeper.inner._hidden import z",
        "sweeper.b: sweeper.a._helper",
        "sweeper.b: sweeper.inner._hidden",
    ]


def test_strongly_connected_finds_cycles_and_only_them() -> None:
    toy: Graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert strongly_connected(toy) == [frozenset("abc"), frozenset("de")]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


if __name__ == "__main__":
    print(_describe(strongly_connected(build_graph())))
