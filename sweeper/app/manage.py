"""Acting on a sweep where it ran: its logs (:func:`logs`, :func:`follow_logs`), stopping it
(:func:`cancel`), and deleting it everywhere (:func:`plan_deletion`, then :func:`delete`):
the study, its artifacts, what its backends keep, its files off this machine. Each returns a
view model that the CLI renders; nothing here prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sweeper import protocol
from sweeper.app.backends import BackendOptions, holders, where_it_ran
from sweeper.app.options import ClusterOptions, StorageOptions
from sweeper.app.sweeps import load_target, target
from sweeper.backends.base import Backend, Holding, SweepRef, Write
from sweeper.errors import OptionError, SweeperError
from sweeper.purge import RemoteState
from sweeper.report import ranges_of
from sweeper.study import Sweep
from sweeper.study.record import unfinished_indexes
from sweeper.study.urls import redact


def sweep_ref(name_or_spec: str, storage: StorageOptions) -> tuple[SweepRef, tuple[str, ...]]:
    """The sweep's name and its record if the storage is at hand (logs and cancel work
    without it too), and why it is not (a note). NAME may be the spec file."""
    found = target(name_or_spec, storage)
    if found.url == protocol.DEFAULT_STORAGE and not Path("sweeps.db").exists():
        return SweepRef(found.name), ()
    try:
        return SweepRef(found.name, load_target(found)), ()
    except SweeperError as e:
        return SweepRef(found.name), (str(e),)


# --------------------------------------------------------------------------- logs


@dataclass(frozen=True)
class LogRequest:
    """Which log: attempt ``attempt`` of ``index`` (None: the latest), its last ``tail``
    lines (None: all); ``follow``: the latest attempt as it is written, until it ends."""

    index: int
    attempt: int | None = None
    tail: int | None = None
    follow: bool = False


@dataclass(frozen=True)
class LogView:
    """An index's log: ``notes`` (stderr: why the record is missing, which file or pod)
    and its ``text``."""

    notes: tuple[str, ...]
    text: str


def _log_backend(name_or_spec: str, request: LogRequest, storage: StorageOptions,
                 where: BackendOptions) -> tuple[Backend, SweepRef, tuple[str, ...]]:
    if request.follow and request.attempt is not None:
        raise OptionError("--follow follows the latest attempt; leave out --attempt")
    ref, notes = sweep_ref(name_or_spec, storage)
    if ref.trials is not None and request.index >= ref.trials:
        raise OptionError(f"--index: sweep {ref.name} has indexes 0..{ref.trials - 1}")
    return where_it_ran(ref, where, request.index), ref, tuple(f"note: {n}" for n in notes)


def logs(name_or_spec: str, request: LogRequest, storage: StorageOptions,
         where: BackendOptions = BackendOptions()) -> LogView:
    """The log of ``request.index``: its local log file, or the log of the pod that ran it
    (across resume Jobs). Raises SweeperError (OptionError for a bad request)."""
    backend, ref, notes = _log_backend(name_or_spec, request, storage, where)
    log = backend.logs(ref, request.index, attempt=request.attempt, tail=request.tail)
    return LogView(notes + log.notes, log.text)


def follow_logs(name_or_spec: str, request: LogRequest, storage: StorageOptions,
                where: BackendOptions, write: Write, say: Write) -> None:
    """The latest attempt's log of ``request.index`` to ``write`` as it is written, until
    it ends (KeyboardInterrupt stops it); lines about it to ``say``."""
    backend, ref, notes = _log_backend(name_or_spec, request, storage, where)
    for note in notes:
        say(note)
    backend.follow(ref, request.index, tail=request.tail, write=write, say=say)


# --------------------------------------------------------------------------- cancel


@dataclass(frozen=True)
class CancelView:
    """What ``cancel`` stopped (``lines``), the trials it paused again or failed, and the
    indexes a resume runs (None: the storage was not at hand, so nothing is known)."""

    sweep: str
    notes: tuple[str, ...]  # stderr lines: why the storage is not at hand
    lines: tuple[str, ...]
    paused_trials: tuple[int, ...] = ()
    failed_trials: tuple[int, ...] = ()
    unfinished: tuple[int, ...] | None = None


def cancel(name_or_spec: str, storage: StorageOptions, cluster: ClusterOptions | None = None,
           *, wait_s: float = 60.0) -> CancelView:
    """Stop what runs the sweep where it ran (on Kubernetes: delete its Jobs and pods); the
    study stays, and with it at hand the running trials end so that a resume runs them."""
    ref, notes = sweep_ref(name_or_spec, storage)
    backend = where_it_ran(ref, BackendOptions(cluster=cluster or ClusterOptions()))
    done = backend.cancel(ref, wait_s=wait_s)
    sweep = ref.sweep
    missing = None if sweep is None else tuple(unfinished_indexes(
        sweep.storage.index_table(sweep.study_id, sweep.spec.index_count)))
    return CancelView(ref.name, tuple(f"note: {n}" for n in notes), done.lines,
                      done.paused_trials, done.failed_trials, missing)


# --------------------------------------------------------------------------- delete


@dataclass(frozen=True)
class DeleteOptions:
    """``purge_artifacts``: also remove the sweep's files off this machine (S3, a checkpoint
    volume mounted at ``volume_dir``). ``on_cluster``: True also deletes its Kubernetes Jobs (an
    unreachable cluster is an error), None when it was launched there and a cluster is
    configured (a warning then), False never. ``wait_s``: for the Jobs' pods to be gone."""

    purge_artifacts: bool = False
    volume_dir: Path | None = None
    on_cluster: bool | None = None
    cluster: ClusterOptions = field(default_factory=ClusterOptions)
    wait_s: float = 60.0


