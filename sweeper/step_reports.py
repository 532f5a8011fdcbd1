"""Whether an entrypoint function can report steps, read from its module's source with
:mod:`ast` (the source is parsed, never run).

A ``steps`` budget counts the steps trials report (``ctx.report(step, ...)``): a program
that reports none spends nothing, and the budget could never be counted. Validation refuses
such a program only when that is certain: the entrypoint is a plain ``def`` at the top of
its module, no decorator; the module never names ``report`` (a call, an attribute, an
import, the string ``"report"``); nothing in it reaches objects by introspection
(``eval``, ``exec``, ``locals``, frames, ``inspect``, ``gc``); and the function uses its
trial context only as ``ctx.<attribute>`` of :data:`SILENT_ATTRS`, never handing the
context itself on (to a helper, a callback, a variable, a closure). Anything else is
undecided, and the run-time rule (a sweep whose trials finished without a step stops on its
budget) stays the check.
"""

from __future__ import annotations

import ast
import inspect
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The trial context's attributes whose use cannot report a step: its data, and methods that
#: suggest, read, save or ask the pruner. Not here, so undecided: ``report``, ``trial``
#: (Optuna's trial, whose reports a rank's runner reads back), the writer, anything unknown.
#: ``set`` is silent only with a constant key outside sweeper's own (``sweeper:``).
SILENT_ATTRS = frozenset({
    "params", "index", "trial_number", "attempt", "checkpoint_dir", "objective_metrics",
    "resumed_from_step", "planned_method", "data_dir", "device", "suggest_float",
    "suggest_int", "suggest_categorical", "autocast", "grad_scaler", "last_step",
    "should_prune", "save_artifact", "save_checkpoint", "load_checkpoint"})
#: Names that reach objects without naming them: a module using one is undecided.
DYNAMIC_NAMES = frozenset({"eval", "exec", "locals", "vars", "globals",
                           "__import__", "breakpoint", "_getframe", "currentframe", "f_back",
                           "f_locals", "f_globals", "get_referrers", "get_objects"})
#: Modules that reach objects by introspection: a module importing one is undecided.
DYNAMIC_MODULES = frozenset({"inspect", "gc", "ctypes"})


def silent_entrypoint(fn: Callable[..., Any]) -> str | None:
    """Why ``fn`` (a loaded entrypoint) certainly reports no step (its file and line, what it
    does not do), or None when it may report one or that cannot be decided."""
    if not inspect.isfunction(fn) or fn.__closure__:
        return None
    code = fn.__code__
    tree = _parsed(code.co_filename)
    if tree is None or not _module_is_silent(tree):
        return None
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
                 and n.name == code.co_name and n.lineno == code.co_firstlineno), None)
    if node is None or node.decorator_list:
        return None
    params = [*node.args.posonlyargs, *node.args.args]
    if not params or not _context_stays_silent(node, params[0].arg):
        return None
    return (f"({Path(code.co_filename).name}:{node.lineno}) never calls "
            f"{params[0].arg}.report(step, ...) and hands {params[0].arg} to nothing that "
            "could")


def _parsed(filename: str) -> ast.Module | None:
    """The module's syntax tree; None for anything but readable Python source."""
    if not filename.endswith(".py"):
        return None
    try:
        with tokenize.open(filename) as f:
            return ast.parse(f.read(), filename)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _module_is_silent(tree: ast.Module) -> bool:
    """No ``report`` anywhere in the module, and nothing that reaches objects by
    introspection."""
    for n in ast.walk(tree):
        name = _named(n)
        if name is not None and (name == "report" or name in DYNAMIC_NAMES):
            return False
        if isinstance(n, ast.Constant) and n.value == "report":
            return False
        if any(m.split(".")[0] in DYNAMIC_MODULES for m in _imported(n)):
            return False
    return True


def _named(n: ast.AST) -> str | None:
    if isinstance(n, ast.Name):
        return n.id
    if isinstance(n, ast.Attribute):
        return n.attr
    if isinstance(n, ast.alias):
        return n.asname or n.name.split(".")[-1]
    return None


def _imported(n: ast.AST) -> Iterator[str]:
    if isinstance(n, ast.Import):
        yield from (a.name for a in n.names)
    elif isinstance(n, ast.ImportFrom) and n.module:
        yield n.module


def _context_stays_silent(fn: ast.FunctionDef, ctx: str) -> bool:
    """Every use of ``ctx`` in ``fn``'s body reads a silent attribute of it."""
    parents = {child: parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id == ctx and isinstance(n.ctx, ast.Load) \
                and not _silent_use(n, parents):
            return False
    return True


def _silent_use(name: ast.Name, parents: dict[ast.AST, ast.AST]) -> bool:
    attr = parents.get(name)
    if not isinstance(attr, ast.Attribute) or attr.value is not name:
        return False  # the context itself is handed on (an argument, a value, a closure)
    if attr.attr == "set":
        call = parents.get(attr)
        return isinstance(call, ast.Call) and call.func is attr and bool(call.args) and \
            isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str) and \
            not call.args[0].value.startswith("sweeper:")
    return attr.attr in SILENT_ATTRS
