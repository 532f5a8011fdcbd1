"""The index protocol, runner side: turn index i into exactly one finished trial.

Runner i first reads the sweep's stop state (only when the spec has stop: rules): stopped ->
start nothing, create no trial, exit 0. Then it looks up the trials tagged i (one indexed
query):
  COMPLETE/PRUNED      -> nothing to do;
  WAITING              -> claim it atomically (RUNNING), or look again if another runner won;
  RUNNING, heartbeat fresh -> another runner owns it: wait until it finishes or goes stale;
  RUNNING, stale       -> that attempt died: mark it FAIL and look again;
  FAIL                 -> create the next attempt with the same params, linked to it;
  nothing (adaptive)   -> create attempt 0 and ask the sampler.
Under a scheduler (trial_runner.promotion): a claimed trial that is paused is put back (the
index is done for now); a stale RUNNING one with a rung goes back to WAITING, paused, not FAIL;
a trial the pruner ranks out at a rung pauses (WAITING, ``sweeper:rung``) instead of PRUNED.
After its trial finishes it evaluates the stop rules; the first to fire is recorded.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper import protocol
from sweeper._optuna_compat import trial_id_of
from sweeper.accounting import Ending, OpenSegment, Usage, ending_of_signal, trial_usages
from sweeper.artifacts import cached_artifact_store
from sweeper.errors import SpecError, StorageError
from sweeper.protocol import (
    CANCELLED_ATTR,
    FAILED_FOR_GOOD_ATTR,
    FIXED_PARAMS_ATTR,
    LAUNCHES_ATTR,
    PAUSED_ATTR,
    RUNG_ATTR,
    SEGMENT_ATTR,
    LogHeader,
)
from sweeper.spec.registry import make_pruner, make_sampler  # the validator's registry too
from sweeper.study import Sweep, stop
from sweeper.study.ledger import may_start
from sweeper.study.sql.trials import open_claimed, open_trial
from sweeper.study.trials import unwritten, write_trial
from sweeper.study.values import FINISHED, Attempt, NextTake, Taken
from trial_runner.asha import paused_rung
from trial_runner.checkpoints import CheckpointMirror
from trial_runner.context import (
    InvalidResult,
    ProgramFailed,
    SuggestNotAllowed,
    TrialContext,
    TrialTimeout,
    objective_values,
)
from trial_runner.data import DataError, data_dir
from trial_runner.finish import fail_trial, finish_pruned, superseded, tell_state
from trial_runner.outcome import (
    BudgetSpent,
    Claimed,
    Interrupted,
    Outcome,
    OutcomeState,
    RunnerSettings,
)
from trial_runner.params import planned, provenance, suggest_active
from trial_runner.pbt import scheduler_pruner
from trial_runner.reports import ReportWriter
from trial_runner.resume import history_so_far, restore_checkpoint
from trial_runner.usage import BudgetWatch, Segment, last_step_of, new_segment
from trial_runner.watchdog import Heartbeat, after_trial, start_timeout

logger = logging.getLogger(__name__)

#: Called with the trial's id and its log header once a runner has claimed a trial, before it
#: runs: an attempt, or a promoted segment of one (the header's ``index`` is the trial's).
TrialHook = Callable[[int, LogHeader], None]


def _not_started(index: int, stopped: stop.StopState) -> Outcome:
    return Outcome(index, protocol.EXIT_OK, OutcomeState.STOPPED, None,
                   f"index {index} not started: the sweep is stopped ({stopped.describe()})")


def _recorded_stop(sweep: Sweep, taken: Taken) -> stop.StopState | None:
    """The stop recorded on the study, if any: as the first look read it (PostgreSQL, where
    it also kept the claim from happening), else read now. Nothing to read when the spec has
    rules (``before_start`` read it just before) or the brake is off and no rule is set."""
    if taken.stop_read:
        state = stop.parse_state(taken.stop)
    elif sweep.spec.stop.any or stop.brake_limit(sweep.spec) <= 0:
        return None
    else:
        state = sweep.storage.stop_state(sweep.study_id)
    return state if state is not None and state.stopped else None


def acquire(sweep: Sweep, index: int, settings: RunnerSettings,
            sleep: Callable[[float], None] = time.sleep) -> Claimed | Outcome:
    """Steps 1-2 of the protocol: the trial this runner owns now, or the Outcome when there is
    nothing to run."""
    storage = sweep.storage
    taken, opened = _first_look(sweep, index, settings)
    stopped = _recorded_stop(sweep, taken)
    if stopped is not None:
        return _not_started(index, stopped)
    if taken.claimed is not None:
        return Claimed(taken.claimed.trial_id, taken.claimed.attempt, taken, opened)
    atts = taken.attempts
    while True:  # the table at the top of this module, one row a line
        latest = atts[-1] if atts else None
        got: Claimed | Outcome | None = None
        if done := [a for a in atts if a.state in FINISHED]:  # COMPLETE/PRUNED
            got = _already_done(index, done[-1])
        elif latest is None:                                   # nothing
            got = _first_attempt(sweep, index)
        elif latest.state == TrialState.WAITING:               # claim it, or look again
            got = Claimed(latest.trial_id, latest.attempt) \
                if storage.claim(latest.trial_id) else None
        elif latest.state == TrialState.RUNNING:               # wait, or fail a stale one
            _running(storage, index, latest, settings, sleep, requeue=_requeues(sweep))
        elif latest.state == TrialState.FAIL:                  # the next attempt
            got = _next_attempt(sweep, index, latest)
        if got is not None:
            return got
        atts = storage.attempts(sweep.study_id, index)


def _first_look(sweep: Sweep, index: int, settings: RunnerSettings
                ) -> tuple[Taken, OpenSegment]:
    """The first look at ``index``, which claims its WAITING trial in the same round trip
    where it can and stamps it with the runner's provenance and the segment it opens there
    (returned with it); where the finish of the trial before it took the index already, what
    that found, or (its reply lost) the same take again, which finds its own claim."""
    storage = sweep.storage
    held = settings.ahead.held(index) if settings.ahead is not None else None
    if held is None:
        opened = new_segment(sweep.spec)
        return storage.take(sweep.study_id, index,
                            user_attrs=_claim_attrs(sweep, opened)), opened
    ahead, opened = held
    taken = storage.taken_ahead(ahead.token) or storage.take(
        sweep.study_id, index, user_attrs=ahead.user_attrs, token=ahead.token)
    return taken, opened


def _claim_attrs(sweep: Sweep, opened: OpenSegment) -> dict[str, Any]:
    """What a claim stamps on its trial: the runner's provenance and the segment it opens."""
    return {**provenance(sweep.spec), SEGMENT_ATTR: opened.encode()}


