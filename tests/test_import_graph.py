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
    # the study: the index store's interface and values, its SQL implementation, policies
    ("sweeper.study.store", "sweeper.study.values", "sweeper.study.sql", "sweeper.study.urls",
     "sweeper.study.retry", "sweeper.study.stop", "sweeper.study.growth",
     "sweeper.study.trials"),
    # the storage proxy: the store's other implementation, and the server of the first
    ("sweeper.proxy",),
    # the one factory that picks an implementation, the sweep a process holds, and the
    # study package's front
    ("sweeper.study.open", "sweeper.study.record", "sweeper.study.ledger", "sweeper.study"),
    # everything that uses a sweep: reports, artifacts, code snapshots, importers, backends,
    # the CLI
    ("sweeper.artifacts", "sweeper.code", "sweeper.report", "sweeper.export", "sweeper.purge",
     "sweeper.spending",
     "sweeper.runlogs", "sweeper.entrypoint", "sweeper.importers", "sweeper.backends",
     "sweeper.cli"),
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
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" for alias in node.names)


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


def test_every_module_has_a_layer_and_the_layers_order_the_packages() -> None:
    assert layer_of("sweeper.study.sql.index") == layer_of("sweeper.study.store") \
        < layer_of("sweeper.proxy.client") < layer_of("sweeper.study.open") \
        < layer_of("sweeper.backends.local") < layer_of("trial_runner.runner")
    assert layer_of("sweeper._optuna_compat._grpc") == 0 < layer_of("sweeper.spec.model")
    assert layer_of("sweeper.study") == layer_of("sweeper.study.open")


def test_strongly_connected_finds_cycles_and_only_them() -> None:
    toy: Graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert strongly_connected(toy) == [frozenset("abc"), frozenset("de")]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


if __name__ == "__main__":
    print(_describe(strongly_connected(build_graph())))
