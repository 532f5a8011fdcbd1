"""Resolve ``module:function`` entrypoints (used by validation and by the trial runner)."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from sweeper.errors import SpecError


def load_entrypoint(entrypoint: str, *, source: str | None = None,
                    base_dir: str | None = None) -> Callable[..., Any]:
    """Import ``module:function`` and return the callable, or raise SpecError (one line).

    The spec file's directory ``base_dir`` and then the current directory are importable, so
    ``train:main`` finds ``train.py`` next to the spec wherever sweeper runs (and
    ``./train.py`` as with ``python -m``).
    """
    module_name, _, attr = entrypoint.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if base_dir:
        if base_dir in sys.path:
            sys.path.remove(base_dir)
        sys.path.insert(0, base_dir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SpecError(f"cannot import {module_name!r}: {_first_line(e)}", source=source,
                        field="trial.entrypoint") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's module raised or exited
        raise SpecError(f"importing {module_name!r} raised {type(e).__name__}: {_first_line(e)}",
                        source=source, field="trial.entrypoint") from None
    fn = getattr(module, attr, None)
    if fn is None:
        close = difflib.get_close_matches(attr, [n for n in dir(module) if not n.startswith("_")],
                                          n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SpecError(f"module {module_name!r} has no attribute {attr!r}{hint}",
                        source=source, field="trial.entrypoint")
    if not callable(fn):
        raise SpecError(f"{entrypoint} is not callable (it is {type(fn).__name__} "
                        f"{_short_repr(fn)}); point at a function taking the trial context",
                        source=source, field="trial.entrypoint")
    _check_signature(entrypoint, fn, source)
    return fn


def _check_signature(entrypoint: str, fn: Callable[..., Any], source: str | None) -> None:
    """The runner calls ``fn(ctx)``: a function that cannot take exactly one positional
    argument would fail every index (and be retried pointlessly), so say so now."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: trust it
        return
    try:
        signature.bind(object())
    except TypeError:
        raise SpecError(f"{entrypoint} has signature {_clip(str(signature))}; an entrypoint "
                        "takes exactly one argument, the trial context: def "
                        f"{getattr(fn, '__name__', 'train')}(ctx)", source=source,
                        field="trial.entrypoint") from None


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _short_repr(value: Any) -> str:
    text = (repr(value).splitlines() or [""])[0]
    return text if len(text) <= 40 else text[:37] + "..."