@dataclass(frozen=True)
class DeletionPlan:
    """What :func:`delete` removes and keeps, before anything is removed: ``question`` says
    it in one line."""

    sweep: Sweep
    url: str
    options: DeleteOptions
    trials: int
    artifact_ids: tuple[str, ...]
    #: The artifacts are files of a store on this machine (removed with the study).
    local_artifacts: bool
    remote: RemoteState
    held: tuple[tuple[Backend, Holding], ...]
    #: What stays (without --purge-artifacts), in words.
    kept: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    what: tuple[str, ...] = field(default=())

    @property
    def question(self) -> str:
        kept = f" (kept: {'; '.join(self.kept)})" if self.kept else ""
        return f"delete sweep {self.sweep.name}: " + "; ".join(self.what) + kept


@dataclass(frozen=True)
class DeletionReport:
    """What :func:`delete` removed (``lines``, in the order it did), what it kept, and what it
    could not do (``warnings``)."""

    sweep: str
    lines: tuple[str, ...]
    kept: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def plan_deletion(name_or_spec: str, storage: StorageOptions,
                  options: DeleteOptions = DeleteOptions()) -> DeletionPlan:
    """What deleting the sweep NAME (or the sweep of a spec file) removes: its trials, its
    artifacts in a filesystem store, what its backends keep, and with ``purge_artifacts``
    its files off this machine. Raises SweeperError; reads only."""
    from sweeper.artifacts import describe as describe_store
    from sweeper.purge import kept, purge_summary

    if options.volume_dir is not None and not options.purge_artifacts:
        raise OptionError("--volume-dir goes with --purge-artifacts")
    found = target(name_or_spec, storage)
    sweep = load_target(found)
    trials = sum(sweep.storage.state_counts(sweep.study_id).values())
    artifact_ids = tuple(sweep.storage.artifact_ids(sweep.study_id))
    remote = _remote_state(sweep, artifact_ids, options.volume_dir)
    held = tuple((b, b.holding(sweep, required=options.on_cluster is True))
                 for b in holders(sweep, options.on_cluster, options.cluster))
    local_artifacts = _local_artifacts(sweep, found.url, artifact_ids)
    what = [f"{trials} trial(s) in {redact(found.url)}"]
    if local_artifacts:
        what.append(f"{len(artifact_ids)} artifact(s) in "
                    f"{describe_store(sweep.spec.artifacts, found.url)}")
    what += [s for s in [purge_summary(remote) if options.purge_artifacts else None] if s]
    return DeletionPlan(sweep, found.url, options, trials, artifact_ids, local_artifacts,
                        remote, held, () if options.purge_artifacts else tuple(kept(remote)),
                        tuple(w for _, h in held for w in h.warnings),
                        (*what, *(w for _, h in held for w in h.what)))


