"""The index protocol through the storage proxy: the same guarantees as the direct path (one
winner per claim and per new attempt, one plan per sweep, a changed spec refused), on SQLite
and PostgreSQL, with the proxy running in this process on a free port."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from sweeper.errors import SpecError, StorageError, StudyNotFoundError
from sweeper.protocol import INDEX_ATTR
from sweeper.proxy.server import ProxyServer
from sweeper.space import grid_point
from sweeper.study import create_or_resume, load_sweep, open_storage
from sweeper.study.remote.client import ProxyStorage, parse_proxy_url
from tests.support.helpers import make_spec, race_new_attempts
from tests.support.proxy import free_port


@pytest.fixture
def server(storage_url: str) -> Iterator[ProxyServer]:
    server = ProxyServer(storage_url, port=0).start()
    yield server
    server.stop(0)


@pytest.fixture
def proxy_url(server: ProxyServer) -> str:
    return server.url


def _statements(server: ProxyServer) -> list[str]:
    seen: list[str] = []
    sa.event.listen(server.storage.engine, "before_cursor_execute",
                    lambda *a: seen.append(a[2]))
    return seen


def test_grpc_urls_open_as_the_proxy(proxy_url: str) -> None:
    storage = open_storage(proxy_url)
    assert isinstance(storage, ProxyStorage)
    assert storage.proxy_url == proxy_url
    assert parse_proxy_url("grpc://proxy.sweeper.svc") == ("proxy.sweeper.svc", 13000)
    for bad in ("grpc://", "grpc://user:pw@host:1", "grpc://host:1/db", "grpc://host:x"):
        with pytest.raises(StorageError, match="grpc://host:port"):
            parse_proxy_url(bad)


def test_an_unreachable_proxy_is_one_line() -> None:
    with pytest.raises(StorageError) as e:
        open_storage(f"grpc://127.0.0.1:{free_port()}", connect_deadline_s=0.5)
    assert "cannot reach the storage proxy" in str(e.value) and "\n" not in str(e.value)


def test_a_sweep_is_created_resumed_and_refused_through_the_proxy(proxy_url: str,
                                                                  storage_url: str) -> None:
    storage = open_storage(proxy_url)
    spec = make_spec()
    sweep, created = create_or_resume(storage, spec)
    assert created
    trials = sweep.study().get_trials()
    assert [t.state for t in trials] == [TrialState.WAITING] * 10
    assert {t.user_attrs[INDEX_ATTR]: t.system_attrs["fixed_params"] for t in trials} == \
        {i: grid_point(spec, i) for i in range(10)}
    assert load_sweep(storage, spec.name).spec == spec
    assert load_sweep(open_storage(storage_url), spec.name).study_id == sweep.study_id
    again, created = create_or_resume(storage, spec.with_overrides(parallelism=8))
    assert not created and again.study_id == sweep.study_id
    changed = make_spec(parameters={"a": {"type": "float", "low": 0.0, "high": 2.0, "step": 0.5},
                                    "b": {"type": "categorical", "choices": ["x", "y"]}})
    with pytest.raises(SpecError) as e:
        create_or_resume(storage, changed)
    # the client's spec is named, not the proxy's copy of it; the field says what differs
    assert e.value.source == changed.source and e.value.field == "parameters"
    assert storage.state_counts(sweep.study_id) == {"WAITING": 10}
    with pytest.raises(StudyNotFoundError):
        load_sweep(storage, "nope")


def test_concurrent_launches_through_the_proxy_enqueue_once(proxy_url: str) -> None:
    spec = make_spec(method="random", trials=50)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def launch() -> None:
        try:
            barrier.wait(timeout=30)
            create_or_resume(open_storage(proxy_url), spec)
        except BaseException as e:  # noqa: BLE001 - collected and asserted empty below
            errors.append(e)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    trials = optuna.load_study(study_name=spec.name, storage=open_storage(proxy_url)).trials
    assert sorted(t.user_attrs[INDEX_ATTR] for t in trials) == list(range(50))


def test_claim_through_the_proxy_has_one_winner(proxy_url: str) -> None:
    storage = open_storage(proxy_url)
    sweep, _ = create_or_resume(storage, make_spec())
    waiting = storage.attempts(sweep.study_id, 3)[0]
    assert waiting.state == TrialState.WAITING
    results: list[bool] = []
    barrier = threading.Barrier(6)

    def race() -> None:
        own = open_storage(proxy_url)
        barrier.wait()
        results.append(own.claim(waiting.trial_id))

    threads = [threading.Thread(target=race) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]
    [running] = storage.attempts(sweep.study_id, 3)
    assert running.state == TrialState.RUNNING and running.heartbeat_age_s is not None


def test_new_attempt_through_the_proxy_is_exclusive_and_linked(proxy_url: str) -> None:
    storage = open_storage(proxy_url)
    sweep, _ = create_or_resume(storage, make_spec())
    first = storage.attempts(sweep.study_id, 4)[0]
    assert storage.claim(first.trial_id)
    assert storage.mark_failed(first.trial_id, "boom")
    assert not storage.mark_failed(first.trial_id, "again")  # finished already
    failed = storage.attempts(sweep.study_id, 4)[0]
    created = race_new_attempts(proxy_url, sweep, 4, after=failed)
    winners = [c for c in created if c is not None]
    assert len(winners) == 1
    atts = storage.attempts(sweep.study_id, 4)
    assert [a.state for a in atts] == [TrialState.FAIL, TrialState.RUNNING]
    new = storage.get_trial(winners[0])
    assert new.user_attrs["sweeper:retry_of"] == failed.number
    assert new.system_attrs["fixed_params"] == grid_point(sweep.spec, 4)
    assert storage.get_trial(failed.trial_id).user_attrs["sweeper:fail_reason"] == "boom"


def test_heartbeats_and_stale_trials_through_the_proxy(proxy_url: str,
                                                       storage_url: str) -> None:
    storage = open_storage(proxy_url)
    sweep, _ = create_or_resume(storage, make_spec())
    fresh, stale = (storage.attempts(sweep.study_id, i)[0] for i in (0, 1))
    assert storage.claim(fresh.trial_id) and storage.claim(stale.trial_id)
    direct = open_storage(storage_url)
    with direct.engine.begin() as conn:  # index 1's runner went quiet a minute ago
        conn.execute(sa.text("UPDATE trial_heartbeats SET heartbeat = :t WHERE trial_id = :i"),
                     {"t": "2000-01-01 00:00:00", "i": stale.trial_id})
    storage.record_heartbeat(fresh.trial_id)
    assert storage.attempts(sweep.study_id, 1)[0].heartbeat_age_s > 60  # type: ignore[operator]
    assert storage.fail_stale_trials(sweep.study_id, grace_s=30) == [stale.trial_id]
    assert [a.state for a in storage.attempts(sweep.study_id, 1)] == [TrialState.FAIL]
    assert storage.attempts(sweep.study_id, 0)[0].state == TrialState.RUNNING
    assert "heartbeat" in direct.get_trial(stale.trial_id).user_attrs["sweeper:fail_reason"]


def test_summaries_through_the_proxy_equal_the_direct_ones(proxy_url: str,
                                                           storage_url: str) -> None:
    storage = open_storage(proxy_url)
    sweep, _ = create_or_resume(storage, make_spec())
    study = sweep.study()
    for i, value in ((0, 1.5), (1, float("inf"))):
        [a] = storage.attempts(sweep.study_id, i)
        assert storage.claim(a.trial_id)
        study.tell(a.number, value)
    direct = open_storage(storage_url)
    assert storage.index_table(sweep.study_id, sweep.spec.trials) == \
        direct.index_table(sweep.study_id, sweep.spec.trials)
    assert storage.state_counts(sweep.study_id) == direct.state_counts(sweep.study_id) == \
        {"COMPLETE": 2, "WAITING": 8}


def test_finding_an_index_is_one_query_on_the_proxy(server: ProxyServer) -> None:
    storage = open_storage(server.url)
    sweep, _ = create_or_resume(storage, make_spec(method="random", trials=500))
    seen = _statements(server)
    assert len(storage.attempts(sweep.study_id, 321)) == 1
    assert len(seen) == 1 and "sweeper:index" in seen[0]


def test_a_trial_claimed_elsewhere_takes_params_through_the_proxy(proxy_url: str,
                                                                  storage_url: str) -> None:
    """The proxy's trial cache learns of trials that sweeper's SQL created or claimed (here
    directly on the database, as another proxy replica would) when a runner suggests."""
    direct = open_storage(storage_url)
    sweep, _ = create_or_resume(direct, make_spec())
    [a] = direct.attempts(sweep.study_id, 2)
    assert direct.claim(a.trial_id)
    storage = open_storage(proxy_url)
    study = optuna.load_study(study_name=sweep.name, storage=storage)
    trial = optuna.Trial(study, a.trial_id)
    assert trial.suggest_float("a", 0.0, 1.0, step=0.25) == grid_point(sweep.spec, 2)["a"]
    study.tell(a.number, 0.5)
    assert direct.get_trial(a.trial_id).params["a"] == grid_point(sweep.spec, 2)["a"]


def test_fail_reasons_growth_and_stop_rules_through_the_proxy(proxy_url: str,
                                                              storage_url: str) -> None:
    """What later features added to the protocol crosses the proxy too: a FAIL's reason in
    the index table, the indexes a grown sweep came from, the stop rules (evaluated on the
    proxy's database, recorded once) and --ignore-stop."""
    from sweeper.study import stop

    storage = open_storage(proxy_url)
    spec = make_spec(method="random", stop={"value": 0.5})
    sweep, _ = create_or_resume(storage, spec)
    [a] = storage.attempts(sweep.study_id, 0)
    assert storage.claim(a.trial_id)
    assert storage.mark_failed(a.trial_id, "objective raised ValueError: nope")
    direct = open_storage(storage_url)
    table = storage.index_table(sweep.study_id, sweep.spec.trials)
    assert table[0].fail_reason == "objective raised ValueError: nope"
    assert table == direct.index_table(sweep.study_id, sweep.spec.trials)

    grown, created = create_or_resume(storage, make_spec(method="random", stop={"value": 0.5},
                                                         trials=9))
    assert (created, grown.grown_from) == (False, 6)
    assert len(direct.index_table(grown.study_id, grown.spec.trials)) == 9

    assert stop.before_start(storage, sweep.study_id, spec) is None
    [b] = storage.attempts(sweep.study_id, 1)
    assert storage.claim(b.trial_id)
    sweep.study().tell(b.number, 0.25)  # reaches stop.value
    fired = stop.after_trial(storage, sweep.study_id, spec)
    assert fired is not None and fired.rule == "value" and fired.stopped
    assert stop.before_start(storage, sweep.study_id, spec) == fired
    assert direct.stop_state(sweep.study_id) == fired == \
        storage.stop_state(sweep.study_id)
    ignored = storage.ignore_stop(sweep.study_id)
    assert ignored is not None and not ignored.stopped and ignored.rule == "value"
    assert stop.before_start(storage, sweep.study_id, spec) is None


def test_list_and_delete_through_the_proxy(proxy_url: str) -> None:
    """``list`` and ``delete`` are index-store operations like the others: through the proxy
    they read the same grouped summary and delete the study."""
    import json

    from click.testing import CliRunner

    from sweeper.cli import cli
    from sweeper.errors import StudyNotFoundError

    create_or_resume(open_storage(proxy_url), make_spec())
    out = CliRunner().invoke(cli, ["list", "--storage", proxy_url, "--format", "json"])
    assert out.exit_code == 0, out.output
    [listed] = json.loads(out.output)
    assert listed["name"] == "t-sweep" and listed["indexes"] == 10
    out = CliRunner().invoke(cli, ["delete", "t-sweep", "--yes", "--storage", proxy_url])
    assert out.exit_code == 0, out.output
    assert "deleted sweep t-sweep (10 trial(s))" in out.output
    with pytest.raises(StudyNotFoundError):
        load_sweep(open_storage(proxy_url), "t-sweep")


def test_a_write_the_client_retries_through_the_proxy_is_recognised(proxy_url: str) -> None:
    """The write token is made by the client and sent: when a proxy restart loses the reply
    and the client calls again, the second call finds the first one's commit and reports it
    (the claim won, the attempt it created, the FAIL it wrote) instead of losing the trial."""
    storage = open_storage(proxy_url)
    sweep, _ = create_or_resume(storage, make_spec())
    [a] = storage.attempts(sweep.study_id, 0)
    assert storage.claim(a.trial_id, token="claim-1")
    assert storage.claim(a.trial_id, token="claim-1")       # the same call, retried
    assert not storage.claim(a.trial_id, token="claim-2")   # another runner
    assert storage.mark_failed(a.trial_id, "lost", token="fail-1")
    assert storage.mark_failed(a.trial_id, "lost", token="fail-1")
    assert not storage.mark_failed(a.trial_id, "lost", token="fail-2")
    [failed] = storage.attempts(sweep.study_id, 0)
    tid = storage.new_attempt(sweep.study_id, 0, after=failed, params=None, token="new-1")
    assert tid is not None
    assert storage.new_attempt(sweep.study_id, 0, after=failed, params=None,
                       token="new-1") == tid
    assert storage.new_attempt(sweep.study_id, 0, after=failed, params=None,
                       token="new-2") is None
    assert [x.trial_id for x in storage.attempts(sweep.study_id, 0)] == [a.trial_id, tid]


def test_the_ledger_and_the_budget_stop_through_the_proxy(proxy_url: str,
                                                          storage_url: str) -> None:
    from sweeper.accounting import BUDGET_RULE
    from sweeper.protocol import usage_key
    from sweeper.study.ledger import may_start, sweep_ledger

    storage = open_storage(proxy_url)
    sweep = create_or_resume(storage, make_spec(method="random", budget={"steps": 10}))[0]
    [a] = storage.attempts(sweep.study_id, 0)
    assert storage.claim(a.trial_id)
    storage.set_trial_user_attrs(a.trial_id, {usage_key("x"): {
        "wall_s": 3.0, "gpus": 0.0, "cpus": 1.0, "steps": 12, "ending": "complete"}})
    book = sweep_ledger(sweep)
    assert book.totals.finished.steps == 12
    assert book == sweep_ledger(load_sweep(open_storage(storage_url), sweep.name))
    assert not may_start(sweep).may_start
    state = open_storage(storage_url).stop_state(sweep.study_id)
    assert state is not None and state.rule == BUDGET_RULE


def test_the_budget_gates_sums_are_made_on_the_proxys_side(server: ProxyServer,
                                                         storage_url: str) -> None:
    from sweeper.study.ledger import read_balance, read_ledger
    from tests.support.ledger_sweeps import NOW, mixed_sweep

    sweep = mixed_sweep(storage_url)
    seen = _statements(server)
    via = open_storage(server.url)
    sums = via.ledger_sums(sweep.study_id)
    assert sums == open_storage(storage_url).ledger_sums(sweep.study_id)
    assert len(sums.rows) == 5  # only the RUNNING trials' rows came over the wire
    assert any("GROUP BY ending, gpus, cpus" in s for s in seen)  # summed by the server
    assert read_balance(sums, NOW) == read_ledger(via.ledger(sweep.study_id), NOW).balance
