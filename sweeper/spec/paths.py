"""Relative paths in a spec resolve against the spec file's directory, the way docker-compose
and kustomize resolve theirs, so ``sweeper run sub/spec.yaml`` works from any directory:

- ``trial.command``: an argument that looks like a path (``train.py``, ``data/x.csv``,
  ``--config=conf/a.yaml``) and names a file or directory that exists in the spec's directory
  becomes that absolute path when the trial runs; anything else (``python``, options, numbers,
  ``{placeholders}``, outputs that do not exist yet) is passed on as written;
- ``trial.entrypoint``: the spec's directory goes on ``sys.path`` (and the local workers'
  ``PYTHONPATH``) before the working directory;
- ``artifacts.path``: relative to the spec's directory (made absolute when the file is read);
- ``storage:``: a SQLite file named by a relative path is the file in the spec's directory
  (``sqlite:///my.db`` next to the spec, wherever ``sweeper`` runs from);
- ``data.path``: on the local backend, relative to the spec's directory (the workers get it as
  ``SWEEPER_SPEC_DIR``); on Kubernetes it is a path in the pod, as written;
- ``trial.fixed``: a string value that names a file or directory next to the spec, by the rule
  of ``trial.command``'s arguments, reaches the trial (``ctx.params``, ``{placeholders}``) as
  that absolute path on the local backend (:func:`resolve_fixed`); anything else as written.

The sweep record keeps ``command``, ``entrypoint`` and ``fixed`` as written: where the file
lives is not part of the sweep (its hash does not change when the spec moves). The local backend
hands the directory to its workers (``SWEEPER_SPEC_DIR``); on Kubernetes paths are the image's
own.

A spec that names its image (``kubernetes.image`` other than sweeper's default, as every spec
``sweeper import katib`` writes does) says where its trial runs: the command's paths are the
image's (``/opt/pytorch-mnist/mnist.py``), so ``validate`` does not look for them on this
machine (:func:`image_paths_note` says so); a local run still checks them, as it runs here.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from sweeper.errors import SpecError
from sweeper.spec.model import KubernetesSpec, SweepSpec

#: File suffixes that make an argument of ``trial.command`` "the script" ``validate`` checks.
SCRIPT_SUFFIXES = (".py", ".sh", ".bash", ".r", ".jl", ".js", ".mjs", ".pl", ".rb", ".lua")


def anchored(spec: SweepSpec, spec_file: str | Path) -> SweepSpec:
    """``spec`` as read from ``spec_file``: its directory recorded, ``artifacts.path`` made
    absolute against it."""
    base = Path(spec_file).resolve().parent
    artifacts = spec.artifacts
    if artifacts.store == "filesystem" and artifacts.path and \
            not Path(artifacts.path).expanduser().is_absolute():
        artifacts = replace(artifacts, path=str(base / artifacts.path))
    return replace(spec, base_dir=str(base), artifacts=artifacts,
                   storage=anchored_storage(spec.storage, base))


def anchored_storage(url: str | None, base: Path) -> str | None:
    """A SQLite URL whose file path is relative, made absolute against ``base`` (the spec's
    directory); any other URL as it is."""
    if url is None:
        return None
    for prefix in ("sqlite:///", "sqlite+pysqlite:///"):
        if url.startswith(prefix):
            path, sep, query = url[len(prefix):].partition("?")
            if path and path != ":memory:" and not Path(path).expanduser().is_absolute():
                return f"{prefix}{base / path}{sep}{query}"
    return url


def _looks_like_path(arg: str) -> bool:
    return "/" in arg or bool(Path(arg).suffix)


def resolve_arg(arg: str, base_dir: str | None, *, first: bool = False) -> str:
    """``arg`` as an absolute path when it names something that exists under ``base_dir``,
    else unchanged. ``first``: the program itself, resolved only when written as a path
    (``./train.sh``; a bare ``train.sh`` is looked up on PATH, as exec does)."""
    if not base_dir or not arg or "{" in arg or os.path.isabs(arg):
        return arg
    if arg.startswith("-"):
        option, eq, value = arg.partition("=")
        return f"{option}={resolve_arg(value, base_dir)}" if eq and value and not first \
            else arg
    if not ("/" in arg if first else _looks_like_path(arg)):
        return arg
    candidate = os.path.join(base_dir, arg)
    return os.path.normpath(candidate) if os.path.exists(candidate) else arg


def resolve_fixed(fixed: Mapping[str, Any], base_dir: str | None) -> dict[str, Any]:
    """The ``trial.fixed`` values that name something existing under ``base_dir``, as absolute
    paths (only those: merge them over the rest). A value resolves as an argument of
    ``trial.command`` does: a string that looks like a path (``data/train.csv``,
    ``conf.yaml``, ``./vocab``) and exists there; numbers, words and options do not."""
    return {k: resolved for k, v in fixed.items()
            if isinstance(v, str) and not v.startswith("-")
            and (resolved := resolve_arg(v, base_dir)) != v}


def resolve_command(command: Sequence[str], base_dir: str | None) -> tuple[str, ...]:
    """The argv template with its relative paths resolved against ``base_dir`` (placeholders
    are filled in later, per trial)."""
    return tuple(resolve_arg(arg, base_dir, first=k == 0) for k, arg in enumerate(command))


def script_of(command: Sequence[str]) -> str | None:
    """The script a command runs: its first argument with a script suffix (``train.py`` in
    ``[python, -u, train.py, --lr, "{lr}"]``), or the program itself when it has one."""
    for k, arg in enumerate(command):
        if "{" in arg or arg.startswith("-"):
            continue
        if Path(arg).suffix.lower() in SCRIPT_SUFFIXES or (k == 0 and "/" in arg):
            return arg
    return None


def check_command(spec: SweepSpec) -> None:
    """What the local backend will execute exists: the program (on PATH or as a path) and its
    script, each resolved as the trial will resolve it. One SpecError line otherwise."""
    command = spec.trial.command
    if not command:
        return
    exe = command[0]
    if "{" not in exe and "/" not in exe and shutil.which(exe) is None and \
            not Path(exe).exists():
        raise SpecError(f"command {exe!r} not found on PATH", source=spec.source,
                        field="trial.command")
    script = script_of(command)
    if script is None:
        return
    resolved = resolve_arg(script, spec.base_dir, first=script == exe)
    if not os.path.exists(resolved):
        looked = os.path.join(spec.base_dir, script) if spec.base_dir else \
            os.path.abspath(script)
        raise SpecError(f"script {script!r} not found: no {os.path.normpath(looked)}",
                        source=spec.source, field="trial.command")


def named_image(spec: SweepSpec) -> str | None:
    """The image the spec names for its trials (``kubernetes.image``), None when it keeps
    sweeper's default (which holds only sweeper's own examples, not the user's scripts)."""
    image = spec.kubernetes.image
    return None if image == KubernetesSpec().image else image


def image_paths_note(spec: SweepSpec) -> str | None:
    """Why ``validate`` did not look for a command's script: the trial runs in the image the
    spec names, where its paths are; None when it looks (no image named, or no command)."""
    image = named_image(spec)
    command = spec.trial.command
    if image is None or not command:
        return None
    script = script_of(command)
    what = f"its script {script!r}" if script is not None else f"its program {command[0]!r}"
    return f"trial.command runs in kubernetes.image {image}: {what} is the image's, not looked " \
           "for on this machine (a local run, `sweeper run --backend local`, checks it)"
