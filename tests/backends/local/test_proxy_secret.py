"""The local run's proxy secret (issue 28): `sweeper run --proxy` makes a random secret per run
and hands it to its workers through their environment only: a worker has it and its argv does
not; the CLI's output and the workers' logs never show it; a command trial's program (the
user's own process) does not inherit it; a second run gets another secret; and the secret
leaves this process's environment with the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.protocol import ENV_PROXY_TOKEN

OBJECTIVE = '''
import os


def probe(ctx):
    secret = os.environ.get("SWEEPER_PROXY_TOKEN", "")
    with open("/proc/self/cmdline", "rb") as f:
        argv = f.read().decode(errors="replace")
    ctx.set("has_secret", bool(secret))
    ctx.set("secret_in_argv", bool(secret) and secret in argv)
    return float(ctx.params["x"])
'''


def _spec(tmp_path: Path, name: str, trial: dict[str, object]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "method": "grid", "objective": {"metric": "loss", "direction": "minimize"},
        "parallelism": 2, "trial": trial,
        "parameters": {"x": {"type": "float", "values": [0.0, 1.0, 2.0]}}}))
    return path


def test_the_secret_reaches_the_workers_environment_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna

    from sweeper.proxy import server

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_PROXY_TOKEN, raising=False)
    made: list[str] = []  # every secret a run makes, as its proxy accepts it

    def recorded() -> str:
        made.append(new_secret())
        return made[-1]
    new_secret = server.new_local_secret
    monkeypatch.setattr(server, "new_local_secret", recorded)
    (tmp_path / "probe_objective.py").write_text(OBJECTIVE)
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = _spec(tmp_path, "secret-probe", {"entrypoint": "probe_objective:probe"})
    result = CliRunner().invoke(cli, ["run", str(spec), "--storage", url, "--proxy",
                                      "--log-dir", str(tmp_path / "logs")])
    assert result.exit_code == 0, result.output
    import os

    (secret,) = made
    assert len(secret) >= 40
    assert ENV_PROXY_TOKEN not in os.environ  # gone with the run
    trials = optuna.load_study(study_name="secret-probe", storage=url).trials
    assert [t.user_attrs["has_secret"] for t in trials] == [True] * 3
    assert [t.user_attrs["secret_in_argv"] for t in trials] == [False] * 3
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*")
                   if p.is_file())
    assert secret not in result.output and secret not in logs

    # A command trial: the user's program gets neither the secret nor the storage URL.
    command = _spec(tmp_path, "secret-command", {
        "command": ["sh", "-c", 'env > "env-$SWEEPER_TRIAL_NUMBER.txt"; echo loss=1']})
    result = CliRunner().invoke(cli, ["run", str(command), "--storage", url, "--proxy",
                                      "--log-dir", str(tmp_path / "logs2")])
    assert result.exit_code == 0, result.output
    second = made[-1]
    assert len(made) == 2 and second != secret  # one secret per run
    assert ENV_PROXY_TOKEN not in os.environ
    envs = [p.read_text() for p in tmp_path.glob("env-*.txt")]
    assert len(envs) == 3
    assert not [e for e in envs if ENV_PROXY_TOKEN in e or second in e or "sqlite" in e]
