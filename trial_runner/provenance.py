"""What makes trials comparable across runs: the code version and the spec hash.

Set as user attrs when a trial starts, so the dashboard and ``sweeper export`` show which code
and which sweep definition produced each result.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from typing import Any

from sweeper.protocol import ENV_CODE_VERSION

logger = logging.getLogger(__name__)

_SHA_RE = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def code_version(env: Mapping[str, str] | None = None, cwd: str | None = None,
                 run: Callable[..., Any] = subprocess.run) -> str:
    """``$SWEEPER_CODE_VERSION`` (images and Jobs set it), else ``git:<commit>`` of the working
    directory's repository, else ``sweeper==<version>``. Pure but for the git call."""
    env = os.environ if env is None else env
    given = env.get(ENV_CODE_VERSION, "").strip()
    if given:
        return given[:200]
    try:
        proc = run(["git", "rev-parse", "HEAD"], cwd=cwd or os.getcwd(), capture_output=True,
                   text=True, timeout=5, env={**env, "GIT_OPTIONAL_LOCKS": "0",
                                              "GIT_TERMINAL_PROMPT": "0"})
        sha = proc.stdout.strip() if proc.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError) as e:
        logger.debug("no git commit: %s", e)
        sha = ""
    if _SHA_RE.match(sha):
        return f"git:{sha}"
    from sweeper import __version__

    return f"sweeper=={__version__}"


def process_code_version() -> str:
    """:func:`code_version` once per process (a runner may run many trials), and again only
    where what it depends on changed: a local worker forked from `sweeper run` starts with
    that process's memory but its own environment (and it may be handed another one)."""
    return _code_version_for(os.environ.get(ENV_CODE_VERSION, ""), os.getcwd())


@functools.cache
def _code_version_for(given: str, cwd: str) -> str:
    return code_version({**os.environ, ENV_CODE_VERSION: given}, cwd=cwd)