def _take_ahead(sweep: Sweep, settings: RunnerSettings) -> NextTake | None:
    """The take of the worker's next index to ride with the finish of its trial now ending
    (trial_runner.ahead); None: take nothing ahead. Only where nothing has to see the end of
    this trial before the next one is claimed: no stop rule (evaluated after each trial), no
    budget (the gate reads what was spent), no scheduler (a promotion may come first), one
    node. The brake looks at failures only, and a failed trial takes nothing ahead."""
    spec, ahead = sweep.spec, settings.ahead
    if ahead is None or spec.stop.any or spec.budget.enabled or _requeues(sweep) is not None \
            or spec.trial.nodes > 1 or not sweep.storage.rides():
        return None
    index = ahead.next_index()
    if index is None:
        return None
    opened = new_segment(spec)
    take = NextTake(sweep.study_id, index, _claim_attrs(sweep, opened), uuid.uuid4().hex)
    ahead.hold(take, opened)
    return take


def release_taken_ahead(sweep: Sweep, settings: RunnerSettings, e: Interrupted) -> None:
    """A worker stopping between a finish that took its next index and that index's run: the
    trial it claimed, if it claimed one, is marked FAIL (resumable), as an attempt stopped
    while it ran is, instead of staying RUNNING until its heartbeat is stale."""
    take = settings.ahead.drop() if settings.ahead is not None else None
    taken = sweep.storage.taken_ahead(take.token) if take is not None else None
    if taken is not None and taken.claimed is not None:
        _fail_claimed(sweep, taken.claimed.trial_id, e)


