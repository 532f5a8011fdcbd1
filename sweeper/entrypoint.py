"""Resolve ``module:function`` entrypoints (used by validation and by the trial runner)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from sweeper.errors import SpecError


def load_entrypoint(entrypoint: str, *, source: str | None = None) -> Callable[..., Any]:
    """Import ``module:function`` and return the callable, or raise SpecError (one line).

    The current directory is importable, as with ``python -m``, so ``train:main`` finds
    ``./train.py``.
    """
    module_name, _, attr = entrypoint.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise SpecError(f"cannot import {module_name!r}: {e}", source=source,
                        field="trial.entrypoint") from None
    except Exception as e:  # the module itself raised while importing
        raise SpecError(f"importing {module_name!r} raised {type(e).__name__}: {e}",
                        source=source, field="trial.entrypoint") from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise SpecError(f"module {module_name!r} has no attribute {attr!r}", source=source,
                        field="trial.entrypoint")
    if not callable(fn):
        raise SpecError(f"{entrypoint} is not callable", source=source, field="trial.entrypoint")
    return fn  # type: ignore[no-any-return]
