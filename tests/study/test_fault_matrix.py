"""Every protocol step hit by every kind of database fault (steps x kinds, parametrized).

A two-index sweep runs through tests/support/faultproxy.py against real PostgreSQL: the
orchestrator's calls (create sweep, bulk enqueue, stale sweep) and the runner's (claim, ask,
suggest, report, heartbeat, tell, mark failed, new attempt) each meet one fault at their
statement: the connection cut before the statement, the connection cut after its COMMIT landed
(the reply dropped), the statement stalled, the backend terminated (``pg_terminate_backend``),
or a simulated server restart (every backend of the database terminated, new connections
refused with 57P03 for a while; tests/test_faults.py restarts the real server once).

After each case: exactly one finished trial per index, no trial left RUNNING, no attempt more
than the scenario itself needs (a fault the retry covered costs none), and no value lost (every
trial's value, params and intermediate values are the objective's).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper import protocol
from sweeper.spec import parse_spec_dict
from sweeper.study import create_or_resume, load_sweep, open_storage
from sweeper.study.sql.storage import RetryingRDBStorage
from tests.conftest import PG_ADMIN_URL
from tests.support.faultproxy import KINDS, FaultProxy
from tests.support.helpers import drop_database
from trial_runner.context import TrialContext
from trial_runner.runner import RunnerSettings, run_index

pytestmark = pytest.mark.postgres

STEPS = {
    # step: (statement the fault hits, phase it is armed for)
    "create sweep": (r"^INSERT INTO studies", "create"),
    "bulk enqueue": (r"'sweeper:enqueued'", "create"),
    "stale sweep": (r"^UPDATE trials SET state = 'FAIL'", "stale"),
    "claim": (r"UPDATE trials SET state = 'RUNNING'", "run"),
    "ask": (r"INSERT INTO trials \(", "run"),
    "suggest": (r"INSERT INTO trial_params", "run"),
    "report": (r"INSERT INTO trial_intermediate_values", "run"),
    "heartbeat": (r"^UPDATE trial_heartbeats", "run"),
    "tell": (r"UPDATE trials SET state='COMPLETE'", "run"),
    "mark failed": (r"^UPDATE trials SET state = 'FAIL'", "run"),
    "new attempt": (r"INSERT INTO trials \(", "run"),
}
CASES = [(step, kind) for step in STEPS for kind in KINDS]
#: Scenarios whose index 0 fails once on purpose (its objective raises, or it froze).
FAILS_ONCE = {"mark failed", "new attempt", "stale sweep"}


@pytest.fixture(scope="module")
def database(pg_admin: sa.Engine) -> Iterator[str]:
    """One database for the whole matrix; each case runs its own sweep in it."""
    name = f"sweeper_matrix_{uuid.uuid4().hex[:8]}"
    with pg_admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    open_storage(url).engine.dispose()  # the schema, once: each case opens it prepared
    yield url
    drop_database(pg_admin, name)


def _value(x: float) -> float:
    return (x - 0.3) ** 2


def objective(ctx: TrialContext) -> float:
    """Three reports (heartbeats beat meanwhile); index 0's first attempt raises when the
    scenario says so."""
    if ctx.params.get("fail_first") and ctx.index == 0 and ctx.attempt == 0:
        raise RuntimeError("first attempt fails on purpose")
    x = float(ctx.params["x"])
    for step in range(3):
        time.sleep(0.05)
        ctx.report(step, loss=_value(x) + step)
    return _value(x)


def _spec(name: str, method: str, fail_first: bool) -> dict[str, object]:
    x: dict[str, object] = {"type": "float", "values": [0.1, 0.6]} if method == "grid" else \
        {"type": "float", "low": 0.0, "high": 1.0}
    return {"name": name, "method": method, "objective": {"metric": "loss",
                                                          "direction": "minimize"},
            **({"trials": 2} if method != "grid" else {}), "seed": 5,
            "trial": {"entrypoint": "tests.support.fault_objectives:steady",
                      "fixed": {"fail_first": fail_first}},
            "parameters": {"x": x}}


@dataclass
class Case:
    step: str
    kind: str
    proxy: FaultProxy
    url: str  # through the proxy
    direct: RetryingRDBStorage  # past the proxy
    tmp: Path

    def arm(self) -> None:
        self.proxy.arm(self.kind, STEPS[self.step][0], step=self.step, delay=0.5)


def _run(case: Case) -> tuple[str, int, list[int]]:
    name = f"m-{case.step}-{case.kind}".replace(" ", "-").replace("_", "-")
    # A planned (grid) trial's params are stored when it is enqueued (the "bulk enqueue"
    # step); a runner suggests and writes them for an adaptive (TPE) one.
    method = "tpe" if case.step in {"ask", "suggest"} else "grid"
    spec = parse_spec_dict(_spec(name, method, case.step in {"mark failed", "new attempt"}),
                           source="<matrix>")
    orchestrator = open_storage(case.url, prepared=True)
    if STEPS[case.step][1] == "create":
        case.arm()
    sweep, _ = create_or_resume(orchestrator, spec)
    stale_failed: list[int] = []
    if case.step == "stale sweep":
        # index 0 was claimed by a runner that froze: its heartbeat is an hour old
        frozen = orchestrator.attempts(sweep.study_id, 0)[0]
        assert orchestrator.claim(frozen.trial_id)
        with case.direct.engine.begin() as conn:
            conn.execute(sa.text("UPDATE trial_heartbeats SET heartbeat = heartbeat - "
                                 "interval '1 hour' WHERE trial_id = :t"),
                         {"t": frozen.trial_id})
        case.arm()
        stale_failed = orchestrator.fail_stale_trials(sweep.study_id, grace_s=60)
    runner = load_sweep(open_storage(case.url, prepared=True), name)
    settings = RunnerSettings(heartbeat_interval_s=0.05, grace_period_s=60,
                              checkpoint_root=case.tmp / "ckpt")
    if STEPS[case.step][1] == "run":
        case.arm()
    codes = []
    for index in (0, 1):
        outcome = run_index(runner, index, objective, settings)
        if outcome.exit_code == protocol.EXIT_RETRY and case.step in FAILS_ONCE:
            outcome = run_index(runner, index, objective, settings)  # the backend's retry
        codes.append(outcome.exit_code)
    assert codes == [protocol.EXIT_OK, protocol.EXIT_OK], codes
    return name, sweep.study_id, stale_failed


def _problems(case: Case, name: str) -> list[str]:
    trials = optuna.load_study(study_name=name, storage=case.direct).get_trials()
    problems = []
    per_index = Counter(t.user_attrs["sweeper:index"] for t in trials)
    finished = Counter(t.user_attrs["sweeper:index"] for t in trials
                       if t.state == TrialState.COMPLETE)
    for i in (0, 1):
        wanted = 2 if i == 0 and case.step in FAILS_ONCE else 1
        if finished[i] != 1:
            problems.append(f"index {i}: {finished[i]} finished trials")
        if per_index[i] != wanted:
            problems.append(f"index {i}: {per_index[i]} attempts, expected {wanted}")
    problems += [f"trial #{t.number} left RUNNING" for t in trials
                 if t.state == TrialState.RUNNING]
    for t in trials:
        if t.state != TrialState.COMPLETE:
            continue
        x = t.params.get("x")
        history = [step for step, _ in t.user_attrs.get("sweeper:history", {}).get("loss", [])]
        if x is None or t.value != _value(x) or \
                t.intermediate_values != {s: _value(x) + s for s in range(3)} or \
                history != [0, 1, 2]:
            problems.append(f"trial #{t.number} lost a value: {t.params} {t.values} "
                            f"{t.intermediate_values} {history}")
    return problems


@pytest.mark.parametrize(("step", "kind"), CASES, ids=[f"{s}-{k}" for s, k in CASES])
def test_fault_at_each_protocol_step(step: str, kind: str, database: str,
                                     pg_admin: sa.Engine, tmp_path: Path) -> None:
    with FaultProxy.for_url(database, pg_admin) as proxy:
        case = Case(step, kind, proxy, proxy.url(database),
                    open_storage(database, prepared=True), tmp_path)
        name, study_id, stale_failed = _run(case)
        assert proxy.kinds_fired(step) == [kind], f"the fault did not fire: {proxy.injected}"
    assert _problems(case, name) == []
    if step == "stale sweep":
        # the stale sweep knows it failed the frozen trial (so the backend kills its worker)
        [frozen] = [a for a in case.direct.attempts(study_id, 0) if a.state == TrialState.FAIL]
        assert stale_failed == [frozen.trial_id]
    if step == "mark failed":
        [failed] = [t for t in optuna.load_study(study_name=name, storage=case.direct)
                    .get_trials() if t.state == TrialState.FAIL]
        assert failed.user_attrs["sweeper:fail_reason"].startswith("objective raised")


def test_the_matrix_covers_every_step_and_kind() -> None:
    assert len(CASES) == len(STEPS) * len(KINDS) == 55
