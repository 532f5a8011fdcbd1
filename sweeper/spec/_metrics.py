"""Metric names and ``trial.metrics:`` (how a ``trial.command`` program's metrics are read).

Names may contain letters, digits, ``_``, ``-``, ``.`` and ``/``: Katib's stock images print
``Validation-accuracy=0.97``, W&B logs ``val/loss``.
"""

from __future__ import annotations

import re
from typing import Any

from sweeper.spec.checks import Checks, clip
from sweeper.spec.model import MetricsSpec
from sweeper.spec.yamldoc import Path_

METRIC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")
METRIC_RULE = "letters, digits, _, -, . and /, starting with a letter or _"
METRICS_KEYS = ("format", "file", "wandb")
#: A W&B config key: names joined by dots (a dot nests).
_WANDB_KEY_RE = re.compile(r"^[^.\s][^\s]*$")
#: The named groups a ``format`` regex must have.
FORMAT_GROUPS = ("name", "value")


def metric_name(v: Checks, value: Any, path: Path_) -> str:
    name = v.string(value, path)
    if not METRIC_RE.match(name):
        raise v.err(path, f"metric name {clip(name)} may contain only {METRIC_RULE}")
    return name


def metrics_spec(v: Checks, value: Any, path: Path_, command: bool,
                 check_placeholders: Any, values: set[str] | frozenset[str] = frozenset()
                 ) -> MetricsSpec:
    """``trial.metrics: {format: REGEX}`` (stdout lines), ``{file: PATH}`` (JSON lines) or both
    (a text file, each line read with the regex: Katib's File collector), or ``{wandb: ...}``
    (a W&B program: ``wandb.log``); ``check_placeholders(text, path)`` checks ``{name}``
    placeholders in the path as in the command's argv; ``values``: the parameters and fixed
    values, which ``wandb`` may name."""
    if value is None:
        return MetricsSpec()
    m = v.mapping(value, path, METRICS_KEYS)
    if not command:
        raise v.err(path, "trial.metrics applies to trial.command programs (an entrypoint "
                          "returns and reports its metrics itself)")
    if not m:
        raise v.err(path, "expected format: REGEX (stdout lines), file: PATH (JSON lines the "
                          "program writes) or both (a text file read with the regex)")
    if "wandb" in m:
        if len(m) > 1:
            raise v.err(path, "wandb: the metrics are the program's wandb.log calls; leave out "
                              "format and file")
        return MetricsSpec(wandb=wandb_keys(v, m["wandb"], (*path, "wandb"), values))
    fmt = metrics_format(v, m["format"], (*path, "format")) if "format" in m else None
    file = None
    if "file" in m:
        file = v.string(m["file"], (*path, "file"))
        check_placeholders(file, (*path, "file"))
    return MetricsSpec(format=fmt, file=file)


def metrics_format(v: Checks, value: Any, path: Path_) -> str:
    text = v.string(value, path)
    try:
        regex = re.compile(text)
    except re.error as e:
        raise v.err(path, f"not a regular expression: {e}") from None
    groups = set(regex.groupindex)
    missing = [g for g in FORMAT_GROUPS if g not in groups]
    if missing:
        raise v.err(path, "the regex needs the named groups (?P<name>...) and (?P<value>...); "
                          f"it lacks {', '.join(repr(g) for g in missing)}")
    extra = sorted(groups - set(FORMAT_GROUPS))
    if extra:
        raise v.err(path, f"unknown named group {extra[0]!r}: only 'name' and 'value' are read")
    if regex.search(""):
        raise v.err(path, "the regex matches an empty line; it must match a metric")
    return text


def wandb_keys(v: Checks, value: Any, path: Path_, values: set[str] | frozenset[str]
               ) -> tuple[tuple[str, str], ...]:
    """``wandb: true`` (every parameter under its own name) or ``{param: W&B key}``."""
    if value is True:
        return ()
    if not isinstance(value, dict):
        raise v.err(path, "expected true or a mapping of parameter -> W&B config key "
                          "(optimizer_lr: optimizer.lr)")
    out = []
    for name, key in value.items():
        if str(name) not in values:
            raise v.err((*path, str(name)), f"{clip(str(name))} is not a parameter or fixed "
                                            "value of this spec")
        text = v.string(key, (*path, str(name)))
        if not _WANDB_KEY_RE.match(text) or text.endswith(".") or ".." in text:
            raise v.err((*path, str(name)), f"not a W&B config key: {clip(text)} (names "
                                            "joined by dots, no spaces)")
        out.append((str(name), text))
    return tuple(out)


#: ``(?P<NAME>`` opening a named group.
_NAMED_GROUP_RE = re.compile(r"\(\?P<(\w+)>")
#: A group's opening that makes what it holds depend on its surroundings: a lookaround, a
#: backreference, a conditional, a comment, or flags scoped to a part of the pattern.
_CONTEXT_OPENERS = re.compile(r"\(\?(?:[=!#(]|<[=!]|P=|[aiLmsux]*-|[aiLmsux]+:)")
#: Escapes that depend on the surroundings (word boundaries, anchors, backreferences).
_CONTEXT_ESCAPES = frozenset("123456789bBAZg")


def format_may_name(fmt: str, metric: str) -> bool:
    """Whether the ``metrics.format`` regex ``fmt`` can read a metric called ``metric``: its
    ``name`` group, on its own with the regex's flags, matches ``metric`` in full. False only
    when that is certain; a group whose match depends on its surroundings (a lookaround, an
    anchor, a backreference, scoped flags, a verbose regex) may always."""
    regex = re.compile(fmt)
    if regex.flags & re.VERBOSE or _CONTEXT_OPENERS.search(fmt):
        return True
    body = _group_body(fmt, "name")
    if body is None or _depends_on_surroundings(body):
        return True
    try:
        return re.compile(body, regex.flags).fullmatch(metric) is not None
    except re.error:
        return True


def _pieces(pattern: str) -> list[tuple[int, str]]:
    """The pattern as (position, piece): an escape, a character class, or one character."""
    out, i = [], 0
    while i < len(pattern):
        j = i + 1
        if pattern[i] == "\\":
            j = i + 2
        elif pattern[i] == "[":
            if pattern.startswith("^", j):
                j += 1
            if pattern.startswith("]", j):  # a ] first is a member
                j += 1
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            j += 1
        out.append((i, pattern[i:j]))
        i = j
    return out


def _group_body(pattern: str, group: str) -> str | None:
    """What the named ``group`` holds, as written (None: not found)."""
    start, depth = None, 0
    for i, piece in _pieces(pattern):
        if piece == "(":
            m = _NAMED_GROUP_RE.match(pattern, i)
            if start is None and m is not None and m.group(1) == group:
                start, depth = m.end(), 0
            depth += 1
        elif piece == ")" and start is not None:
            depth -= 1
            if depth == 0:
                return pattern[start:i]
    return None


def _depends_on_surroundings(body: str) -> bool:
    for _, piece in _pieces(body):
        if piece in ("^", "$") or (piece[0] == "\\" and piece[1:2] in _CONTEXT_ESCAPES):
            return True
    return False
