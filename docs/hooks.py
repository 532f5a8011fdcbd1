"""MkDocs hooks (``hooks:`` in mkdocs.yml): add the pages docs/gen_reference.py generates from
the code (the CLI and spec references) and the committed benchmark pages to the site."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from mkdocs.structure.files import File, Files


def _generator() -> ModuleType:
    path = Path(__file__).with_name("gen_reference.py")
    spec = importlib.util.spec_from_file_location("gen_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def on_files(files: Files, config: Any) -> Files:
    for page in _generator().pages():
        files.append(File.generated(config, page.path, content=page.text))
    return files