def _requeues(sweep: Sweep) -> int | None:
    """The study whose stale promotions go back to WAITING (a scheduler's sweep), or None."""
    scheduler = sweep.spec.scheduler
    return sweep.study_id if scheduler is not None and scheduler.enabled else None


def _already_done(index: int, last: Attempt) -> Outcome:
    return Outcome(index, protocol.EXIT_OK, OutcomeState.ALREADY_DONE, last.number,
                   f"index {index} already finished (trial #{last.number})")


def _first_attempt(sweep: Sweep, index: int) -> Claimed | Outcome | None:
    """Attempt 0 of an adaptive sweep's index (None: another runner created it first)."""
    if not sweep.spec.is_adaptive:
        return Outcome(index, protocol.EXIT_CONFIG, OutcomeState.FAIL, None,
                       f"index {index} is not part of sweep {sweep.name!r} "
                       f"(indexes 0..{sweep.spec.trials - 1})")
    tid = sweep.storage.new_attempt(sweep.study_id, index, after=None, params=None)
    return Claimed(tid, 0) if tid is not None else None


def _running(storage: Any, index: int, latest: Attempt, settings: RunnerSettings,
             sleep: Callable[[float], None], *, requeue: int | None = None) -> None:
    """A RUNNING attempt: FAIL it if its heartbeat is stale, else wait a while. Under a
    scheduler (``requeue``: the study) a stale promotion goes back to WAITING, paused, instead:
    the next look finds it paused (the index is done for now)."""
    age = latest.heartbeat_age_s
    if age is not None and age > settings.grace_period_s:
        if requeue is not None and \
                latest.trial_id in storage.requeue_stale(requeue, settings.grace_period_s):
            return
        storage.mark_failed(latest.trial_id, f"heartbeat {age:.0f}s old: the runner died or froze")
    else:
        logger.info("index %d: trial #%d is running elsewhere; waiting", index, latest.number)
        sleep(min(settings.heartbeat_interval_s, 2.0))


def _next_attempt(sweep: Sweep, index: int, latest: Attempt) -> Claimed | None:
    """The attempt after a FAIL, with its params (None: another runner created it first)."""
    frozen = sweep.storage.get_trial(latest.trial_id)
    params = frozen.system_attrs.get(FIXED_PARAMS_ATTR) or frozen.params or None
    tid = sweep.storage.new_attempt(sweep.study_id, index, after=latest, params=params)
    return Claimed(tid, latest.attempt + 1) if tid is not None else None


def run_index(sweep: Sweep, index: int, objective: Callable[[TrialContext], Any],
              settings: RunnerSettings, *, trial_hook: TrialHook | None = None) -> Outcome:
    """Run index ``index`` to exactly one finished trial (or a FAIL that says why); nothing
    once the sweep's stop rules have stopped it. ``trial_hook(trial_id, header)`` is called
    once the attempt is claimed, before it runs. A database error no retry fixed
    (:class:`StorageError`: permanent, or an outage past the deadline) ends the index with
    one line and a retryable exit code, never a traceback."""
    try:
        # A rule may fire now (max_duration); a stop already recorded (a rule's or the
        # brake's) is read with the first look at the index (acquire).
        stopped = stop.before_start(sweep.storage, sweep.study_id, sweep.spec) \
            if sweep.spec.stop.any else None
        if stopped is not None:
            return _not_started(index, stopped)
        if sweep.spec.budget.enabled and not (budget := may_start(sweep)).may_start:
            return Outcome(index, protocol.EXIT_OK, OutcomeState.STOPPED, None,
                           f"index {index} not started: {budget.reason}")
        got = acquire(sweep, index, settings)
    except StorageError as e:
        return Outcome(index, protocol.EXIT_RETRY, OutcomeState.FAIL, None, f"index {index}: {e}")
    if isinstance(got, Outcome):
        return got
    return run_claimed(sweep, index, got, objective, settings, trial_hook=trial_hook)


