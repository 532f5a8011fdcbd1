"""All SQL against Optuna's tables lives in one package, ``sweeper.study.sql`` (issue 26):
every other module of ``sweeper`` and ``trial_runner`` holds the index store's interface and
writes no statement that names one of Optuna's tables.

The check reads every string literal of the code (f-strings' literal parts included, not
docstrings) and looks for a statement's verb or clause before one of the tables of Optuna's
RDB schema, as the models name them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from optuna.storages._rdb import models

ROOT = Path(__file__).resolve().parents[2]
SQL_PACKAGE = ROOT / "sweeper" / "study" / "sql"
TABLES = sorted({m.__table__.name for m in vars(models).values()
                 if isinstance(m, type) and hasattr(m, "__table__")})
STATEMENT = re.compile(
    r"\b(FROM|INTO|UPDATE|JOIN|TABLE|EXISTS)\s+(" + "|".join(map(re.escape, TABLES)) + r")\b",
    re.IGNORECASE)


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def _offenders(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for line, text in _strings(ast.parse(path.read_text(), str(path))):
            match = STATEMENT.search(text)
            if match:
                found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)}")
    return found


def test_the_tables_are_optunas_schema() -> None:
    assert {"trials", "studies", "trial_values", "trial_params", "trial_user_attributes",
            "study_user_attributes", "trial_heartbeats"} <= set(TABLES)


def test_no_sql_against_optunas_tables_outside_the_sql_package() -> None:
    code = [p for package in ("sweeper", "trial_runner") for p in (ROOT / package).rglob("*.py")
            if SQL_PACKAGE not in p.parents and "__pycache__" not in p.parts]
    assert _offenders(code) == []


@pytest.mark.parametrize("sql", [
    "SELECT state, COUNT(*) FROM trials WHERE study_id = :s",
    "INSERT INTO trial_user_attributes (trial_id, key) VALUES (:t, :k)",
    "update study_user_attributes SET value_json = :v",
    "SELECT 1 FROM x JOIN trial_values v ON v.trial_id = x.id",
])
def test_the_check_sees_a_statement_in_a_module(tmp_path: Path, sql: str) -> None:
    """The check is not blind: a statement in an ordinary or an f-string is found, a
    docstring's mention is not."""
    module = tmp_path / "m.py"
    module.write_text(f'"""Mentions {sql} in prose."""\nQ = f"{sql}{{1}}"\n')
    assert len(_offenders_in(module)) == 1


def _offenders_in(path: Path) -> list[str]:
    return [f"{line}: {m.group(0)}" for line, text in _strings(ast.parse(path.read_text()))
            if (m := STATEMENT.search(text))]


def test_the_sql_package_does_hold_the_statements() -> None:
    """Where the statements went: the package itself has them (the check above would pass
    vacuously if they had vanished from the code base)."""
    assert len(_offenders(sorted(SQL_PACKAGE.glob("*.py")))) >= 40
