"""Launching a sweep: :func:`launch` (a spec file: create or resume its sweep, run what is
unfinished), :func:`resume` (a stored sweep), then :func:`conclude` (what the launch says
last, and its failures as :class:`~sweeper.errors.SweepFailedError`); the summary of the whole
sweep after it as text (:func:`summary_text`) or a record (:func:`summary_record`).

Lines about what happens go to ``say`` (the CLI's stderr); progress to stderr."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from sweeper import protocol
from sweeper.accounting import BUDGET_RULE
from sweeper.app.backends import LOCAL, REMOTE, for_launch, recorded_kind
from sweeper.app.options import LaunchOptions
from sweeper.app.sweeps import load_spec_file, load_target, open_at, target
from sweeper.backends.base import Backend, RunResult
from sweeper.backends.manifests import with_kubernetes
from sweeper.code.launch import CodeLaunch
from sweeper.errors import EXIT_INTERRUPTED, OptionError, SweeperError, SweepFailedError
from sweeper.report import ranges_of
from sweeper.spec import SweepSpec
from sweeper.study import StudyStorage, Sweep
from sweeper.study.urls import redact, resolve_storage_url
from sweeper.study.values import IndexStatus

Say = Callable[[str], None]
#: Failed indexes whose reason and log lines a launch's end shows (the rest: sweeper status).
FAILURES_SHOWN = 10
#: Lines of each failed index's log that a launch's end shows.
FAILURE_LOG_LINES = 5


@dataclass(frozen=True)
class Launched:
    """A launch that has run (or been refused by a stop rule: ``started`` False): the sweep,
    its storage URL, the backend, the indexes it ran, what the backend said, and the
    per-index table after it."""

    sweep: Sweep
    url: str
    backend: Backend
    todo: tuple[int, ...]
    result: RunResult | None
    table: tuple[IndexStatus, ...]
    started: bool = True


def launch(spec_file: str, options: LaunchOptions, say: Say) -> Launched:
    """Create (or resume) the sweep of ``spec_file`` and run every index that has no
    finished trial, on ``options.backend`` (default: local). Raises SweeperError."""
    kind = options.backend or LOCAL
    if options.proxy and kind != LOCAL:
        raise OptionError("--proxy is for the local backend; on Kubernetes point the pods at "
                          "a `sweeper proxy` with --storage-proxy")
    spec = load_spec_file(spec_file, check_entrypoint=kind not in REMOTE,
                          overrides=options.overrides)
    spec = _with_options(spec, options)
    _durable(spec, kind)
    url = resolve_storage_url(options.storage.url, spec)
    metrics = _serve_metrics(options.metrics_port, url, spec.name, say)
    return _launch(spec, url, for_launch(kind, options, spec, say, metrics), options, say)


def resume(name_or_spec: str, options: LaunchOptions, say: Say) -> Launched:
    """Run only the indexes of a stored sweep that have no finished trial, its spec from the
    study, on ``options.backend`` (default: where it was last launched)."""
    found = target(name_or_spec, options.storage)
    sweep = load_target(found)
    if found.spec is not None and found.spec.spec_hash != sweep.spec.spec_hash:
        say(f"note: {name_or_spec} differs from the stored sweep {sweep.name}; resume runs the "
            f"stored one (`sweeper run {name_or_spec}` applies the file)")
    spec = _with_options(sweep.spec, options)
    kind = options.backend or recorded_kind(sweep) or LOCAL
    _durable(spec, kind)
    return _launch(spec, found.url, for_launch(kind, options, spec, say), options, say)


def _with_options(spec: SweepSpec, options: LaunchOptions) -> SweepSpec:
    job = options.job
    spec = spec.with_overrides(parallelism=options.parallelism)
    return with_kubernetes(spec, image=job.image, namespace=job.namespace,
                           storage_secret=job.storage_secret, storage_proxy=job.storage_proxy)


def _durable(spec: SweepSpec, kind: str) -> None:
    """A scheduler's paused trials resume in another pod: on a remote backend their
    checkpoints must outlive the pod (SpecError before anything is written)."""
    from sweeper.spec import durable_checkpoints_error

    if kind in REMOTE and (e := durable_checkpoints_error(spec)) is not None:
        raise e


def _serve_metrics(port: int | None, url: str, name: str, say: Say) -> Any:
    """The metrics endpoint of ``--metrics-port`` (None without one)."""
    if not port:
        return None
    from sweeper.app.metrics import serve_run_metrics

    try:
        registry = serve_run_metrics(port, url, name)
    except OSError as e:
        raise SweeperError(f"cannot serve metrics on port {port}: {e.strerror}") from None
    say(f"metrics on http://0.0.0.0:{port}/metrics")
    return registry


def _terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _launch(spec: SweepSpec, url: str, backend: Backend, options: LaunchOptions,
            say: Say) -> Launched:
    """Create or resume the sweep of ``spec`` (its parallelism included: the backend reads it
    from ``sweep.spec``) and run what is unfinished."""
    from sweeper.report import Progress
    from sweeper.study.record import indexes_to_run

    code = _code_before(spec, url, backend.name, say)  # before any storage is created
    storage = open_at(url, options.storage.wait_s)
    sweep, created = _create_with_code(spec, storage, url, code, backend.name,
                                       options.new_code, say)
    if not may_launch(sweep, options.ignore_stop, say):
        return Launched(sweep, url, backend, (), None, (), started=False)
    todo = indexes_to_run(sweep, created=created)
    # SIGTERM (a CI job cancelled, `kill`) stops the sweep the same orderly way as Ctrl-C.
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    _launch_header(spec, sweep, backend.name, url, created=created, todo=len(todo), say=say)
    result = None
    if todo:
        progress = Progress(sweep)
        try:
            result = backend.run(sweep, todo, storage_url=url, tick=progress.tick)
        finally:
            progress.close()
    table = tuple(storage.index_table(sweep.study_id, spec.index_count))
    return Launched(sweep, url, backend, tuple(todo), result, table)


def _launch_header(spec: SweepSpec, sweep: Sweep, backend: str, url: str, *, created: bool,
                   todo: int, say: Say) -> None:
    """The lines a launch starts with: what runs where, what grew, what is resumed."""
    size = "open-ended (until the budget is spent)" if spec.open_ended else \
        f"{spec.trials} indexes"
    say(f"sweep {spec.name}: {spec.method}, {size}, parallelism {spec.parallelism}, "
        f"backend {backend}, storage {redact(url)}")
    if sweep.grown_from is not None:
        say(f"grew the sweep from {sweep.grown_from} to {spec.trials} indexes (new: "
            f"{ranges_of(range(sweep.grown_from, spec.trials))})")
    if not created and not spec.open_ended:
        say(f"resuming: {spec.trials - todo} of {spec.trials} indexes already finished")


def _code_before(spec: SweepSpec, url: str, kind: str, say: Say,
                 storage: StudyStorage | None = None) -> CodeLaunch | None:
    """The launch's code snapshot (sweeper.code.launch), packed before anything is written;
    for a remote backend its size is checked against its store's limit and what it holds
    said."""
    from sweeper.code.launch import check_fits, prepare, summary

    code = prepare(spec, storage)
    if code is None or kind not in REMOTE:
        return code
    check_fits(spec, code, url)
    say(summary(code))
    for warning in code.snapshot.warnings:
        say(f"warning: the code snapshot: {warning}")
    return code


def _create_with_code(spec: SweepSpec, storage: StudyStorage, url: str,
                      code: CodeLaunch | None, kind: str, new_code: bool,
                      say: Say) -> tuple[Sweep, bool]:
    """create_or_resume, with the launch's snapshot compared to what the sweep recorded
    first (remote: a change is refused without ``--code new``: CodeError, nothing launched;
    locally it is noted), then stored for the pods and recorded."""
    from sweeper.code.launch import check_change, publish, recorded_code
    from sweeper.study import create_or_resume

    if code is None:  # a stored spec (resume NAME): its spec file's name is in the record
        code = _code_before(spec, url, kind, say, storage)
    line = None
    if code is not None:
        recorded, ran = recorded_code(storage, spec.name)
        code = dataclasses.replace(code, recorded=recorded, ran=ran)
        line = check_change(spec.name, code, new_code=new_code, refuse=kind in REMOTE)
    sweep, created = create_or_resume(storage, spec)  # a changed spec is said first
    if line:
        say(f"note: {line}")
    if code is not None:
        publish(sweep, code, url, upload=kind in REMOTE)
    return sweep, created


# --------------------------------------------------------------------------- stop rules


def may_launch(sweep: Sweep, ignore: bool, say: Say) -> bool:
    """False (after saying so) when a stop rule has stopped the sweep and ``ignore`` is not
    set; with it, records that the rules are off for this sweep and says so."""
    state = sweep.storage.stop_state(sweep.study_id)
    if state is None or not state.stopped:
        return True
    if not ignore:
        how = "a larger budget in the spec, run again, continues it" \
            if state.rule == BUDGET_RULE else \
            f"`sweeper resume {sweep.name} --ignore-stop` continues it"
        say(f"sweep {sweep.name} is stopped: {state.describe()}; nothing started ({how})")
        return False
    sweep.storage.ignore_stop(sweep.study_id)
    say(f"ignoring the stop ({state.describe()}): the stop rules are off for this sweep from "
        "now on")
    return True


def report_stop(sweep: Sweep, missing: list[int], failed_for_good: bool, say: Say) -> bool:
    """After a launch: if a stop rule fired, say which and when as the last line and return
    True (SweepFailedError when indexes failed for good or the rule was max_failed_trials)."""
    from sweeper.study.stop import BRAKE_RULE

    state = sweep.storage.stop_state(sweep.study_id)
    if state is None or not state.stopped:
        return False
    how = "a larger budget in the spec, run again, runs them" if state.rule == BUDGET_RULE \
        else f"`sweeper resume {sweep.name} --ignore-stop` runs them"
    of = "" if sweep.spec.open_ended else f" of {sweep.spec.trials}"  # open-ended: no total
    line = f"stopped: {state.describe()}; " + (
        f"{len(missing)}{of} indexes not finished ({how})" if missing
        else "every index finished")
    if failed_for_good or state.rule in ("max_failed_trials", BRAKE_RULE):
        raise SweepFailedError(line)
    say(line)
    return True


# --------------------------------------------------------------------------- the end


def conclude(done: Launched, say: Say) -> int:
    """What the launch says last: this launch's counts and the backend's messages, the stop
    rule that fired, each index that failed for good (why, its last log lines). Returns the
    exit code (130: interrupted); raises SweepFailedError when indexes failed for good."""
    from sweeper.study.record import unfinished_indexes

    result = done.result
    if result is not None:
        code = _report_launch(result, None if done.sweep.spec.open_ended else len(done.todo),
                              say)
        if code is not None:
            return code
    missing = unfinished_indexes(list(done.table))
    if report_stop(done.sweep, missing, bool(result is not None and result.failed), say):
        return 0
    if missing:
        reported = set(result.finished) if result is not None else set()
        _report_failures(done, [s for s in done.table
                                if s.index in missing and s.index not in reported], say)
        raise SweepFailedError(_missing_message(done, missing))
    return 0


def _report_launch(result: RunResult, launched: int | None, say: Say) -> int | None:
    """Say what the backend says of this launch (counts, its messages). An exit code when
    there is nothing more to say: 130 when interrupted, 0 when detached (the Job runs on)."""
    if not result.detached:
        failed = f", {len(result.failed)} failed for good ({ranges_of(result.failed)})" \
            if result.failed else ""
        of = f" of {launched}" if launched is not None else ""  # None: open-ended
        say(f"this launch: {len(result.finished)}{of} indexes finished{failed}")
    for message in result.messages:
        say(message)
    if result.detached:
        return EXIT_INTERRUPTED if result.interrupted else 0
    if result.interrupted:
        say("interrupted: running trials were stopped and marked FAIL; run the same command "
            "again to finish the missing indexes")
        return EXIT_INTERRUPTED
    return None


def _missing_message(done: Launched, missing: list[int]) -> str:
    """Why ``missing`` indexes have no finished trial. The study is the truth; an index the
    backend saw finish but the study lacks means its runner wrote to another database."""
    reported = set(done.result.finished) if done.result is not None else set()
    lost = [i for i in missing if i in reported]
    failed = [i for i in missing if i not in reported]
    parts = [f"{len(failed)} index(es) failed for good: {ranges_of(failed)}"] if failed else []
    if lost:
        parts.append(f"{len(lost)} index(es) finished on the {done.backend.name} backend but "
                     f"have no finished trial in this storage (do the runners use the same "
                     f"database?): {ranges_of(lost)}")
    return "; ".join(parts) + f"; see `sweeper status {done.sweep.name}`"


def _report_failures(done: Launched, failed: list[IndexStatus], say: Say) -> None:
    """For each index that failed for good: why, the last lines of its log (the local file
    or the pod's), and the command that shows the rest."""
    from sweeper.report import failure_lines

    if not failed:
        return
    say("")
    sweep = done.sweep
    for s in failed[:FAILURES_SHOWN]:
        try:
            tail = done.backend.log_tail(sweep, s.index, FAILURE_LOG_LINES)
            where, text, note = tail.where, tail.text, None
        except SweeperError as e:
            where, text, note = None, None, str(e)
        command = f"sweeper logs {sweep.name} --index {s.index}{storage_flag(done.url)}"
        for line in failure_lines(s.index, s.attempts, s.fail_reason, where, text, note,
                                  command):
            say(line)
    rest = [s.index for s in failed[FAILURES_SHOWN:]]
    if rest:
        say(f"... and {len(rest)} more failed index(es): {ranges_of(rest)}; "
            f"`sweeper status {sweep.name}` shows every reason")


def storage_flag(url: str) -> str:
    """`` --storage URL`` for a command to copy, the password a placeholder; empty for the
    default storage."""
    shown = redact(url).replace(":***@", ":<password>@")
    return "" if url == protocol.DEFAULT_STORAGE else f" --storage '{shown}'"


def dashboard_hint(done: Launched) -> str:
    return f"\ncompare trials: sweeper dashboard {done.sweep.name}{storage_flag(done.url)}"


# --------------------------------------------------------------------------- the summary


def summary_record(done: Launched) -> dict[str, Any]:
    """``run --format json``: the state of the whole sweep after this launch."""
    from sweeper.export import trial_export_record
    from sweeper.report import best_trials

    sweep, table, result = done.sweep, done.table, done.result
    metrics = [o.metric for o in sweep.spec.objectives]
    best = [trial_export_record(t, metrics) for t in best_trials(sweep.study())]
    finished = [s.index for s in table if s.state in ("COMPLETE", "PRUNED")]
    record: dict[str, Any] = {
        "sweep": sweep.name, "method": sweep.spec.method, "storage": redact(done.url),
        "backend": done.backend.name, "indexes": sweep.spec.index_count,
        "finished_indexes": len(finished),
        "trials_by_state": sweep.storage.state_counts(sweep.study_id),
        "unfinished_indexes": [s.index for s in table if s.index not in set(finished)],
        "failed_indexes": [{"index": s.index, "attempts": s.attempts,
                            "trial_number": s.trial_number, "fail_reason": s.fail_reason}
                           for s in table if s.state == "FAIL"],
        "interrupted": bool(result and result.interrupted),
        "detached": bool(result and result.detached),
        "directions": [o.direction for o in sweep.spec.objectives],
    }
    if sweep.spec.is_multi_objective:
        record["pareto_front"] = best
    else:
        record["best"] = best[0] if best else None
    return record


def summary_text(done: Launched) -> str:
    """The best trials (Pareto-optimal ones for several objectives) as a table."""
    from sweeper.report import format_table, top_trials

    sweep = done.sweep
    top = top_trials(sweep.study(), 5)
    metrics = [o.metric for o in sweep.spec.objectives]
    names = [p.name for p in sweep.spec.parameters]
    if not top:
        return f"\n{sweep.name}: no complete trial yet"
    title = "Pareto-optimal trials" if len(metrics) > 1 else "best trials"
    return f"\n{title} of {sweep.name}:\n" + format_table(["trial", "index", *metrics, *names], [
        [t.number, t.user_attrs.get(protocol.INDEX_ATTR), *(t.values or []),
         *(t.params.get(n) for n in names)] for t in top])