def run_claimed(sweep: Sweep, index: int, got: Claimed, objective: Callable[[TrialContext], Any],
                settings: RunnerSettings, *, trial_hook: TrialHook | None = None,
                promotion: bool = False) -> Outcome:
    """Run the trial this runner claimed (of ``index``) to its end: finished, failed, or
    paused at a rung (``scheduler:``). A paused trial claimed as its index's WAITING trial is
    put back at once (only ``promotion``, a claim of :mod:`trial_runner.promotion`, runs it:
    its header names ``index``, the trial's own, and the rung it was promoted from)."""
    trial_id, attempt, taken = got.trial_id, got.attempt, got.taken
    spec = sweep.spec
    rung: int | None = None  # a promoted trial's: an interruption pauses it there again
    try:
        pruner = scheduler_pruner(sweep) if spec.scheduler.enabled else make_pruner(spec)
        study = sweep.runner_study(make_sampler(spec, index), pruner)
        trial = _open(study, trial_id, taken)
        number, attrs = trial.number, trial.user_attrs  # (a deep copy: read once)
        if attrs.get(PAUSED_ATTR) and not promotion:  # not the index's to run
            return _pause(sweep, index, trial_id, number, attrs.get(RUNG_ATTR, 0),
                          unrun=got.segment)
        rung = attrs.get(RUNG_ATTR)
        if trial_hook is not None:
            trial_hook(trial_id, LogHeader(index, attempt, number,
                                           rung if promotion else None))
        if promotion:
            logger.info("index %d: trial #%d promoted from rung %s", index, number, rung)
        with Heartbeat(sweep, trial_id, settings.heartbeat_interval_s):
            outcome = _run_trial(sweep, study, trial, index, attempt, objective, settings,
                                 got.segment)
        if outcome.state is OutcomeState.PAUSED and outcome.rung is not None:  # no beat after it
            outcome = _pause(sweep, index, trial_id, number, outcome.rung)
    except BudgetSpent as e:  # on_exhausted: stop: ended resumable, the index stops here
        if rung is not None:
            sweep.storage.pause(trial_id, rung)
        return Outcome(index, protocol.EXIT_OK, OutcomeState.STOPPED, number,
                       f"index {index}: trial #{number} stopped: {e.reason}; resumable")
    except StorageError as e:  # down past its retries: the launcher starts the index again
        _fail_claimed(sweep, trial_id, e)
        return Outcome(index, protocol.EXIT_RETRY, OutcomeState.FAIL, None, f"index {index}: {e}")
    except BaseException as e:
        if isinstance(e, Interrupted) and rung is not None:  # paused again, for the next one
            sweep.storage.pause(trial_id, rung)
        else:
            _fail_claimed(sweep, trial_id, e)
        raise
    after_trial(sweep, failed=outcome.state is OutcomeState.FAIL)
    return outcome


def _pause(sweep: Sweep, index: int, trial_id: int, number: int, rung: int, *,
           unrun: OpenSegment | None = None) -> Outcome:
    """RUNNING -> WAITING, paused at ``rung`` for a promotion; the index is done for now.
    ``unrun``: the segment its claim opened, closed as a pause that ran nothing."""
    if unrun is not None:
        sweep.storage.set_trial_user_attrs(trial_id, {unrun.key: Usage(
            0.0, unrun.gpus, unrun.cpus, 0, Ending.PAUSED).encode()})
    if not sweep.storage.pause(trial_id, rung):
        return superseded(index, number)
    return Outcome(index, protocol.EXIT_OK, OutcomeState.PAUSED, number,
                   f"index {index}: trial #{number} paused at rung {rung} "
                   f"(step {sweep.spec.scheduler.rung_steps[rung]})", rung=rung)


