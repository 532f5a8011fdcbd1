"""What the index store's operations take and return (:mod:`.store`): plain frozen dataclasses
that both of its implementations build, the SQL one from rows and the proxy client from the
wire (:mod:`sweeper.study.remote.codec` encodes them by their type hints). No I/O here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from optuna.trial import TrialState

#: States in which an index is done: nothing left to run.
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

#: A stop rule fired; the user chose to go on past it (the rules are off for this sweep).
STOPPED, IGNORED = "stopped", "ignored"


@dataclass(frozen=True)
class CodePart:
    """One part of a code snapshot kept in the study (``sweeper.code.stores``): base64 of
    its bytes, and how many parts the snapshot has."""

    parts: int
    data: str


@dataclass(frozen=True)
class Attempt:
    """One trial of one index."""

    trial_id: int
    number: int
    state: TrialState
    attempt: int
    heartbeat_age_s: float | None  # seconds since the last heartbeat (RUNNING trials)


#: A claimed trial's stored rows for opening it without a query: (kind, key, value_json,
#: value): "u" user attribute, "s" system attribute, "p" param (its distribution's JSON and
#: internal value).
StoredRow = tuple[str, str, str, float | None]


@dataclass(frozen=True)
class Taken:
    """What a runner's first look at its index found (``IndexStore.take``)."""

    #: The index's attempts, oldest first, as they were before this call claimed one.
    attempts: list[Attempt]
    #: The attempt this call claimed; None: nothing claimed, the caller decides as after
    #: ``attempts``.
    claimed: Attempt | None = None
    #: The claimed trial as this call left it (the attributes this call set last). None:
    #: open it with a query (claimed by an earlier attempt of this call whose acknowledgement
    #: was lost, or nothing claimed).
    stored: tuple[StoredRow, ...] | None = None
    #: The start time the claim wrote (naive UTC, as Optuna stores it).
    started: datetime | None = None
    #: Whether the sweep's stop attribute was read with the attempts, and its value then
    #: (None: no stop recorded). Not read: the caller reads it (``sweeper.study.stop``).
    stop_read: bool = False
    stop: Any = None


@dataclass(frozen=True)
class NextTake:
    """The take of the next index a runner holds, to ride with the finish of its trial
    (``IndexStore.riding_with_finish``): one round trip for both. ``token``: the take's write
    token; a take of ``index`` with it afterwards finds the claim if it landed."""

    study_id: int
    index: int
    user_attrs: dict[str, Any]
    token: str


@dataclass(frozen=True)
class Created:
    """What creating or resuming a sweep did (``IndexStore.create_or_resume``)."""

    study_id: int
    created: bool
    #: The number of indexes this launch grew the sweep from (None: it did not grow it).
    grown_from: int | None = None


@dataclass(frozen=True)
class StopState:
    """What the study says: a rule fired (``stopped``), or the user chose to go on past it
    (``ignored``: the rules are off for this sweep)."""

    state: str
    rule: str
    reason: str
    at: str
    trial: int | None = None

    @property
    def stopped(self) -> bool:
        return self.state == STOPPED

    def describe(self) -> str:
        """One line: which rule fired, when, and why."""
        return f"stop rule {self.rule} fired at {self.at[:19]}Z: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "rule": self.rule, "reason": self.reason, "at": self.at,
                "trial": self.trial}


def parse_state(value: Any) -> StopState | None:
    """The stop attribute's stored value as a state (None: nothing recorded)."""
    if not isinstance(value, dict) or value.get("state") not in (STOPPED, IGNORED):
        return None
    return StopState(value["state"], str(value.get("rule")), str(value.get("reason")),
                     str(value.get("at")), value.get("trial"))


@dataclass(frozen=True)
class IndexStatus:
    """One index of a sweep as ``status`` reads it from the index table (one query): its
    latest attempt's state, trial number, values (in the objectives' order) and failure
    reason, and how many attempts it took."""

    index: int
    state: str  # state of the latest attempt, or "PENDING" when nothing exists yet (adaptive)
    attempts: int
    trial_number: int | None
    values: tuple[float, ...] | None
    #: Why the latest attempt failed (its ``sweeper:fail_reason``); None unless it is FAIL.
    fail_reason: str | None = None
    #: The code snapshot the latest attempt ran with (its ``sweeper:code``), if it recorded one.
    code: str | None = None


@dataclass(frozen=True)
class RungTrial:
    """A trial as the scheduler sees it (``IndexStore.rung_trials``): its intermediate values
    at the rung steps asked for, and its pause."""

    trial_id: int
    number: int
    index: int | None
    state: TrialState
    #: ``sweeper:rung``: the rung it paused at last (None: it never paused).
    rung: int | None
    #: WAITING with ``sweeper:paused`` true: paused, its promotion unclaimed.
    paused: bool
    heartbeat_age_s: float | None  # seconds since the last heartbeat (RUNNING trials)
    #: (step, intermediate value) at the steps asked for.
    values: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class SweepSummary:
    """One study of a storage for ``sweeper list``. ``is_sweep`` is False for an Optuna study
    that sweeper did not create (no record: no method, no indexes)."""

    name: str
    is_sweep: bool
    method: str | None
    indexes: int | None
    finished_indexes: int | None
    metrics: tuple[str, ...]
    directions: tuple[str, ...]
    trials_by_state: dict[str, int]
    #: The best objective value (single objective, some trial COMPLETE), else None.
    best: float | None
    #: The latest trial start or completion time (naive UTC, as Optuna stores it).
    last_activity: datetime | None


@dataclass(frozen=True)
class StudyStats:
    """What the Prometheus metrics read from a study (``IndexStore.study_stats``)."""

    study: str
    states: dict[str, int]
    #: Finished trials (COMPLETE, PRUNED, FAIL) whose duration is <= each bound, then all.
    duration_buckets: list[int]
    duration_sum_s: float
    #: Objective metric name -> best finite value among COMPLETE trials.
    best: dict[str, float]


@dataclass(frozen=True)
class LedgerRow:
    """One row of a sweep's ledger (``IndexStore.ledger``): a closed segment of a trial
    (``key`` a ``protocol.usage_key``), or the open segment (``protocol.SEGMENT_ATTR``) of a
    RUNNING trial, with the highest step the trial reported and the checkpoint step it
    resumed from (``sweeper:resumed_from_step``). ``value`` is the attribute's JSON text
    (:mod:`sweeper.accounting` reads it)."""

    number: int
    index: int | None
    state: TrialState
    key: str
    value: str
    last_step: int | None = None
    resumed_from: int | None = None


@dataclass(frozen=True)
class ClosedSum:
    """Closed segments of one ending (``Ending`` value) and one (GPUs, CPUs), summed by the
    database: wall time in whole milliseconds, steps, how many (``accounting.UsageSum``)."""

    ending: str
    gpus: float
    cpus: float
    wall_ms: int
    steps: int
    segments: int


@dataclass(frozen=True)
class LedgerSums:
    """What the budget gate reads (``IndexStore.ledger_sums``), in one statement: the closed
    segments of the trials that are not RUNNING, summed (``closed``); every ledger row of the
    RUNNING trials (their open segment and the ones they closed: read one by one, as
    ``IndexStore.ledger`` rows, because an open segment whose close is written counts once,
    closed); and how many trials that have a closed segment completed or were pruned. Where
    a stored segment is not what sweeper writes (not a JSON object, a number out of range),
    ``closed`` is empty and ``rows`` holds the whole ledger, read as ever."""

    closed: tuple[ClosedSum, ...]
    rows: tuple[LedgerRow, ...]
    finished_trials: int
