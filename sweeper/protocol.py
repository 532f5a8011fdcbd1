"""What the orchestrator and the trial runner agree on, in one place. Pure: no I/O.

Both sides import this module and nothing else of each other (``sweeper`` never imports
``trial_runner``). Changing a name here changes it on both sides at once; changing a value
changes the contract with trial images already built, so treat every value as public.

- attribute keys: what sweeper stores on a study or trial (user/system attrs);
- environment: the variables a runner reads, their defaults and which are reserved;
- exit codes: what a runner's exit status tells a retry policy;
- log headers: the line a runner writes before each attempt (and each promoted segment of
  one), so ``sweeper logs`` can split a log (a local index file, a pod's log) into attempts;
- the index map: which sweep indexes job index ``k`` of an Indexed Job runs;
- worker messages: the line protocol between the local backend and its workers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# --------------------------------------------------------------------------- attribute keys

#: Trial user attr: the sweep index a trial belongs to (indexed for the runner's lookup).
INDEX_ATTR = "sweeper:index"
#: Trial user attr: 0 for the first attempt of an index, 1 for its first retry, ...
ATTEMPT_ATTR = "sweeper:attempt"
#: Trial user attr: the trial number of the attempt this one retries.
RETRY_OF_ATTR = "sweeper:retry_of"
#: Trial user attr: why a trial ended FAIL (one line, the program's error where known).
FAIL_REASON_ATTR = "sweeper:fail_reason"
#: Trial user attr: per-report metrics other than the objective, ``[{step, metric...}]``.
HISTORY_ATTR = "sweeper:history"
#: Trial user attr: the device the trial trained on (``cuda:0``, ``cpu``).
DEVICE_ATTR = "sweeper:device"
#: Trial user attr: the step a retried attempt resumed from (its checkpoint).
RESUMED_ATTR = "sweeper:resumed_from_step"
#: Trial user attr: the version of the trial code (git describe, image digest, or env).
CODE_VERSION_ATTR = "sweeper:code_version"
#: Trial user attr: the code snapshot the trial ran with (``sha256:<hex>``); study user attr:
#: the snapshot the sweep's next trials run with (``sweeper.code``).
CODE_ATTR = "sweeper:code"
#: Study system attr prefix: one part of a code snapshot kept in the study itself (the study
#: storage path of ``sweeper.code.stores``): ``sweeper:code:<hex>:<part>``.
CODE_PART_ATTR_PREFIX = "sweeper:code:"
#: Study user attr: the spec file, relative to the code directory, that the snapshot leaves
#: out (the pods read the spec from the record: growing a sweep is not a code change).
CODE_SPEC_FILE_ATTR = "sweeper:code_spec_file"
#: Trial user attr: the spec hash the trial ran under (the study attr ``HASH_ATTR``).
SPEC_HASH_ATTR = "sweeper:spec_hash"
#: Study user attr: the normalised spec (the sweep record).
SPEC_ATTR = "sweeper:spec"
#: Study user attr: the hash of what defines the trials (``SweepSpec.spec_hash``).
HASH_ATTR = "sweeper:spec_hash"
#: Study user attr: True once the plan (grid / random sets) has been enqueued.
ENQUEUED_ATTR = "sweeper:enqueued"
#: Study user attr: the absolute directory of the spec file the sweep was last launched from
#: (relative paths in the spec resolve against it; ``resume NAME`` has no file to ask).
SPEC_DIR_ATTR = "sweeper:spec_dir"
#: Study user attr: the sweep's stop state, written once when a ``stop:`` rule fires:
#: ``{"state": "stopped", "rule", "reason", "at", "trial"}``; ``"state": "ignored"`` after
#: ``sweeper resume --ignore-stop`` (the rules are then off for this sweep). Runners read it
#: before claiming an index and start nothing once it says stopped.
STOP_ATTR = "sweeper:stop"
#: Study user attr: when the sweep was first launched (ISO 8601, UTC), for ``max_duration``.
STARTED_ATTR = "sweeper:started_at"
#: Trial user attr: True on a FAIL attempt after which its index gets no other (retries used
#: up, or a failure no retry fixes); ``stop.max_failed_trials`` counts these indexes.
FAILED_FOR_GOOD_ATTR = "sweeper:failed_for_good"
#: Outcome state of a runner that found the sweep stopped: it created no trial.
STOPPED = "STOPPED"
#: Trial user attr (``scheduler:``): the rung k (0 = the first) at which the trial paused
#: last; kept when it is promoted and when the sweep's end prunes it.
RUNG_ATTR = "sweeper:rung"
#: Trial user attr: True while the trial is paused at its rung (WAITING, its checkpoint kept)
#: for whoever claims its promotion; False once claimed.
PAUSED_ATTR = "sweeper:paused"
#: Outcome state of a runner whose trial paused at a rung (the index is done for now).
PAUSED = "PAUSED"
#: Trial user attr (``scheduler: {type: pbt}``): the member's lineage, a list of segments
#: ``{"from_step", "params", "parent", "parent_step"}``: the params it trains with from
#: ``from_step`` on, and the trial number and checkpoint step it copied (null for the first).
PBT_ATTR = "sweeper:pbt"
#: Trial user attr: the segment of the attempt that runs now (its claim), written when it
#: starts: ``{"claim", "gpus", "cpus", "from_step", "started"}`` (``started`` on the runner's
#: clock, ISO 8601 UTC). Whoever finds the attempt stale closes it from this
#: (:mod:`sweeper.accounting`).
SEGMENT_ATTR = "sweeper:segment"
#: Trial user attr prefix: one closed segment of an attempt, ``sweeper:usage:<claim>``:
#: ``{"wall_s", "gpus", "cpus", "steps", "ending", "by"}`` (:class:`sweeper.accounting.Usage`).
#: One key per segment, so a retried write (or the runner and a stale closer both writing)
#: counts once.
USAGE_ATTR_PREFIX = "sweeper:usage:"
#: Study user attr: how many Kubernetes Jobs this sweep has launched (the next resume's N).
LAUNCHES_ATTR = "sweeper:k8s_launches"
#: Study user attr: the launch ``sweeper cancel`` cancelled (``LAUNCHES_ATTR``'s value then),
#: written before it deletes the launch's Jobs. A runner that the deletion's SIGTERM stops
#: reads it: its attempt was stopped by sweeper, not preempted (the next launch raises
#: ``LAUNCHES_ATTR``, so the mark no longer matches).
CANCELLED_ATTR = "sweeper:k8s_cancelled"
#: Study user attr: the backend of the latest launch (``local`` or ``kubernetes``), so that
#: ``sweeper logs`` and ``resume`` know where the sweep ran.
BACKEND_ATTR = "sweeper:backend"
#: Study user attr: the local backend's log directory of the sweep (absolute; its files are
#: ``index-I.log``, see :func:`index_log_name`).
LOG_DIR_ATTR = "sweeper:log_dir"
#: Study user attr: the local backend's checkpoint directory of the sweep (absolute: the root
#: and the sweep's :func:`state_key`), for ``sweeper delete``.
CHECKPOINT_DIR_ATTR = "sweeper:checkpoint_dir"
#: Study user attr: the sweep's identity, a UUID (hex) written when the study is created. What
#: a sweep keeps outside the study (local checkpoints and logs, checkpoint prefixes in S3 or on
#: a volume) is keyed by it (:func:`state_key`), so a new study under an old name, in this
#: storage or another, never reads an old sweep's state. Studies from before it have none.
UID_ATTR = "sweeper:uid"
#: Study system attr, Optuna's own (``Study.set_metric_names``): objective names.
METRIC_NAMES_ATTR = "study:metric_names"
#: Trial system attr, Optuna's own (``Study.enqueue_trial``): the params a trial must take.
FIXED_PARAMS_ATTR = "fixed_params"
#: Every key sweeper owns starts with this (reports hide them from "other metrics").
ATTR_PREFIX = "sweeper:"


def usage_key(claim: str) -> str:
    """The trial user attr of the segment claimed as ``claim`` once it is closed."""
    return f"{USAGE_ATTR_PREFIX}{claim}"


def code_part_key(digest_hex: str, part: int) -> str:
    """The study system attr that holds part ``part`` of the snapshot ``digest_hex``."""
    return f"{CODE_PART_ATTR_PREFIX}{digest_hex}:{part}"


# --------------------------------------------------------------------------- environment

ENV_STORAGE = "SWEEPER_STORAGE"
ENV_STUDY = "SWEEPER_STUDY"
ENV_JOB_ID = "JOB_ID"
#: Set by the Indexed Job controller; the fallback when JOB_ID is not set.
ENV_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
ENV_INDEX_MAP = "SWEEPER_INDEX_MAP"
ENV_INDEXES_PER_POD = "SWEEPER_INDEXES_PER_POD"
#: An open-ended sweep's Job: its ``parallelism`` pods (completions = parallelism) are slots;
#: slot ``j`` runs indexes ``j, j+S, j+2S, ...`` (S, this variable) one after the other until
#: the budget is spent (:func:`job_indexes_from_env`).
ENV_INDEX_STRIDE = "SWEEPER_INDEX_STRIDE"
ENV_CHECKPOINT_DIR = "SWEEPER_CHECKPOINT_DIR"
#: The normalised spec as JSON (Kubernetes: the mounted ConfigMap ``NAME-spec``). A runner
#: that finds no sweep creates it from this file, so the rendered objects alone run a sweep.
ENV_SPEC_FILE = "SWEEPER_SPEC_FILE"
#: The dataset's directory (``ctx.data_dir``): the ``data.path`` as mounted in a pod; what a
#: command trial's program reads.
ENV_DATA_DIR = "SWEEPER_DATA_DIR"
#: Where an S3 dataset is synced (a pod: its scratch; default: the user's cache directory).
ENV_DATA_CACHE = "SWEEPER_DATA_CACHE"
ENV_HEARTBEAT_INTERVAL = "SWEEPER_HEARTBEAT_INTERVAL"
ENV_REPORT_DELAY = "SWEEPER_REPORT_DELAY"
ENV_GRACE_PERIOD = "SWEEPER_GRACE_PERIOD"
ENV_CONNECT_DEADLINE = "SWEEPER_CONNECT_DEADLINE"
ENV_LOG_LEVEL = "SWEEPER_LOG_LEVEL"
ENV_CODE_VERSION = "SWEEPER_CODE_VERSION"
#: The code snapshot a trial runs with (``sha256:<hex>``); in a pod the runner fetches it.
ENV_CODE = "SWEEPER_CODE"
#: Where a pod fetches the snapshot from: ``artifacts`` (the spec's artifact store) or
#: ``study`` (the study storage, parts in study system attrs).
ENV_CODE_STORE = "SWEEPER_CODE_STORE"
#: Where a pod unpacks the snapshot (default ``CODE_MOUNT_PATH``) and runs the trial.
ENV_CODE_DIR = "SWEEPER_CODE_DIR"
#: The pod's volume (an emptyDir) that holds the unpacked snapshot, and where it is mounted:
#: public, so another container of the pod can mount the same code.
CODE_VOLUME = "sweeper-code"
CODE_MOUNT_PATH = "/sweeper/code"
ENV_POLL_INTERVAL = "SWEEPER_POLL_INTERVAL"
#: Seconds between SIGTERM and SIGKILL the runner may use to fail its trial and exit (the
#: pod's terminationGracePeriodSeconds; Kubernetes' default when unset).
ENV_TERMINATION_GRACE_PERIOD = "SWEEPER_TERMINATION_GRACE_PERIOD"
# The local backend's worker plumbing.
ENV_CMD_FD = "SWEEPER_CMD_FD"
ENV_RESULT_FD = "SWEEPER_RESULT_FD"
ENV_LOG_DIR = "SWEEPER_LOG_DIR"
ENV_PARENT_PID = "SWEEPER_PARENT_PID"
#: The spec file's directory (local workers): a command's relative script paths and the
#: entrypoint's module resolve against it before the working directory.
ENV_SPEC_DIR = "SWEEPER_SPEC_DIR"
# What a command trial's program reads.
ENV_PARAMS = "SWEEPER_PARAMS"
ENV_PARAMS_FILE = "SWEEPER_PARAMS_FILE"
ENV_METRICS_FILE = "SWEEPER_METRICS_FILE"
ENV_TRIAL_NUMBER = "SWEEPER_TRIAL_NUMBER"
# The storage proxy's credentials (sweeper.study.remote.credentials): a secret itself (the local
# run's per-run secret, or a token a user exported), a file holding one (a pod's projected
# ServiceAccount token, re-read as the kubelet renews it), and the CA that signed its TLS
# certificate.
ENV_PROXY_TOKEN = "SWEEPER_PROXY_TOKEN"
ENV_PROXY_TOKEN_FILE = "SWEEPER_PROXY_TOKEN_FILE"
ENV_PROXY_CA = "SWEEPER_PROXY_CA"
#: The split pod of a command trial (:mod:`sweeper.shim`): the directory the runner shares
#: with the shim in the user's container.
ENV_EXCHANGE_DIR = "SWEEPER_EXCHANGE_DIR"

DEFAULT_STORAGE = "sqlite:///sweeps.db"
DEFAULT_HEARTBEAT_INTERVAL_S = 5.0
#: A runner writes a trial's reports at most this many seconds after they were made, or with
#: the trial's finish when that comes first (0: each report when it is made).
DEFAULT_REPORT_DELAY_S = 1.0
#: A RUNNING attempt whose heartbeat is older than this is presumed dead.
DEFAULT_GRACE_PERIOD_S = 30.0
#: How long a runner keeps trying to reach a database that is not up yet.
DEFAULT_CONNECT_DEADLINE_S = 120.0
DEFAULT_CHECKPOINT_DIR = ".sweeper/checkpoints"
DEFAULT_POLL_INTERVAL_S = 1.0
DEFAULT_TERMINATION_GRACE_PERIOD_S = 30.0

#: Set by sweeper in every trial pod or worker: a spec's ``kubernetes.env`` may not set them.
#: Runner tuning (heartbeat, grace period, log level, code version) may be set there.
RESERVED_ENV = (ENV_JOB_ID, ENV_COMPLETION_INDEX, ENV_STORAGE, ENV_STUDY, ENV_INDEX_MAP,
                ENV_INDEXES_PER_POD, ENV_INDEX_STRIDE, ENV_CHECKPOINT_DIR, ENV_SPEC_FILE,
                ENV_DATA_DIR, ENV_CMD_FD, ENV_RESULT_FD, ENV_LOG_DIR, ENV_PARENT_PID,
                ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE, ENV_PROXY_CA, ENV_EXCHANGE_DIR)
#: Never passed on to a command trial's program (the URL holds the database password, the
#: token lets its holder act as the runner).
SECRET_ENV = (ENV_STORAGE, ENV_PROXY_TOKEN, ENV_PROXY_TOKEN_FILE)


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    """A float setting from the environment; unset or empty means the default."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"${name} must be a number, got {raw!r}") from None