def _fail_claimed(sweep: Sweep, trial_id: int, e: BaseException) -> None:
    """Whatever escapes after the claim (a broken pipe to a dead orchestrator, a signal
    during set-up) must not leave the trial RUNNING until its heartbeat goes stale."""
    try:
        reason = (f"interrupted by {e}; resumable" if isinstance(e, Interrupted)
                  else f"runner stopped: {type(e).__name__}: {e}")
        sweep.storage.mark_failed(trial_id, reason)
    except Exception:  # noqa: BLE001 - the original error matters more; re-raised by the caller
        logger.warning("could not mark trial %d FAIL", trial_id)


def _open(study: optuna.Study, trial_id: int, taken: Taken | None) -> optuna.Trial:
    """As optuna.Trial(...), attached: from what the claim read, or in one query."""
    if taken is None or taken.claimed is None or taken.stored is None or taken.started is None:
        return open_trial(study, trial_id)
    return open_claimed(study, trial_id, taken.claimed.number, taken.started, taken.stored)


def _run_trial(sweep: Sweep, study: optuna.Study, trial: optuna.Trial, index: int,
               attempt: int, objective: Callable[[TrialContext], Any],
               settings: RunnerSettings, opened: OpenSegment | None = None) -> Outcome:
    spec = sweep.spec
    trial_id, number = trial_id_of(trial), trial.number
    storage = sweep.storage
    timer = start_timeout(sweep, trial_id, index, number, spec.trial.timeout)
    # Under torchrun rank 0 reports from its own process, and the finish re-reads the trial.
    writer = ReportWriter(trial, settings.report_delay_s if spec.trial.ranks == 1 else 0.0)
    history = history_so_far(trial)
    segment = Segment(sweep, trial_id, last_step_of(history),
                      reread=spec.trial.launcher == "torchrun", opened=opened)

    def fail(reason: str, code: int) -> Outcome:
        segment.close_into(writer, Ending.FAILED)
        writer.flush_quietly()  # the reports before the FAIL (which closes the trial)
        if spec.stop.max_failed_trials is not None and \
                _final(code, attempt - _interrupted_before(sweep, index, trial_id),
                       spec.trial.retries):
            storage.set_trial_user_attr(trial_id, FAILED_FOR_GOOD_ATTR, True)
        return fail_trial(storage, index, trial_id, number, reason, code)

    try:
        # Provenance for comparing trials, the segment opened and a planned trial's params,
        # where the claim and the enqueue did not store them already: one statement;
        # suggest_active then finds the params in the trial.
        attrs, todo = unwritten(trial, user_attrs={**provenance(spec), **segment.attrs()},
                                params={} if spec.is_adaptive else planned(trial, spec.parameters))
        if attrs or todo:
            write_trial(trial, user_attrs=attrs, params=todo)
        watch = BudgetWatch(sweep)  # on_exhausted: stop: stops the trial at a report
        ctx = _context(sweep, trial, index, attempt, settings, writer, history, watch.check)
        segment.bind(ctx)
        # Finishing from the Trial's own copy skips re-reading it, but under torchrun (even
        # one rank) the leader rank reported the intermediate values from its own process.
        own = trial if spec.trial.launcher != "torchrun" else None
        why = restore_checkpoint(ctx.checkpoint_mirror, ctx)
        if why is not None:
            return fail(why, protocol.EXIT_RETRY)
        with watch:
            return _evaluate(study, ctx, objective, writer, fail, segment, own=own,
                             then=lambda: _take_ahead(sweep, settings))
    except Interrupted as e:
        ending = _interrupted_ending(sweep, e)
        segment.close_into(writer, ending)
        writer.flush_quietly()
        if RUNG_ATTR not in trial.user_attrs:  # a promotion is put back (run_claimed)
            fail_trial(storage, index, trial_id, number, _interrupted(e, ending),
                       protocol.EXIT_RETRY)
        raise
    except (StorageError, SpecError):
        raise
    except Exception as e:  # noqa: BLE001 - whatever the user's code raised fails this attempt
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        logger.error("index %d: trial #%d raised:\n%s", index, number, traceback.format_exc())
        return fail(f"objective raised {tb}", protocol.EXIT_RETRY)
    finally:
        writer.flush_quietly()  # what is left, and the timer stopped
        if timer is not None:
            timer.cancel()


