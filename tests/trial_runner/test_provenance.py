"""Code version and spec hash on every trial: what makes trials comparable across runs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest

from sweeper import __version__
from sweeper.protocol import CODE_VERSION_ATTR, SPEC_HASH_ATTR
from sweeper.study import load_sweep, open_storage
from tests.support.compare import isolate, quadratic_spec, run_sweep
from trial_runner.provenance import code_version

SHA = "0123456789abcdef0123456789abcdef01234567"


def _git(stdout: str, returncode: int = 0) -> Any:
    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert argv == ["git", "rev-parse", "HEAD"] and kwargs["timeout"] > 0
        assert kwargs["env"]["GIT_OPTIONAL_LOCKS"] == "0"
        return subprocess.CompletedProcess(argv, returncode, stdout=stdout, stderr="")

    return run


def test_env_wins_then_git_then_package_version(tmp_path: Path) -> None:
    assert code_version({"SWEEPER_CODE_VERSION": "img:1.2@sha256:ab"}, run=_git(SHA)) == \
        "img:1.2@sha256:ab"
    assert code_version({}, run=_git(SHA + "\n")) == f"git:{SHA}"
    assert code_version({}, run=_git("", 128)) == f"sweeper=={__version__}"
    assert code_version({}, run=_git("not a sha")) == f"sweeper=={__version__}"

    def missing(*a: Any, **k: Any) -> Any:
        raise FileNotFoundError("git")

    def hung(*a: Any, **k: Any) -> Any:
        raise subprocess.TimeoutExpired("git", 5)

    assert code_version({}, run=missing) == f"sweeper=={__version__}"
    assert code_version({}, run=hung) == f"sweeper=={__version__}"
    # A directory outside any repository, with the real git (if installed).
    assert code_version({"PATH": "/usr/bin:/bin"}, cwd=str(tmp_path)) == \
        f"sweeper=={__version__}"


def test_trials_carry_code_version_spec_hash_index_attempt(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           storage_url: str) -> None:
    isolate(tmp_path, monkeypatch)
    spec = quadratic_spec("prov", trials=2)
    spec["trial"]["fixed"] = {"epochs": 2}
    run_sweep(tmp_path, storage_url, spec)
    sweep = load_sweep(open_storage(storage_url), "prov")
    trials = sweep.study().get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 2
    for t in trials:
        assert t.user_attrs[CODE_VERSION_ATTR] == "test-build-1"
        assert t.user_attrs[SPEC_HASH_ATTR] == sweep.spec.spec_hash
        assert t.user_attrs["sweeper:attempt"] == 0
        assert [s for s, _ in t.user_attrs["sweeper:history"]["loss"]] == [0, 1]
        assert t.duration is not None
    assert sorted(t.user_attrs["sweeper:index"] for t in trials) == [0, 1]
    # The dashboard and Optuna's plots name the objective.
    assert sweep.study().metric_names == ["loss"]


def test_the_process_wide_code_version_follows_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Computed once per process, but a local worker forked from `sweeper run` inherits that
    process's memory with its own environment: it must not report the parent's version."""
    from trial_runner.provenance import process_code_version

    monkeypatch.setenv("SWEEPER_CODE_VERSION", "build-a")
    assert process_code_version() == "build-a"
    monkeypatch.setenv("SWEEPER_CODE_VERSION", "build-b")
    assert process_code_version() == "build-b"