def grace_period_s(env: Mapping[str, str]) -> float:
    """The heartbeat age after which a RUNNING attempt is presumed dead (runner and watchers
    must agree on it, so both read it here)."""
    return env_float(env, ENV_GRACE_PERIOD, DEFAULT_GRACE_PERIOD_S)


# --------------------------------------------------------------------------- exit codes

#: The index is finished: COMPLETE, PRUNED, or already finished by an earlier attempt.
EXIT_OK = 0
#: This attempt failed (the objective raised, the database went away, ...): retry it.
EXIT_RETRY = 1
#: The trial failed in a way the same parameters will repeat (NaN, missing metric, timeout):
#: fail this index, keep the others going (podFailurePolicy FailIndex).
EXIT_NO_RETRY = 3
#: Nothing can run (bad entrypoint, unknown study, index outside the sweep): stop the whole
#: sweep (podFailurePolicy FailJob).
EXIT_CONFIG = 4
#: Killed by a signal reads as 128 + signum (retryable).
EXIT_SIGNAL_BASE = 128

EXIT_NAMES = {EXIT_OK: "ok", EXIT_RETRY: "retryable failure", EXIT_NO_RETRY: "failed (no retry)",
              EXIT_CONFIG: "configuration error"}


def combine_exit_codes(codes: Sequence[int]) -> int:
    """One exit code for a pod that ran several indexes: the most severe one wins (a config
    error stops the Job; otherwise retry if any attempt can be retried)."""
    for code in (EXIT_CONFIG, EXIT_RETRY, EXIT_NO_RETRY):
        if code in codes:
            return code
    return EXIT_OK


