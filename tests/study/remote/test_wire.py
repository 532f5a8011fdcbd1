"""The wire of sweeper's own service, derived from the index store's interface: every
operation of :class:`sweeper.study.store.IndexStore` travels, both implementations have its
exact signature, and every value its operations take or return round-trips by its type hints
(and only values of those types decode)."""

from __future__ import annotations

import inspect
from datetime import datetime
from typing import Any

import pytest
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from sweeper.study.remote import wire
from sweeper.study.remote.client import ProxyStorage
from sweeper.study.remote.codec import WireError, from_wire, to_wire
from sweeper.study.sql import SqlStore
from sweeper.study.store import LOCAL, IndexStore
from sweeper.study.values import (
    Attempt,
    Created,
    IndexStatus,
    StopState,
    StudyStats,
    SweepSummary,
    Taken,
)
from tests.support.helpers import make_spec

MEMBERS = {n for n, _ in inspect.getmembers(IndexStore) if not n.startswith("_")} \
    - {"__init__"}


def test_every_operation_of_the_interface_travels_and_nothing_else() -> None:
    assert set(wire.OPERATIONS) == MEMBERS - LOCAL
    # no two share a wire name
    assert len({op.wire_name for op in wire.OPERATIONS.values()}) == len(wire.OPERATIONS)
    assert {"attempts", "claim", "take", "new_attempt", "create_or_resume"} <= set(wire.OPERATIONS)


@pytest.mark.parametrize("implementation", [SqlStore, ProxyStorage])
@pytest.mark.parametrize("name", sorted(MEMBERS - {"url"}))
def test_both_implementations_have_the_interfaces_signature(implementation: type,
                                                            name: str) -> None:
    """Same parameter names, kinds and defaults (the server calls the SQL store's method with
    the client's arguments by name)."""
    def shape(fn: Any) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default)
                for p in inspect.signature(fn).parameters.values()]

    assert shape(getattr(implementation, name)) == shape(getattr(IndexStore, name))


def test_both_implementations_are_index_stores_to_mypy_too() -> None:
    """The structural check mypy makes (an assignment to the interface) has a runtime twin:
    each has every member."""
    for implementation in (SqlStore, ProxyStorage):
        assert all(hasattr(implementation, m) for m in MEMBERS - {"url"})  # url: an attribute


NOW = datetime(2026, 11, 25, 12, 30, 5, 123456)
VALUES: list[tuple[Any, Any]] = [
    (Attempt(7, 3, TrialState.FAIL, 1, None), Attempt),
    (Attempt(8, 4, TrialState.RUNNING, 2, 12.5), Attempt | None),
    (Taken([Attempt(8, 4, TrialState.WAITING, 0, None)],
           Attempt(8, 4, TrialState.WAITING, 0, None),
           (("u", "k", '"v"', None), ("p", "lr", '{"name": "FloatDistribution"}', 0.1)),
           NOW, True, {"state": "stopped"}), Taken),
    (Taken([]), Taken),
    (Created(5, True, None), Created),
    (StopState("stopped", "value", "reached", "2026-11-25T12:00:00", 3), StopState | None),
    (IndexStatus(0, "COMPLETE", 1, 0, (float("inf"), 0.5), None), IndexStatus),
    (SweepSummary("s", True, "tpe", 10, 4, ("loss",), ("minimize",), {"COMPLETE": 4}, 0.25,
                  NOW), SweepSummary),
    (StudyStats("s", {"COMPLETE": 2}, [1, 2], 3.5, {"loss": 0.1}), StudyStats),
    ({"lr": (0.1, FloatDistribution(1e-4, 1.0, log=True)),
      "opt": ("sgd", CategoricalDistribution(["sgd", "adam"]))},
     dict[str, tuple[Any, BaseDistribution]]),
    (((1, 0.5), (2, 0.25)), tuple[tuple[int, float], ...]),
    ((["a"], ["b", "c"]), tuple[list[str], list[str]]),
]


@pytest.mark.parametrize(("value", "hint"), VALUES, ids=lambda v: type(v).__name__)
def test_values_round_trip(value: Any, hint: Any) -> None:
    import json

    wired = json.loads(json.dumps(to_wire(value, hint)))
    assert from_wire(wired, hint) == value


def test_a_distribution_and_a_spec_round_trip() -> None:
    dist = FloatDistribution(1e-4, 1.0, log=True)
    assert from_wire(to_wire(dist, BaseDistribution), BaseDistribution) == dist
    from sweeper.spec import SweepSpec

    spec = make_spec(name="wired", trials=3)
    back = from_wire(to_wire(spec, SweepSpec), SweepSpec)
    assert back.spec_hash == spec.spec_hash and back.base_dir == spec.base_dir


@pytest.mark.parametrize(("data", "hint", "says"), [
    ("7", int, "str where int"),
    (True, int, "bool where int"),
    (None, int, "null where int"),
    ("x", float, "a number"),
    ({"trial_id": 1}, Attempt, "missing field 'number'"),
    ({"trial_id": 1, "number": 1, "state": "FAIL", "attempt": 0, "heartbeat_age_s": None,
      "extra": 1}, Attempt, "unknown field 'extra'"),
    ({"trial_id": 1, "number": 1, "state": "BOGUS", "attempt": 0, "heartbeat_age_s": None},
     Attempt, "no trial state"),
    ([1, 2, 3], tuple[int, float], "3 items where 2"),
    ({"a": "b"}, dict[str, int], "a: str where int"),
    ("{not json", Any, None),
])
def test_only_values_of_the_hinted_type_decode(data: Any, hint: Any, says: str | None) -> None:
    if says is None:  # Any takes anything
        assert from_wire(data, hint) == data
        return
    with pytest.raises(WireError, match=says):
        from_wire(data, hint)


def test_a_call_encodes_by_parameter_name_and_decodes_strictly() -> None:
    op = wire.OPERATIONS["new_attempt"]
    after = Attempt(7, 3, TrialState.FAIL, 1, None)
    raw = op.encode_call((1, 4), {"after": after, "params": {"lr": 0.1}, "token": "t"})
    assert op.decode_call(raw) == {"study_id": 1, "index": 4, "after": after,
                                   "params": {"lr": 0.1}, "token": "t"}
    with pytest.raises(WireError, match="missing argument 'after'"):
        op.decode_call(b'{"study_id": 1, "index": 4, "params": null}')
    with pytest.raises(WireError, match="unknown argument 'x'"):
        op.decode_call(b'{"study_id": 1, "index": 4, "after": null, "params": null, "x": 1}')
    with pytest.raises(WireError, match="not JSON"):
        op.decode_call(b"\xff\xfe")


def test_remote_errors_parse_only_known_kinds() -> None:
    err = wire.RemoteError("SpecError", "parameters differ", "parameters")
    assert wire.RemoteError.parse(err.details()) == err
    assert wire.RemoteError.parse("not json") is None
    assert wire.RemoteError.parse('{"kind": "SystemExit", "message": "x"}') is None
