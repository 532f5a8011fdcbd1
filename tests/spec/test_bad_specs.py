"""Every bad input is one clear line and exit code 2, through the real CLI, with nothing
written to storage.

The corpus is tests/data/bad_specs/*.yaml: one problem per file, and a header saying what
sweeper must answer::

    # what is wrong, in words
    # expect: trials: 500 trials exceeds the grid size 4
    # line: 7

``expect`` is ``FIELD: message`` (just the message where the problem has no field, such as
a YAML syntax error); the error line must start with ``error: PATH:LINE: `` followed by it.
Without a ``line`` header the error must name no line (``error: PATH: ...``). Lines count
from the top of the file, header included.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from sweeper.cli import cli
from sweeper.errors import SpecError
from sweeper.spec import load_spec
from sweeper.study.urls import driver_url
from tests.support.helpers import QUADRATIC

REPO = Path(__file__).resolve().parents[2]
BAD_DIR = REPO / "tests" / "data" / "bad_specs"
BAD = sorted(BAD_DIR.glob("*.yaml"))
PASSWORD = "s3cret-pw"


@dataclass(frozen=True)
class Expected:
    message: str
    line: int | None


def expected(path: Path) -> Expected:
    """Read the ``# expect:`` / ``# line:`` header of a corpus file."""
    message, line = None, None
    for text in path.read_text(encoding="utf-8").splitlines():
        if not text.startswith("#"):
            break
        if m := re.match(r"#\s*expect:\s*(.+?)\s*$", text):
            message = m.group(1)
        elif m := re.match(r"#\s*line:\s*(\d+)\s*$", text):
            line = int(m.group(1))
    assert message, f"{path.name}: no '# expect:' header"
    return Expected(message, line)


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def assert_one_error_line(result: Result) -> str:
    """Exit code 2, exactly one output line, `error: ...`, and no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def test_the_corpus_is_big_and_well_formed() -> None:
    assert len(BAD) >= 45
    for path in BAD:
        exp = expected(path)
        if exp.line is not None:
            n_lines = len(path.read_text(encoding="utf-8").splitlines())
            assert 1 <= exp.line <= n_lines, f"{path.name}: line {exp.line} is past the end"


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_is_one_clear_line(path: Path, command: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The repository root is the working directory, so tests.data.* entrypoints import.
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    rel = path.relative_to(REPO).as_posix()
    db, logs = tmp_path / "x.db", tmp_path / "logs"
    if command == "validate":
        args = ["validate", rel]
    else:
        args = ["run", rel, "--storage", f"sqlite:///{db}", "--log-dir", str(logs)]

    line = assert_one_error_line(invoke(args))

    exp = expected(path)
    where = f"error: {rel}:{exp.line}: " if exp.line is not None else f"error: {rel}: "
    assert line.startswith(where + exp.message), f"\n got: {line}\nwant: {where}{exp.message}"
    assert not db.exists(), "a bad spec must not create the storage"
    assert not logs.exists()


def test_library_raises_the_same_spec_error() -> None:
    """load_spec (no imports) gives SpecError with the same file, line and text."""
    for path in BAD:
        exp = expected(path)
        if exp.message.startswith("trial.entrypoint: ") and exp.line is None:
            continue  # import problems are found by the CLI, which imports the entrypoint
        with pytest.raises(SpecError) as info:
            load_spec(path)
        e = info.value
        assert e.line == exp.line, path.name
        rendered = str(e)
        assert rendered.startswith(f"{path}{'' if e.line is None else f':{e.line}'}: ")
        assert exp.message in rendered, path.name


def test_alias_bomb_is_rejected_quickly() -> None:
    start = time.monotonic()
    with pytest.raises(SpecError, match="too large"):
        load_spec(BAD_DIR / "billion_laughs.yaml")
    assert time.monotonic() - start < 2.0


def test_python_tags_never_run_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec is loaded safely: a !!python/object/apply tag is refused, never executed."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    spec = tmp_path / "evil.yaml"
    spec.write_text(
        "name: !!python/object/apply:os.system ['touch pwned']\nmethod: grid\n"
        "objective: {metric: loss, direction: minimize}\n"
        f"trial: {{entrypoint: '{QUADRATIC}'}}\n"
        "parameters: {x: !!python/object/new:subprocess.Popen [[touch, pwned]]}\n")
    for args in (["validate", str(spec)], ["run", str(spec), "--storage",
                                           f"sqlite:///{tmp_path / 'x.db'}"]):
        line = assert_one_error_line(invoke(args))
        assert "YAML tag !!python/object/apply:os.system is not allowed" in line
    assert not marker.exists()
    assert not (tmp_path / "x.db").exists()


def test_no_unsafe_yaml_loading_anywhere() -> None:
    """Only safe loading, in every module that ships: no yaml.load with a full or unsafe
    Loader, no unsafe_load / full_load."""
    unsafe = re.compile(r"yaml\.(unsafe_load|full_load|load_all|load)\s*\(|"
                        r"Loader\s*=\s*yaml\.(Loader|FullLoader|UnsafeLoader|CLoader)\b|"
                        r"\b(UnsafeLoader|FullLoader)\b")
    offenders = []
    for pkg in ("sweeper", "trial_runner"):
        for py in sorted((REPO / pkg).rglob("*.py")):
            for i, text in enumerate(py.read_text(encoding="utf-8").splitlines(), 1):
                if unsafe.search(text):
                    offenders.append(f"{py.relative_to(REPO)}:{i}: {text.strip()}")
    assert not offenders, "\n".join(offenders)


# --------------------------------------------------------------------------- storage problems


def _tiny_spec(path: Path, high: int = 1) -> Path:
    path.write_text(
        "name: tiny-sweep\nmethod: grid\nobjective: {metric: loss, direction: minimize}\n"
        "trials: 2\nparallelism: 2\n"
        f"trial:\n  entrypoint: {QUADRATIC}\n  fixed: {{epochs: 1}}\n  retries: 0\n"
        f"parameters:\n  x: {{type: int, low: 0, high: {high}}}\n")
    return path


@pytest.mark.parametrize("verbose", [[], ["-vv"]])
def test_unreachable_postgres_is_one_line_without_password(tmp_path: Path, verbose: list[str],
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A server that refuses connections may be restarting: the commands wait for it
    (``--storage-wait``), then end with exit 75 (not 2: the input may be right) and one error
    line; the password is in no line, also while waiting and with -vv."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    url = f"postgresql://u:{PASSWORD}@127.0.0.1:1/db"  # nothing listens on port 1
    spec = _tiny_spec(tmp_path / "tiny.yaml")
    for args in (["run", str(spec), "--storage", url], ["status", "tiny-sweep", "--storage", url],
                 ["best", "tiny-sweep", "--storage", url]):
        result = invoke([*verbose, "--storage-wait", "1", *args])
        assert PASSWORD not in result.output, result.output
        assert result.exit_code == 75, result.output
        assert "Traceback" not in result.output
        if verbose:
            continue
        errors = [x for x in result.output.splitlines() if x.startswith("error: ")]
        assert len(errors) == 1, result.output
        assert "during opening postgresql://u:***@127.0.0.1:1/db" in errors[0], errors[0]
    assert not (tmp_path / ".sweeper").exists()


@pytest.mark.postgres
def test_changed_spec_under_the_same_name_is_refused(pg_url: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SWEEPER_STORAGE", raising=False)
    spec = _tiny_spec(tmp_path / "tiny.yaml", high=1)
    logs = str(tmp_path / "logs")
    first = invoke(["run", str(spec), "--storage", pg_url, "--log-dir", logs])
    assert first.exit_code == 0, first.output

    engine = sa.create_engine(driver_url(pg_url))

    def snapshot() -> tuple[int, list[tuple[str, str]]]:
        with engine.connect() as conn:
            n = conn.execute(sa.text("SELECT COUNT(*) FROM trials")).scalar_one()
            attrs = conn.execute(sa.text("SELECT key, value_json FROM study_user_attributes "
                                         "ORDER BY key")).all()
        return n, [tuple(a) for a in attrs]

    try:
        before = snapshot()
        assert before[0] == 2
        _tiny_spec(spec, high=2)  # a different range under the same name
        line = assert_one_error_line(
            invoke(["run", str(spec), "--storage", pg_url, "--log-dir", logs]))
        assert snapshot() == before, "nothing may be written for a changed spec"
    finally:
        engine.dispose()
    assert line.startswith(f"error: {spec}: parameters: a different sweep named 'tiny-sweep' "
                           "already exists in this storage (parameters differ)"), line
