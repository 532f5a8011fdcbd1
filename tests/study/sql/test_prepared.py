"""Server-side prepared statements under the one-statement steps (sweeper/study/sql/prepared.py):
the text's prepared form, and on a real PostgreSQL that a step is prepared once per connection,
gives the text's result, and falls back to the text where preparing cannot work (a parameter
of no inferable type, a name the server lost as behind a pooler, the switch turned off)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from sweeper.study.sql import oneshot, prepared

DOUBLE = "SELECT CAST(:a AS integer) + :b + :a AS s, '100%' AS pct"


def test_form_numbers_binds_by_first_appearance() -> None:
    f = prepared.form("SELECT %(a)s + %(b)s + %(a)s, '100%%', %(b)s")
    assert f.prepare.endswith(" AS SELECT $1 + $2 + $1, '100%', $2")
    assert f.execute == f"EXECUTE {f.name}(%(a)s, %(b)s)"
    assert f.name.startswith("sweeper_")


def test_form_names_follow_the_text() -> None:
    assert prepared.form("SELECT 1").name == prepared.form("SELECT 1").name
    assert prepared.form("SELECT 1").name != prepared.form("SELECT 2").name
    assert prepared.form("SELECT 1").execute == f"EXECUTE {prepared.form('SELECT 1').name}"


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    """One pooled connection, so that what it holds can be read back."""
    e = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://", 1),
                         pool_size=1, max_overflow=0)
    yield e
    e.dispose()


def _on_the_connection(engine: sa.Engine, sql: str) -> list[tuple[object, ...]]:
    """``sql`` on the engine's one connection, past sweeper's steps."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(sql)
        rows = list(cursor.fetchall()) if cursor.description is not None else []
        raw.commit()
        return rows
    finally:
        raw.close()


def _held(engine: sa.Engine) -> list[str]:
    """The statements prepared on the engine's one connection."""
    return sorted(str(r[0]) for r in _on_the_connection(
        engine, "SELECT name FROM pg_prepared_statements"))


def _name(text: str, engine: sa.Engine) -> str:
    return prepared.form(str(sa.text(text).compile(dialect=engine.dialect))).name


def test_a_step_is_prepared_once_and_gives_the_texts_result(engine: sa.Engine) -> None:
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda *a: statements.append(a[2]))
    for a in (1, 2, 3):
        rows, _ = oneshot.run(engine, DOUBLE, {"a": a, "b": 10})
        assert rows == [(2 * a + 10, "100%")]
    assert _name(DOUBLE, engine) in _held(engine)
    # Listeners see the statement's text, once a call, not its PREPARE or EXECUTE.
    assert statements[:3] == [str(sa.text(DOUBLE).compile(dialect=engine.dialect))] * 3


def test_a_new_connection_prepares_again(engine: sa.Engine) -> None:
    oneshot.run(engine, DOUBLE, {"a": 1, "b": 1})
    raw = engine.raw_connection()
    raw.invalidate()  # the server connection is gone; the pool opens another
    raw.close()
    rows, _ = oneshot.run(engine, DOUBLE, {"a": 1, "b": 1})
    assert rows == [(3, "100%")]
    assert _name(DOUBLE, engine) in _held(engine)


def test_a_parameter_of_unknown_type_runs_as_text(engine: sa.Engine) -> None:
    text = "SELECT :x IS NULL AS unset"  # PostgreSQL cannot type $1 here: PREPARE fails
    assert oneshot.run(engine, text, {"x": None})[0] == [(True,)]
    assert oneshot.run(engine, text, {"x": "set"})[0] == [(False,)]
    assert _name(text, engine) not in _held(engine)
    assert prepared.enabled(engine)  # the other statements still are


def test_a_lost_name_falls_back_to_text_for_the_engine(engine: sa.Engine) -> None:
    oneshot.run(engine, DOUBLE, {"a": 1, "b": 1})
    # What a pooler in transaction mode does: the next EXECUTE reaches a server connection
    # that never saw the PREPARE.
    _on_the_connection(engine, "DEALLOCATE ALL")
    assert _held(engine) == []
    assert oneshot.run(engine, DOUBLE, {"a": 2, "b": 1})[0] == [(5, "100%")]
    assert not prepared.enabled(engine)
    oneshot.run(engine, DOUBLE, {"a": 2, "b": 1})
    assert _held(engine) == []


def test_the_switch_turns_it_off(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPER_PG_PREPARE", "0")
    assert oneshot.run(engine, DOUBLE, {"a": 1, "b": 2})[0] == [(4, "100%")]
    assert _held(engine) == []
    monkeypatch.delenv("SWEEPER_PG_PREPARE")
    oneshot.run(engine, DOUBLE, {"a": 1, "b": 2})
    assert _held(engine) == [_name(DOUBLE, engine)]


def test_a_statements_own_error_is_raised_as_before(engine: sa.Engine) -> None:
    text = "SELECT 1 / :d AS q"
    assert oneshot.run(engine, text, {"d": 1})[0] == [(1,)]
    with pytest.raises(sa.exc.DataError, match="division by zero"):
        oneshot.run(engine, text, {"d": 0})
    assert prepared.enabled(engine)
    assert oneshot.run(engine, text, {"d": 1})[0] == [(1,)]


def test_a_fault_meant_for_a_step_lands_on_its_execute(pg_url: str,
                                                      pg_admin: sa.Engine) -> None:
    """The fault proxy (tests/support/faultproxy.py) matches a prepared step's EXECUTE as the
    statement it runs, its parameters in place: faults armed at a step's text (the fault
    matrix, the chaos run) still hit that step, not its one PREPARE."""
    from tests.support.faultproxy import FaultProxy

    with FaultProxy.for_url(pg_url, pg_admin) as proxy:
        e = sa.create_engine(proxy.url(pg_url).replace("postgresql://",
                                                       "postgresql+psycopg2://", 1))
        try:
            oneshot.run(e, DOUBLE, {"a": 1, "b": 2})  # PREPARE, then EXECUTE
            proxy.arm("stall", r"CAST\(7 AS integer\) \+ 'eight'", step="double", delay=0.01)
            with pytest.raises(sa.exc.DataError):  # 'eight' is no integer: it did run
                oneshot.run(e, DOUBLE, {"a": 7, "b": "eight"})
            assert [(i.kind, i.step) for i in proxy.injected] == [("stall", "double")]
            assert "EXECUTE" not in proxy.injected[0].statement
        finally:
            e.dispose()
