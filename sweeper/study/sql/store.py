"""The index store on a database (:class:`sweeper.study.store.IndexStore`): Optuna's
retrying RDBStorage plus the index protocol's operations, each one line here to the module of
this package that holds its SQL. The storage proxy serves these same methods."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from optuna.distributions import BaseDistribution

from sweeper.spec import SweepSpec
from sweeper.study.sql import (
    artifacts,
    code,
    ledger,
    oneshot,
    paused,
    record,
    stats,
    stop,
    summaries,
)
from sweeper.study.sql import index as steps
from sweeper.study.sql import trials as rows
from sweeper.study.sql.storage import RetryingRDBStorage
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


class SqlStore(RetryingRDBStorage):
    """PostgreSQL or SQLite as the index store (see the module docstring)."""

    def close(self) -> None:
        self.engine.dispose()

    # ---- an index's attempts

    def attempts(self, study_id: int, index: int) -> list[Attempt]:
        return steps.attempts(self, study_id, index)

    def take(self, study_id: int, index: int, user_attrs: dict[str, Any] | None = None,
             token: str | None = None) -> Taken:
        return steps.take(self, study_id, index, user_attrs, token)

    def claim(self, trial_id: int, token: str | None = None) -> bool:
        return steps.claim(self, trial_id, token=token)

    def new_attempt(self, study_id: int, index: int, *, after: Attempt | None,
                    params: dict[str, Any] | None, token: str | None = None) -> int | None:
        return steps.new_attempt(self, study_id, index, after=after, params=params,
                                 token=token)

    def mark_failed(self, trial_id: int, reason: str, token: str | None = None) -> bool:
        return steps.mark_failed(self, trial_id, reason, token=token)

    def fail_stale_trials(self, study_id: int, grace_s: float) -> list[int]:
        paused.requeue_stale(self, study_id, grace_s)  # promotions are claimed again, not failed
        return steps.fail_stale_trials(self, study_id, grace_s)

    # ---- a scheduler's pauses

    def rung_trials(self, study_id: int, steps: list[int]) -> list[RungTrial]:
        return paused.rung_trials(self, study_id, steps)

    def pause(self, trial_id: int, rung: int, token: str | None = None) -> bool:
        return paused.pause(self, trial_id, rung, token=token)

    def requeue_stale(self, study_id: int, grace_s: float) -> list[int]:
        return paused.requeue_stale(self, study_id, grace_s)

    def finish_paused(self, study_id: int) -> list[int]:
        return paused.finish_paused(self, study_id)

    # ---- the sweep record and its stop

    def create_or_resume(self, spec: SweepSpec) -> Created:
        return record.create_or_resume(self, spec)

    def stop_state(self, study_id: int) -> StopState | None:
        return stop.read_stop(self, study_id)[0]

    def stop_check(self, study_id: int, spec: SweepSpec, *,
                   after_trial: bool) -> StopState | None:
        return stop.stop_check(self, study_id, spec, after_trial=after_trial)

    def ignore_stop(self, study_id: int) -> StopState | None:
        return stop.ignore_stop(self, study_id)

    def brake(self, study_id: int, limit: int) -> StopState | None:
        return stop.brake(self, study_id, limit)

    def record_stop(self, study_id: int, rule: str, reason: str) -> StopState:
        return stop.record_stop(self, study_id, rule, reason)

    # ---- the ledger

    def ledger(self, study_id: int) -> list[LedgerRow]:
        return ledger.ledger(self, study_id)

    def ledger_sums(self, study_id: int) -> LedgerSums:
        return ledger.ledger_sums(self, study_id)

    # ---- a running trial's writes

    def set_trial_user_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        rows.write_user_attrs(self, trial_id, attrs)

    def write_trial(self, trial_id: int, *, user_attrs: dict[str, Any],
                    params: dict[str, tuple[Any, BaseDistribution]],
                    reports: list[tuple[int, float]]) -> None:
        rows.write_rows(self, trial_id, user_attrs=user_attrs, params=params,
                        reports=reports)

    def rides(self) -> bool:
        return oneshot.alone(self.engine)

    @contextmanager
    def riding_with_finish(self, trial_id: int, user_attrs: Mapping[str, Any],
                           reports: Sequence[tuple[int, float]],
                           then: NextTake | None = None) -> Iterator[bool]:
        ctes, binds = rows.finish_ctes(trial_id, user_attrs, reports)
        with self.riding(trial_id, ctes, binds, then) as rides:
            yield rides

    # ---- reads for status, list, metrics and delete

    def state_counts(self, study_id: int) -> dict[str, int]:
        return summaries.state_counts(self, study_id)

    def best_so_far(self, study_id: int, direction: str) -> tuple[int, float] | None:
        return summaries.best_so_far(self, study_id, direction)

    def index_table(self, study_id: int, trials: int | None) -> list[IndexStatus]:
        return summaries.index_table(self, study_id, trials)

    def study_stats(self, study_id: int | None, buckets: list[float]) -> list[StudyStats]:
        return stats.study_stats(self, study_id, buckets)

    def list_sweeps(self) -> list[SweepSummary]:
        return summaries.list_sweeps(self)

    def study_names(self) -> tuple[list[str], list[str]]:
        return summaries.study_names(self)

    def study_of_trial(self, trial_id: int) -> int | None:
        """The proxy's authorisation (not an operation of the interface: server side only)."""
        return summaries.study_of_trial(self, trial_id)

    def artifact_ids(self, study_id: int) -> list[str]:
        return artifacts.artifact_ids(self, study_id)

    def code_part(self, study_id: int, digest_hex: str, part: int) -> CodePart | None:
        return code.code_part(self, study_id, digest_hex, part)