def _interrupted_ending(sweep: Sweep, e: Interrupted) -> Ending:
    """How an interrupted attempt's segment ends: paused when sweeper stopped it (its own
    SIGINT, a spent budget, or the SIGTERM of deleting a launch that ``sweeper cancel``
    marked cancelled first), preempted when the SIGTERM came from anywhere else."""
    if isinstance(e, BudgetSpent):
        return Ending.PAUSED
    ending = ending_of_signal(e.signum)
    if ending == Ending.PREEMPTED and _launch_cancelled(sweep):
        return Ending.PAUSED
    return ending


def _launch_cancelled(sweep: Sweep) -> bool:
    """Whether ``sweeper cancel`` marked the current launch (``protocol.CANCELLED_ATTR``).
    Unknown (the database unreachable while the pod stops) reads as not cancelled."""
    try:
        attrs = sweep.storage.get_study_user_attrs(sweep.study_id)
    except Exception:  # noqa: BLE001 - a pod being stopped records what it can
        logger.warning("could not read whether the sweep was cancelled; recorded as preempted")
        return False
    mark = attrs.get(CANCELLED_ATTR)
    return mark is not None and mark == attrs.get(LAUNCHES_ATTR, 0)


def _interrupted(e: Interrupted, ending: Ending) -> str:
    """The FAIL reason of an interrupted attempt (each starts "interrupted by": not the
    trial's own failure, for the brake)."""
    if isinstance(e, BudgetSpent):
        return f"interrupted by {e}; resumable"
    why = "preempted" if ending == Ending.PREEMPTED else "stopped"
    return f"interrupted by {e} ({why}); resumable"


def _context(sweep: Sweep, trial: optuna.Trial, index: int, attempt: int,
             settings: RunnerSettings, writer: ReportWriter,
             history: dict[str, list[list[float]]],
             after_report: Callable[[], None]) -> TrialContext:
    """The trial's context: its params (suggested, or planned and stored), its index's
    checkpoint directory and mirror, its history so far."""
    spec, storage, number = sweep.spec, sweep.storage, trial.number
    params = suggest_active(trial, spec.parameters)
    ctx = TrialContext(
        params={**params, **spec.trial.fixed}, index=index, trial_number=number,
        attempt=attempt, trial=trial, objective_metrics=tuple(o.metric for o in spec.objectives),
        _history=history, _after_report=after_report,
        planned_method=None if spec.is_adaptive else spec.method,
        checkpoint_dir=settings.checkpoint_root / sweep.state_key / f"index-{index}",
        artifact_store_factory=lambda: cached_artifact_store(spec.artifacts, storage.url),
        checkpoint_mirror=CheckpointMirror.for_index(spec, storage.url, index, sweep.state_key),
        data_factory=(lambda: data_dir(spec.data)) if spec.data.configured else None,
        writer=writer)
    logger.info("index %d: trial #%d attempt %d %s", index, number, attempt, params)
    return ctx


