"""The index store: every operation of the index protocol and the sweep record that the
runner, the backends, the CLI and the storage proxy need, as one interface.

Two implementations, and callers never ask which one they hold:

- :class:`sweeper.study.sql.SqlStore`, the database itself: all SQL against Optuna's tables
  lives in :mod:`sweeper.study.sql` (PostgreSQL's one-statement steps and SQLite's
  transactions are its own business);
- :class:`sweeper.study.remote.client.ProxyStorage`, ``grpc://`` to ``sweeper proxy``, which serves
  these operations of a ``SqlStore`` (:mod:`sweeper.proxy.server`); its wire is derived from
  this interface's signatures (:mod:`sweeper.study.remote.wire`).

Both are also Optuna storages (``optuna.storages.BaseStorage``) that Optuna's study writes
through; :func:`sweeper.study.open.open_storage` is the one place that picks one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from optuna.distributions import BaseDistribution

from sweeper.spec import SweepSpec
from sweeper.study.values import (
    Attempt,
    CodePart,
    Created,
    IndexStatus,
    LedgerRow,
    LedgerSums,
    NextTake,
    RungTrial,
    StopState,
    StudyStats,
    SweepSummary,
    Taken,
)

#: Members of :class:`IndexStore` that are not operations on the wire: what a process does
#: with its own handle.
LOCAL = frozenset({"url", "close", "rides", "riding_with_finish", "taken_ahead"})


class IndexStore(Protocol):
    """The index protocol's steps and the sweep record (see DESIGN.md, "The index protocol").
    A ``token`` is a write token: a retry of the call after a lost acknowledgement finds its
    own landed write by it (None: the implementation makes one)."""

    @property
    def url(self) -> str:
        """The storage, password hidden (artifact and log locations derive from it)."""

    def close(self) -> None:
        """Close the connections or the channel."""

    # ---- an index's attempts

    def attempts(self, study_id: int, index: int) -> list[Attempt]:
        """Every trial tagged ``index``, oldest first: one indexed query."""

    def take(self, study_id: int, index: int, user_attrs: dict[str, Any] | None = None,
             token: str | None = None) -> Taken:
        """A runner's first look at ``index``: its attempts and, where the store can in the
        same round trip, the claim of its WAITING trial (with ``user_attrs`` set on it) and the
        sweep's stop attribute."""

    def claim(self, trial_id: int, token: str | None = None) -> bool:
        """WAITING -> RUNNING for exactly one caller, with the first heartbeat."""

    def new_attempt(self, study_id: int, index: int, *, after: Attempt | None,
                    params: dict[str, Any] | None, token: str | None = None) -> int | None:
        """The next attempt of ``index`` as RUNNING, linked to ``after``; None when another
        runner got there first (the latest attempt is no longer ``after``)."""

    def mark_failed(self, trial_id: int, reason: str, token: str | None = None) -> bool:
        """RUNNING -> FAIL with ``reason``; False if the trial had already finished."""

    def fail_stale_trials(self, study_id: int, grace_s: float) -> list[int]:
        """FAIL the RUNNING trials whose heartbeat is older than ``grace_s``; their ids. A
        promoted trial (one with a rung) goes back to WAITING, paused, instead
        (:meth:`requeue_stale`): its promotion is claimed again."""

    def record_heartbeat(self, trial_id: int) -> None:
        """The runner's heartbeat for a RUNNING trial."""

    # ---- a scheduler's pauses (scheduler: promotion ASHA)

    def rung_trials(self, study_id: int, steps: list[int]) -> list[RungTrial]:
        """Every trial with an intermediate value at one of ``steps`` or a rung it paused at
        (its values at those steps, its pause, its heartbeat's age): one query."""

    def pause(self, trial_id: int, rung: int, token: str | None = None) -> bool:
        """RUNNING -> WAITING, paused at ``rung`` with its checkpoint kept; False if the trial
        was not RUNNING. Its promotion is claimed with :meth:`claim`."""

    def requeue_stale(self, study_id: int, grace_s: float) -> list[int]:
        """Promoted trials (RUNNING, with a rung) whose heartbeat is older than ``grace_s``
        back to WAITING, paused at their rung; their ids."""

    def finish_paused(self, study_id: int) -> list[int]:
        """The sweep's end: every paused trial WAITING -> PRUNED (its rung kept); the ids this
        call finished."""

    # ---- the sweep record and its stop

    def create_or_resume(self, spec: SweepSpec) -> Created:
        """Create the study and enqueue its plan, resume it, or grow it (one WAITING trial per
        index, safe against concurrent launches); any other change under the name is a
        SpecError, raised before anything is written."""

    def stop_state(self, study_id: int) -> StopState | None:
        """The recorded stop, if any."""

    def stop_check(self, study_id: int, spec: SweepSpec, *,
                   after_trial: bool) -> StopState | None:
        """Evaluate ``spec``'s stop rules (before a start, or after a trial) and record the
        first that fires; the stop state if stopped."""

    def ignore_stop(self, study_id: int) -> StopState | None:
        """Keep what fired, for the record, and turn the rules off."""

    def brake(self, study_id: int, limit: int) -> StopState | None:
        """Record the default brake's stop when the first ``limit`` attempts all failed."""

    def record_stop(self, study_id: int, rule: str, reason: str) -> StopState:
        """Record that ``rule`` stopped the sweep (the budget's, :mod:`sweeper.study.ledger`);
        a stop recorded first stands. What is stored."""

    # ---- the ledger (sweeper.accounting)

    def ledger(self, study_id: int) -> list[LedgerRow]:
        """Every closed segment of the study's trials and the open segment of each RUNNING
        one (with the highest step it reported): one query."""

    def ledger_sums(self, study_id: int) -> LedgerSums:
        """What the budget gate reads, in one statement: the closed segments of the trials
        that are not RUNNING summed by the database, the RUNNING trials' ledger rows, and
        how many trials finished. Only the running trials' rows travel: the closed segments
        are summed where they are stored."""

    # ---- a running trial's writes

    def set_trial_user_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        """Several user attributes in one transaction."""

    def write_trial(self, trial_id: int, *, user_attrs: dict[str, Any],
                    params: dict[str, tuple[Any, BaseDistribution]],
                    reports: list[tuple[int, float]]) -> None:
        """User attributes, params (value, distribution) and new reports (step, value) of a
        running trial in one transaction, each an upsert (a retry writes nothing twice)."""

    def rides(self) -> bool:
        """Whether a trial's finish can carry its pending writes in its own statement
        (:meth:`riding_with_finish` yields True): the runner then writes reports behind."""

    def riding_with_finish(self, trial_id: int, user_attrs: Mapping[str, Any],
                           reports: Sequence[tuple[int, float]],
                           then: NextTake | None = None) -> AbstractContextManager[bool]:
        """While in the block, a finish of the trial writes ``user_attrs`` and ``reports`` in
        its own statement; yields False where it cannot (the caller writes them first).
        ``then``: the runner's next index, taken in that statement too where the finish is
        COMPLETE or PRUNED (:meth:`taken_ahead` has what it found)."""

    def taken_ahead(self, token: str) -> Taken | None:
        """What the take with ``token`` that rode with a finish found, once; None where it did
        not ride or its result was lost: the runner then takes the index with the same token
        (:meth:`take`), which finds a claim that landed."""

    # ---- reads for status, list, metrics and delete

    def state_counts(self, study_id: int) -> dict[str, int]:
        """Trials by state."""

    def best_so_far(self, study_id: int, direction: str) -> tuple[int, float] | None:
        """(number, value) of the best COMPLETE trial of a single-objective study."""

    def index_table(self, study_id: int, trials: int | None) -> list[IndexStatus]:
        """Per index: its latest attempt's state, attempts, values and fail reason, of
        indexes ``0 .. trials-1`` (None: an open-ended sweep's, up to the highest started)."""

    def study_stats(self, study_id: int | None, buckets: list[float]) -> list[StudyStats]:
        """What the metrics read, of one study or (None) of every study."""

    def list_sweeps(self) -> list[SweepSummary]:
        """Every study of the storage, by name."""

    def study_names(self) -> tuple[list[str], list[str]]:
        """(names of the sweeps, names of the other Optuna studies), sorted."""

    def artifact_ids(self, study_id: int) -> list[str]:
        """The ids of every artifact the study's trials recorded."""

    # ---- code snapshots kept in the study

    def code_part(self, study_id: int, digest_hex: str, part: int) -> CodePart | None:
        """Part ``part`` of the code snapshot ``digest_hex`` stored in the study (written
        with Optuna's ``set_study_system_attr``), or None when it is not there. One part per
        call: a reply stays well under gRPC's 4 MiB."""