# --------------------------------------------------------------------------- log headers
#
# Before each attempt a runner writes one header line to its output (the local index log file,
# which every attempt of the index appends to, or the pod's log, which may hold several indexes
# when ``indexes_per_pod`` > 1). ``sweeper logs --attempt K`` splits a log at these lines.
# Under a promotion scheduler an attempt may run in segments (to a rung, paused, promoted by
# another runner): each segment starts with its own header, the same attempt's, naming the
# rung it was promoted from.


@dataclass(frozen=True)
class LogHeader:
    index: int
    attempt: int  # the trial's ATTEMPT_ATTR: 0 for the first attempt of the index
    trial_number: int
    #: A segment of the attempt after its first (``scheduler:``, promotion): the rung the
    #: paused trial was promoted from. The attempt's first run to a rung has None.
    promoted_from: int | None = None


_LOG_HEADER_RE = re.compile(r"^=== sweeper: index (\d+), attempt (\d+), trial #(\d+)"
                            r"(?:, promoted from rung (\d+))? ===$")


def state_key(name: str, uid: str | None) -> str:
    """The directory (or key prefix) of a sweep's state outside the study: ``NAME-UID8`` for a
    sweep with an identity, plain ``NAME`` (the layout before identities) for one without."""
    return f"{name}-{uid[:8]}" if uid else name