def _local_artifacts(sweep: Sweep, url: str, artifact_ids: tuple[str, ...]) -> bool:
    """Whether the sweep's artifacts are files of a store on this machine. A filesystem
    store's default place follows the database's URL (through a proxy: the one it serves, as
    its runners derived it); a store of this machine only when it is direct."""
    from sweeper.study.remote.client import is_proxy_url

    return bool(artifact_ids) and sweep.spec.artifacts.store == "filesystem" \
        and not is_proxy_url(url)


def _remote_state(sweep: Sweep, artifact_ids: tuple[str, ...],
                  volume_dir: Path | None) -> RemoteState:
    """The sweep's files off this machine: S3 artifacts and checkpoints, and the checkpoint
    volume's directory when the sweep was launched on Kubernetes (only pods write there)."""
    from sweeper.backends.pod import checkpoint_dir
    from sweeper.purge import remote_state

    k = sweep.spec.kubernetes
    vol = k.volume(k.checkpoint_volume) if k.checkpoint_volume else None
    launched = sweep.storage.get_study_user_attrs(sweep.study_id).get(protocol.LAUNCHES_ATTR)
    if volume_dir is not None and vol is None:
        raise OptionError(f"--volume-dir: sweep {sweep.name} has no "
                          "kubernetes.checkpoint_volume")
    volume = (vol.name, vol.mount_path, checkpoint_dir(k)) \
        if vol is not None and (launched or volume_dir is not None) else None
    return remote_state(sweep.state_key, sweep.uid is not None, sweep.spec.artifacts,
                        artifact_ids, volume)


def delete(plan: DeletionPlan) -> DeletionReport:
    """Delete what ``plan`` found: what runs the sweep first (its runners write to the
    study), its files off this machine (if S3 refuses, the study and so the artifact ids
    stay), the study, its local artifact files, then the files its backends keep here."""
    from sweeper.artifacts import remove_artifacts
    from sweeper.purge import purge

    sweep, opts = plan.sweep, plan.options
    lines: list[str] = []
    warnings: list[str] = []
    runs = [(b, h) for b, h in plan.held if h.workloads and not h.warnings]
    files = [(b, h) for b, h in plan.held if not h.workloads and not h.warnings]
    for backend, holding in runs:
        done = backend.delete(sweep, holding, wait_s=opts.wait_s,
                              required=opts.on_cluster is True)
        lines += done.lines
        warnings += done.warnings
    removed, kept = purge(plan.remote, opts.volume_dir) if opts.purge_artifacts \
        else ([], list(plan.kept))
    sweep.storage.delete_study(sweep.study_id)
    lines.append(f"deleted sweep {sweep.name} ({plan.trials} trial(s)) from "
                 f"{redact(plan.url)}")
    if plan.local_artifacts:
        lines.append(remove_artifacts(sweep.spec.artifacts, plan.url, list(plan.artifact_ids)))
    lines += removed
    for backend, holding in files:
        lines += backend.delete(sweep, holding, wait_s=opts.wait_s, required=False).lines
    return DeletionReport(sweep.name, tuple(lines), tuple(kept), tuple(warnings))


def resume_hint(view: CancelView) -> str | None:
    """The line that says what a resume runs after a cancel; None when nothing is left."""
    if not view.unfinished:
        return None
    return (f"the study stays; `sweeper resume {view.sweep}` runs the {len(view.unfinished)} "
            f"unfinished index(es): {ranges_of(view.unfinished)}")
