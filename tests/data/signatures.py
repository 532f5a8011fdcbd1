"""Entrypoints with every signature shape validate must judge (tests/test_entrypoint.py)."""

from __future__ import annotations

from typing import Any


def no_args() -> float:
    return 0.0


def two_args(ctx: Any, other: Any) -> float:
    return 0.0


def one_arg(ctx: Any) -> float:
    return 0.0


def one_arg_and_defaults(ctx: Any, scale: float = 1.0, *, verbose: bool = False) -> float:
    return 0.0


def star_args(*args: Any) -> float:
    return 0.0


def keyword_only(*, ctx: Any) -> float:
    return 0.0


class CallableObject:
    def __call__(self, ctx: Any) -> float:
        return 0.0


instance = CallableObject()