def index_log_name(index: int) -> str:
    """The local backend's log file of ``index`` (in the sweep's log directory)."""
    return f"index-{index}.log"


def encode_log_header(header: LogHeader) -> str:
    """One line, newline included."""
    promoted = "" if header.promoted_from is None else \
        f", promoted from rung {header.promoted_from}"
    return (f"=== sweeper: index {header.index}, attempt {header.attempt}, "
            f"trial #{header.trial_number}{promoted} ===\n")


def parse_log_header(line: str) -> LogHeader | None:
    """Inverse of :func:`encode_log_header`; None for any other line."""
    match = _LOG_HEADER_RE.match(line.strip())
    if match is None:
        return None
    rung = int(match[4]) if match[4] is not None else None
    return LogHeader(int(match[1]), int(match[2]), int(match[3]), rung)


#: The line a pod's runner writes once an attempt's (or segment's) part of its log is over,
#: after the outcome's line: what follows, until the next header, is the pod's own (looking
#: for the next index, a promotion, the budget's answer), not that index's.
_LOG_END_RE = re.compile(r"^=== sweeper: index (\d+), trial #(\d+) ends ===$")


def encode_log_end(header: LogHeader) -> str:
    """The end line of the part that ``header`` began; one line, newline included."""
    return f"=== sweeper: index {header.index}, trial #{header.trial_number} ends ===\n"


