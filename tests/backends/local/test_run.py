"""The local backend's run object (sweeper.backends.local.run.LocalRun) step by step: its
state after each message, exit and hand-out, with stand-in worker processes (pipes, no
interpreter) on a real SQLite sweep. The real runs are in test_backend.py."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from sweeper import messages, protocol
from sweeper.backends.local.proxy import LocalProxy
from sweeper.backends.local.run import MAX_STARTUP_FAILURES, LocalRun, RunSettings
from sweeper.backends.local.worker import Launcher, Worker
from sweeper.errors import BackendError, SpecError
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec

MakeRun = Callable[..., LocalRun]


class _Proc:
    """A worker process that has exited with ``returncode`` (None: still running)."""

    def __init__(self, returncode: int | None = None) -> None:
        self.returncode = returncode

    def poll(self) -> int | None:
        return self.returncode


@pytest.fixture
def make_run(tmp_path: Path, sqlite_url: str) -> Iterator[MakeRun]:
    """``make_run(retries=...)``: a run of a 2-worker sweep; its selector and pipes are
    closed afterwards."""
    made: list[LocalRun] = []

    def make(retries: int = 1) -> LocalRun:
        made.append(_run(tmp_path, sqlite_url, retries=retries))
        return made[-1]

    yield make
    for run in made:
        for w in run.workers:
            w.res.close()
        run.sel.close()


def _run(tmp_path: Path, sqlite_url: str, *, retries: int, workers: int = 2) -> LocalRun:
    spec = make_spec(name="steps", parallelism=workers,
                     trial={"entrypoint": "objectives:train", "fixed": {}, "retries": retries},
                     parameters={"x": {"type": "float", "values": [float(i) for i in range(8)]}})
    sweep, _ = create_or_resume(open_storage(sqlite_url), spec)
    settings = RunSettings(grace_period_s=3.0, stop_timeout_s=1.0, max_starting=1,
                           stagger_s=0.0, fork=False)
    launcher = Launcher({}, tmp_path, (None,) * workers)
    return LocalRun(sweep, settings, launcher, LocalProxy(sqlite_url, None, sqlite_url))


def _worker(run: LocalRun, slot: int, sent: bytes = b"", **state: Any) -> Worker:
    """A worker of ``run`` that wrote ``sent`` and closed its end, registered as a spawned
    one is."""
    r, w = os.pipe()
    os.write(w, sent)
    os.close(w)
    res = os.fdopen(r, "rb", buffering=0)
    os.set_blocking(r, False)
    worker = Worker(slot, state.pop("proc", _Proc()), io.StringIO(), res, **state)
    run.sel.register(res, 1, worker)  # selectors.EVENT_READ
    run.workers.append(worker)
    return worker


def _sent(w: Worker) -> str:
    return cast(io.StringIO, w.cmd).getvalue()


def _lines(*sent: messages.Message) -> bytes:
    return "".join(messages.encode_message(m) for m in sent).encode()


def test_a_failed_attempt_is_retried_until_its_retries_are_spent(
        tmp_path: Path, make_run: MakeRun) -> None:
    run = make_run(retries=1)
    run.dispatched[4] = 1
    run.settle(4, protocol.EXIT_RETRY, False)
    assert list(run.pending) == [4] and run.failed == []
    run.pending.clear()
    run.dispatched[4] = 2
    run.settle(4, protocol.EXIT_RETRY, False)
    assert list(run.pending) == [] and run.failed == [4]
    run.dispatched[5] = 1
    run.settle(5, protocol.EXIT_NO_RETRY, False)  # no retry fixes it
    assert run.failed == [4, 5]
    run.settle(6, protocol.EXIT_OK, False)
    assert run.finished == [6]
    with pytest.raises(SpecError, match=r"index 7: the runner reported a configuration error"):
        run.settle(7, protocol.EXIT_CONFIG, False)


def test_reaping_a_worker_that_died_holding_an_index(tmp_path: Path, make_run: MakeRun,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(retries=1)
    spawned: list[int] = []
    monkeypatch.setattr(run, "_spawn", spawned.append)
    run.pending.extend([7])
    run.dispatched.update({3: 1, 5: 1})
    w = _worker(run, 0, proc=_Proc(-9), ready=True, index=3, queued=5, trial_id=11)
    run.replace_exited()
    assert run.workers == [] and w.res.closed
    assert list(run.pending) == [5, 7, 3]  # the queued index first; the held one retried
    assert run.dispatched == {3: 1, 5: 0}
    assert spawned == [0]  # work is left: the slot gets another worker


def test_an_exit_read_while_idle_and_retired_is_not_replaced(
        tmp_path: Path, make_run: MakeRun, monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run()
    spawned: list[int] = []
    monkeypatch.setattr(run, "_spawn", spawned.append)
    _worker(run, 0, proc=_Proc(0), ready=True, retired=True)
    _worker(run, 1, ready=True, index=2)  # still busy
    run.replace_exited()
    assert [w.slot for w in run.workers] == [1] and spawned == []


def test_workers_that_die_while_starting_are_replaced_up_to_a_limit(
        tmp_path: Path, make_run: MakeRun) -> None:
    run = make_run()
    (tmp_path / "worker-0.log").write_text("importing\nImportError: no module named boom\n")
    for _ in range(MAX_STARTUP_FAILURES - 1):
        run.died_starting(0, -9)
    ready = _worker(run, 1, _lines(messages.Ready()))
    run.read(ready)  # one worker became ready: the count starts again
    assert ready.ready and run.startup_failures == 0
    for _ in range(MAX_STARTUP_FAILURES - 1):
        run.died_starting(0, -9)
    with pytest.raises(BackendError, match=r"worker 0 exited with code -9 before starting: "
                                           r"ImportError: no module named boom"):
        run.died_starting(0, -9)


def test_a_runner_that_cannot_start_is_a_configuration_error(
        tmp_path: Path, make_run: MakeRun) -> None:
    run = make_run()
    (tmp_path / "worker-0.log").write_text("ERROR objective not found\n")
    _worker(run, 0, proc=_Proc(protocol.EXIT_CONFIG))
    with pytest.raises(SpecError, match="the trial runner could not start: ERROR objective"):
        run.replace_exited()


def test_done_moves_a_worker_to_its_queued_index_and_stopped_ends_the_hand_out(
        tmp_path: Path, make_run: MakeRun) -> None:
    run = make_run()
    run.pending.extend([6, 7])
    w = _worker(run, 0, _lines(messages.Start(3, 21, 0), messages.Done(3, 0, "COMPLETE", 0),
                               messages.Done(5, 0, protocol.STOPPED, 1)),
                ready=True, index=3, queued=5)
    run.read(w)
    assert run.finished == [3]  # index 5 ended STOPPED: neither finished nor failed
    assert w.index is None and w.queued is None and w.trial_id is None
    assert list(run.pending) == []  # the sweep stopped: no other index starts


def test_next_indexes_are_handed_ahead_only_while_more_are_pending_than_workers(
        tmp_path: Path, make_run: MakeRun) -> None:
    run = make_run()
    a = _worker(run, 0, ready=True, index=0)
    b = _worker(run, 1, ready=True, index=1)
    run.pending.extend([2, 3, 4])
    run.prefetch()
    assert (a.queued, b.queued) == (2, None)  # then 2 pending, 2 workers: no more
    assert list(run.pending) == [3, 4] and run.dispatched == {2: 1}
    assert _sent(a) == messages.encode_message(messages.Run(2))


def test_idle_workers_retire_once_nothing_is_pending(make_run: MakeRun) -> None:
    run = make_run()
    idle = _worker(run, 0, ready=True)
    busy = _worker(run, 1, ready=True, index=1)
    run.pending.append(5)
    run.retire_idle()
    assert not idle.retired  # something is left to hand out
    run.pending.clear()
    run.retire_idle()
    assert idle.retired and not busy.retired
    assert _sent(idle) == messages.encode_message(messages.Exit())
