"""sweeper's own gRPC service, the wire both ends agree on: the steps of the index protocol
that Optuna's storage API cannot express atomically (find an index's attempts, claim one,
create the next attempt under the study lock, enqueue a plan), plus the few reads and writes
the runner batches (user attrs, heartbeats, summaries).

No protoc: every message is a frozen dataclass sent as JSON (``grpc.method_handlers_generic_
handler`` on the server, ``channel.unary_unary`` on the client). Errors travel as a status code
and a JSON ``details`` naming the error, so the client raises what the direct path raises.
Nothing here does I/O or imports grpc.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

#: The service's full name (``/sweeper.v1.IndexProtocol/<Method>``).
SERVICE = "sweeper.v1.IndexProtocol"

W = TypeVar("W", bound="Wire")


class Wire:
    """A message: a dataclass that is its own JSON codec."""

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()  # type: ignore[call-overload]

    @classmethod
    def decode(cls: type[W], data: bytes) -> W:
        return cls.from_dict(json.loads(data) if data else {})

    @classmethod
    def from_dict(cls: type[W], d: dict[str, Any]) -> W:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Empty(Wire):
    pass


@dataclass(frozen=True)
class StudyRef(Wire):
    study_id: int


@dataclass(frozen=True)
class TrialRef(Wire):
    trial_id: int


@dataclass(frozen=True)
class StudyIndex(Wire):
    study_id: int
    index: int


@dataclass(frozen=True)
class AttemptMsg(Wire):
    """sweeper.study.index.Attempt, with the state by name."""

    trial_id: int
    number: int
    state: str
    attempt: int
    heartbeat_age_s: float | None


@dataclass(frozen=True)
class AttemptList(Wire):
    attempts: list[AttemptMsg]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttemptList:
        return cls([AttemptMsg.from_dict(a) for a in d["attempts"]])


@dataclass(frozen=True)
class NewAttemptMsg(Wire):
    study_id: int
    index: int
    after: AttemptMsg | None
    params: dict[str, Any] | None
    #: The write token (``sweeper.study.writes``), made by the client so that a call it
    #: retries is recognised as the same write.
    token: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NewAttemptMsg:
        after = AttemptMsg.from_dict(d["after"]) if d.get("after") is not None else None
        return cls(d["study_id"], d["index"], after, d.get("params"), d.get("token"))


@dataclass(frozen=True)
class ClaimMsg(Wire):
    trial_id: int
    token: str | None = None


@dataclass(frozen=True)
class Flag(Wire):
    value: bool


@dataclass(frozen=True)
class MaybeTrialId(Wire):
    trial_id: int | None


@dataclass(frozen=True)
class TrialIds(Wire):
    trial_ids: list[int]


@dataclass(frozen=True)
class MarkFailedMsg(Wire):
    trial_id: int
    reason: str
    token: str | None = None


@dataclass(frozen=True)
class StaleSweepMsg(Wire):
    study_id: int
    grace_s: float


@dataclass(frozen=True)
class SpecRecord(Wire):
    """A spec in its normalised form (``SweepSpec.to_dict()``), artifacts included, and the
    directory of the spec file it came from (recorded for ``resume NAME``; not in the record)."""

    record: dict[str, Any]
    base_dir: str | None = None


@dataclass(frozen=True)
class Created(Wire):
    study_id: int
    created: bool
    #: The number of indexes this launch grew the sweep from (None: it did not grow it).
    grown_from: int | None = None


@dataclass(frozen=True)
class StopCheckMsg(Wire):
    """Evaluate the stop rules of ``record`` (a normalised spec: the rules are not part of
    the spec hash, so the caller's are the ones that count): before a claim, or after a
    trial finished."""

    study_id: int
    record: dict[str, Any]
    after_trial: bool


@dataclass(frozen=True)
class MaybeStop(Wire):
    """sweeper.study.stop.StopState as its JSON (``to_json()``), or None."""

    state: dict[str, Any] | None


@dataclass(frozen=True)
class Counts(Wire):
    counts: dict[str, int]


@dataclass(frozen=True)
class IndexTableMsg(Wire):
    study_id: int
    trials: int


@dataclass(frozen=True)
class IndexRows(Wire):
    """sweeper.study.summaries.IndexStatus rows: [index, state, attempts, number, values,
    fail_reason]."""

    rows: list[list[Any]]


@dataclass(frozen=True)
class UserAttrsMsg(Wire):
    trial_id: int
    attrs: dict[str, Any]


@dataclass(frozen=True)
class StatsMsg(Wire):
    """Which studies (None: every study in the storage) and the duration histogram's bounds."""

    study_id: int | None
    buckets: list[float]


@dataclass(frozen=True)
class StudyStatsMsg(Wire):
    """sweeper.study.stats.StudyStats."""

    study: str
    states: dict[str, int]
    duration_buckets: list[int]
    duration_sum_s: float
    best: dict[str, float]


@dataclass(frozen=True)
class StatsList(Wire):
    studies: list[StudyStatsMsg]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StatsList:
        return cls([StudyStatsMsg.from_dict(s) for s in d["studies"]])


@dataclass(frozen=True)
class Info(Wire):
    """What the proxy serves: its storage URL with the password hidden (runners derive the
    default artifact directory from it, as they would from the URL itself)."""

    storage: str
    version: str


@dataclass(frozen=True)
class Method:
    name: str
    request: type[Wire]
    reply: type[Wire]

    @property
    def path(self) -> str:
        return f"/{SERVICE}/{self.name}"


#: Every method of the service: name -> (request, reply).
METHODS: dict[str, Method] = {m.name: m for m in [
    Method("Attempts", StudyIndex, AttemptList),
    Method("Claim", ClaimMsg, Flag),
    Method("NewAttempt", NewAttemptMsg, MaybeTrialId),
    Method("MarkFailed", MarkFailedMsg, Flag),
    Method("FailStaleTrials", StaleSweepMsg, TrialIds),
    Method("CreateOrResume", SpecRecord, Created),
    Method("StateCounts", StudyRef, Counts),
    Method("IndexTable", IndexTableMsg, IndexRows),
    Method("StopCheck", StopCheckMsg, MaybeStop),
    Method("IgnoreStop", StudyRef, MaybeStop),
    Method("SetTrialUserAttrs", UserAttrsMsg, Empty),
    Method("Heartbeat", TrialRef, Empty),
    Method("Stats", StatsMsg, StatsList),
    Method("Info", Empty, Info),
]}


@dataclass(frozen=True)
class RemoteError(Wire):
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
        return cls.from_dict(d)