def parse_log_end(line: str) -> tuple[int, int] | None:
    """Inverse of :func:`encode_log_end`: (index, trial number); None for any other line."""
    match = _LOG_END_RE.match(line.strip())
    return None if match is None else (int(match[1]), int(match[2]))


# --------------------------------------------------------------------------- the index map
#
# An Indexed Job has completions 0..C-1. Job index k runs a chunk of ``per_pod`` consecutive
# entries of the "universe": every sweep index 0..n-1 (a first launch), or an explicit list
# (a sparse resume Job that covers only unfinished indexes).


def encode_index_map(indexes: Sequence[int]) -> str:
    """``[3, 7, 9]`` -> ``"3,7,9"`` (the env value and the Job annotation)."""
    return ",".join(str(int(i)) for i in indexes)


def decode_index_map(text: str | None) -> tuple[int, ...] | None:
    """Inverse of :func:`encode_index_map`; None or empty means "no map" (dense)."""
    if not text or not text.strip():
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"index map must be comma-separated integers, got {text[:80]!r}") \
            from None


def chunk(job_index: int, per_pod: int, mapping: Sequence[int] | None,
          n_indexes: int) -> list[int]:
    """The sweep indexes job index ``job_index`` runs, in order (empty: outside the Job)."""
    if job_index < 0 or per_pod < 1:
        return []
    universe: Sequence[int] = mapping if mapping is not None else range(n_indexes)
    return list(universe[job_index * per_pod:(job_index + 1) * per_pod])


