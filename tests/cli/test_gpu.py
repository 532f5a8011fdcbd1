"""A GPU asked for and not present: `run` on the local backend says so in one line and stops
(exit 2, nothing written) unless --allow-cpu; `resources.gpu: 0` asks nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sweeper.backends.local.gpus import check_gpus
from sweeper.cli import cli
from sweeper.errors import SpecError
from sweeper.study import load_sweep, open_storage
from tests.support.helpers import make_spec, write_spec


def sweeper(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES set and empty: no GPU, whatever this machine has."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_check_gpus() -> None:
    gpu = make_spec(trial={"resources": {"gpu": 2}})
    assert check_gpus(gpu, allow_cpu=False, env={"CUDA_VISIBLE_DEVICES": "0"}) is None
    with pytest.raises(SpecError, match=r"trial\.resources\.gpu: asks for 2 GPU\(s\) per "
                                        r"trial, but no GPU is visible here"):
        check_gpus(gpu, allow_cpu=False, env={"CUDA_VISIBLE_DEVICES": ""})
    warning = check_gpus(gpu, allow_cpu=True, env={"CUDA_VISIBLE_DEVICES": "-1"})
    assert warning is not None and "running on the CPU (--allow-cpu)" in warning
    assert check_gpus(make_spec(), allow_cpu=False, env={"CUDA_VISIBLE_DEVICES": ""}) is None


def test_run_asking_for_a_missing_gpu_stops_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_gpu: None) -> None:
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path, name="wants-gpu", trial={"resources": {"gpu": 1}})
    url = f"sqlite:///{tmp_path / 'gpu.db'}"
    result = sweeper("run", str(spec), "--storage", url)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {spec}: trial.resources.gpu: asks for 1 GPU(s) per trial, but no GPU is "
        "visible here (CUDA_VISIBLE_DEVICES, nvidia-smi); pass --allow-cpu to run on the CPU "
        "anyway, or set trial.resources.gpu: 0"]
    assert not (tmp_path / "gpu.db").exists()  # nothing written

    allowed = sweeper("run", str(spec), "--storage", url, "--allow-cpu")
    assert allowed.exit_code == 0, allowed.output
    assert "no GPU is visible; running on the CPU (--allow-cpu)" in allowed.stderr
    assert len(load_sweep(open_storage(url), "wants-gpu").study().get_trials()) == 10

    # resume asks the same of the stored spec
    again = sweeper("resume", "wants-gpu", "--storage", url)
    assert again.exit_code == 2 and "pass --allow-cpu" in again.stderr

    # gpu: 0 (--set here) asks for no GPU: no message at all
    cpu = sweeper("run", str(spec), "--storage", f"sqlite:///{tmp_path / 'cpu.db'}", "--set",
                  "trial.resources.gpu=0")
    assert cpu.exit_code == 0, cpu.output
    assert "GPU" not in cpu.stderr
