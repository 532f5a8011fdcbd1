"""sweeper's own gRPC service, the wire both ends agree on: one method per operation of the
index store (:class:`sweeper.study.store.IndexStore`), derived from its signatures, plus
``Info``. An operation is written once, in the interface and its SQL implementation; the
server calls the store's method of the same name, the client sends its arguments.

No protoc: a request is the operation's arguments as a JSON object by parameter name, a reply
its return value, each encoded by its type hints (:mod:`.codec`; ``grpc.method_handlers_
generic_handler`` on the server, ``channel.unary_unary`` on the client). Errors travel as a
status code and a JSON ``details`` naming the error, so the client raises what the direct path
raises. Nothing here does I/O or imports grpc.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from sweeper.study.remote.codec import WireError, from_wire, to_wire
from sweeper.study.store import LOCAL, IndexStore

#: The service's full name (``/sweeper.v1.IndexProtocol/<Method>``).
SERVICE = "sweeper.v1.IndexProtocol"

#: Wire names that are not the operation's name in CamelCase (kept from the first version).
_NAMES = {"record_heartbeat": "Heartbeat", "study_stats": "Stats"}


@dataclass(frozen=True)
class Operation:
    """One operation of the index store on the wire."""

    name: str  # the IndexStore method
    wire_name: str
    signature: inspect.Signature  # without self
    hints: Mapping[str, Any]  # parameters' and "return"

    @property
    def path(self) -> str:
        return f"/{SERVICE}/{self.wire_name}"

    def encode_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return _dumps({k: to_wire(v, self.hints[k]) for k, v in bound.arguments.items()})

    def decode_call(self, raw: bytes) -> dict[str, Any]:
        """The keyword arguments of a request; WireError if they are not this operation's."""
        got = _loads(raw)
        if not isinstance(got, dict):
            raise WireError(f"{self.wire_name}: the request is not a JSON object")
        params = self.signature.parameters
        unknown = sorted(set(got) - set(params))
        if unknown:
            raise WireError(f"{self.wire_name}: unknown argument {unknown[0]!r}")
        missing = [n for n, p in params.items() if n not in got and p.default is p.empty]
        if missing:
            raise WireError(f"{self.wire_name}: missing argument {missing[0]!r}")
        return {k: from_wire(v, self.hints[k], k) for k, v in got.items()}

    def encode_reply(self, value: Any) -> bytes:
        return _dumps(to_wire(value, self.hints["return"]))

    def decode_reply(self, raw: bytes) -> Any:
        return from_wire(_loads(raw), self.hints["return"], f"{self.wire_name} reply")


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"not JSON: {e}") from None


def _camel(name: str) -> str:
    return _NAMES.get(name) or "".join(part.title() for part in name.split("_"))


def _operations() -> dict[str, Operation]:
    out = {}
    for name, fn in inspect.getmembers(IndexStore, inspect.isfunction):
        if name.startswith("_") or name in LOCAL:
            continue
        sig = inspect.signature(fn)
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
        out[name] = Operation(name, _camel(name), sig, typing.get_type_hints(fn))
    return out


#: Every operation of the index store that travels: method name -> operation.
OPERATIONS: dict[str, Operation] = _operations()
#: Calls that claim an index's trial or create its next attempt, whatever they reply; and
#: the first look, which claims when its reply names the attempt it claimed.
_CLAIMING = {f"/{SERVICE}/Claim", f"/{SERVICE}/NewAttempt"}
_TAKE = f"/{SERVICE}/Take"


def is_claim(path: str, reply: Any) -> bool:
    """Whether a served call (``reply``: its raw reply, None if it failed) was a claim, for
    the claim-latency metric."""
    if path in _CLAIMING:
        return True
    if path != _TAKE or not isinstance(reply, bytes):
        return False
    try:
        got = json.loads(reply)
    except ValueError:
        return False
    return isinstance(got, dict) and got.get("claimed") is not None


#: The proxy's own metadata (not an operation of the store): what it serves.
INFO = f"/{SERVICE}/Info"


@dataclass(frozen=True)
class Info:
    """What the proxy serves: its storage URL with the password hidden (runners derive the
    default artifact directory from it, as they would from the URL itself)."""

    storage: str
    version: str

    def encode(self) -> bytes:
        return _dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes) -> Info:
        got = _loads(raw)
        if not isinstance(got, dict):
            raise WireError("Info: the reply is not a JSON object")
        return cls(str(got.get("storage")), str(got.get("version")))


@dataclass(frozen=True)
class RemoteError:
    """An error raised by the server, sent as the status details: ``kind`` names what the
    client raises (KeyError, UpdateFinishedTrialError, SpecError, StudyNotFoundError,
    StorageError, SweeperError), ``field`` is a SpecError's field."""

    KINDS: ClassVar[tuple[str, ...]] = ("KeyError", "UpdateFinishedTrialError", "SpecError",
                                        "StudyNotFoundError", "StorageError", "SweeperError")

    kind: str
    message: str
    field: str | None = field(default=None)

    def details(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, details: str | None) -> RemoteError | None:
        try:
            d = json.loads(details or "")
        except ValueError:
            return None
        if not isinstance(d, dict) or d.get("kind") not in cls.KINDS:
            return None
        return cls(str(d["kind"]), str(d.get("message")),
                   d.get("field") if isinstance(d.get("field"), str) else None)