def job_index_of(index: int, per_pod: int, mapping: Sequence[int] | None,
                 n_indexes: int) -> int | None:
    """Inverse of :func:`chunk`: the job index whose pod runs sweep index ``index``."""
    if mapping is None:
        position = index if 0 <= index < n_indexes else None
    else:
        position = list(mapping).index(index) if index in mapping else None
    return None if position is None else position // max(1, per_pod)


def completions(per_pod: int, mapping: Sequence[int] | None, n_indexes: int) -> int:
    """How many job indexes a Job needs to cover its universe."""
    size = len(mapping) if mapping is not None else n_indexes
    return -(-size // max(1, per_pod))


def job_indexes_from_env(env: Mapping[str, str], n_indexes: int) -> list[int]:
    """The sweep indexes this process must run, from the Job's completion index.

    Raises ValueError with a message for the runner's log when the environment is wrong."""
    raw = env.get(ENV_JOB_ID, env.get(ENV_COMPLETION_INDEX))
    if raw is None or not raw.strip().isdigit():
        raise ValueError(f"{ENV_JOB_ID} must be a non-negative integer, got {raw!r}")
    job_id = int(raw)
    stride = env.get(ENV_INDEX_STRIDE)
    if stride:
        if not stride.strip().isdigit() or int(stride) < 1 or job_id >= int(stride):
            raise ValueError(f"{ENV_INDEX_STRIDE} must be an integer above {ENV_JOB_ID} "
                             f"({job_id}), got {stride!r}")
        return list(range(job_id, n_indexes, int(stride)))
    per_pod = int(env.get(ENV_INDEXES_PER_POD, "1") or 1)
    if per_pod < 1:
        raise ValueError(f"{ENV_INDEXES_PER_POD} must be >= 1")
    mapping = decode_index_map(env.get(ENV_INDEX_MAP))
    indexes = chunk(job_id, per_pod, mapping, n_indexes)
    if not indexes:
        size = len(mapping) if mapping is not None else n_indexes
        raise ValueError(f"{ENV_JOB_ID} {job_id} is outside the sweep ({size} indexes, "
                         f"{per_pod} per pod)")
    for i in indexes:
        if not 0 <= i < n_indexes:
            raise ValueError(f"index {i} is outside the sweep (0..{n_indexes - 1})")
    return indexes