def _evaluate(study: optuna.Study, ctx: TrialContext, objective: Callable[[TrialContext], Any],
              writer: ReportWriter, fail: Callable[[str, int], Outcome], segment: Segment, *,
              own: optuna.Trial | None, then: Callable[[], NextTake | None]) -> Outcome:
    """Run the objective and finish the trial from what it returned or raised (what the user's
    code raised otherwise is the caller's). ``then``: the next index's take to ride with a
    COMPLETE or PRUNED finish, asked when the finish comes."""
    index, number, metrics = ctx.index, ctx.trial_number, ctx.objective_metrics
    trial_id = trial_id_of(ctx.trial)
    try:
        result = objective(ctx)
    except optuna.TrialPruned:
        return _pruned(study, writer, segment, trial_id, index, number, own, then)
    except (TrialTimeout, DataError, SuggestNotAllowed, ProgramFailed, InvalidResult) as e:
        return fail(str(e), _exit_code_of(e))
    if result is None and ctx.should_prune():
        return _pruned(study, writer, segment, trial_id, index, number, own, then)
    try:
        values, extra = objective_values(result, metrics)
    except InvalidResult as e:
        return fail(str(e), protocol.EXIT_NO_RETRY)
    writer.add(user_attrs={k: v for k, v in extra.items() if _jsonable(v)})
    segment.close_into(writer, Ending.COMPLETE)
    with writer.finishing(then):
        told = tell_state(study, trial_id, TrialState.COMPLETE, values, number=number, trial=own)
    if not told:
        return superseded(index, number)
    return Outcome(index, protocol.EXIT_OK, OutcomeState.COMPLETE, number,
                   f"index {index}: trial #{number} complete: "
                   + ", ".join(f"{m}={v:.6g}" for m, v in zip(metrics, values, strict=True)))


def _pruned(study: optuna.Study, writer: ReportWriter, segment: Segment, trial_id: int,
            index: int, number: int, own: optuna.Trial | None,
            then: Callable[[], NextTake | None]) -> Outcome:
    """PRUNED, or under a scheduler that said "pause" the outcome that pauses it (after the
    heartbeat stopped: :func:`run_claimed`); the reports are written first either way."""
    rung = paused_rung(study.pruner, number)
    segment.close_into(writer, Ending.PAUSED if rung is not None else Ending.PRUNED)
    if rung is not None:
        writer.flush()
        return Outcome(index, protocol.EXIT_OK, OutcomeState.PAUSED, number, "", rung=rung)
    with writer.finishing(then):
        return finish_pruned(study, trial_id, index, number, trial=own)


def _interrupted_before(sweep: Sweep, index: int, trial_id: int) -> int:
    """How many earlier attempts of ``index`` were interrupted, not failed: preempted, or
    stopped by sweeper (``sweeper cancel``, its own SIGINT); they used no retry (read only
    when ``stop.max_failed_trials`` asks whether a failure was the index's last)."""
    earlier = [a for a in sweep.storage.attempts(sweep.study_id, index) if a.trial_id != trial_id]
    interrupted = 0
    for a in earlier:
        endings = {u.ending for u in trial_usages(sweep.storage.get_trial(a.trial_id).user_attrs)}
        if Ending.FAILED not in endings and endings & {Ending.PREEMPTED, Ending.PAUSED}:
            interrupted += 1
    return interrupted


def _final(code: int, attempt: int, retries: int) -> bool:
    """Whether a failure with exit ``code`` on ``attempt`` leaves its index without another
    attempt (what ``stop.max_failed_trials`` counts)."""
    return code == protocol.EXIT_NO_RETRY or (code == protocol.EXIT_RETRY and attempt >= retries)


def _exit_code_of(e: Exception) -> int:
    """How a failure the runner recognises ends the index (one line, no traceback: what the
    trial printed says why): a timeout, or a program that printed no objective metric, is not
    retried; a program that failed is; a missing bucket or a ``ctx.suggest_*`` in a planned
    sweep would fail every index the same way, so the sweep stops and says why; a data source
    that may come back is retried."""
    if isinstance(e, TrialTimeout | InvalidResult):
        return protocol.EXIT_NO_RETRY
    if isinstance(e, ProgramFailed) or (isinstance(e, DataError) and e.retryable):
        return protocol.EXIT_RETRY
    return protocol.EXIT_CONFIG


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return False
    return True


__all__ = ["Claimed", "Interrupted", "Outcome", "RunnerSettings", "acquire",
           "release_taken_ahead", "run_claimed", "run_index"]
