"""GPU detection and one CUDA_VISIBLE_DEVICES slot per local worker
(sweeper.backends.local.gpus)."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from sweeper.backends.local.gpus import detect_gpus, gpu_slots
from sweeper.errors import BackendError

# --------------------------------------------------------------------------- detect_gpus


@pytest.mark.parametrize(("visible", "expected"), [
    ("0", ["0"]),
    ("0,1,3", ["0", "1", "3"]),
    ("GPU-5f1c,GPU-9a2b", ["GPU-5f1c", "GPU-9a2b"]),  # UUIDs are passed through as they are
    ("-1", []),  # the CUDA idiom for "hide every GPU"
    ("", []),
    ("0,,2,", ["0", "2"]),
    ("0,-1,1", ["0"]),  # CUDA ignores every id after an invalid one
])
def test_detect_gpus_reads_cuda_visible_devices(visible: str, expected: list[str],
                                                monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    # An nvidia-smi that lists other GPUs: CUDA_VISIBLE_DEVICES, when set, must win over it.
    _fake_nvidia_smi(tmp_path, "echo 0; echo 1; echo 2; echo 3; echo 4")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus({"CUDA_VISIBLE_DEVICES": visible}) == expected


def test_detect_gpus_without_nvidia_smi_is_empty(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nvidia-smi
    assert detect_gpus({}) == []


def test_detect_gpus_asks_nvidia_smi_when_the_variable_is_unset(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_nvidia_smi(tmp_path, 'printf "0\\n1\\n\\n"')
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert detect_gpus({}) == ["0", "1"]
    assert detect_gpus() == ["0", "1"]  # None: the process environment


def test_detect_gpus_with_a_failing_nvidia_smi_is_empty(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    # What nvidia-smi does on a machine whose driver is not loaded.
    _fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus({}) == []


def _fake_nvidia_smi(directory: Path, body: str) -> None:
    exe = directory / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


# --------------------------------------------------------------------------- gpu_slots


def test_no_gpus_leaves_every_slot_alone() -> None:
    assert gpu_slots([], per_trial=1, parallelism=3) == [None, None, None]


def test_one_gpu_per_worker() -> None:
    assert gpu_slots(["0", "1", "2"], per_trial=0, parallelism=3) == ["0", "1", "2"]
    assert gpu_slots(["0", "1", "2"], per_trial=1, parallelism=2) == ["0", "1"]


def test_several_gpus_per_trial_are_grouped_without_overlap() -> None:
    assert gpu_slots(["0", "1", "2", "3"], per_trial=2, parallelism=2) == ["0,1", "2,3"]
    # a leftover GPU that cannot make a whole group is not handed out
    assert gpu_slots(["0", "1", "2", "3", "4"], per_trial=2, parallelism=2) == ["0,1", "2,3"]


def test_more_workers_than_slots_share_gpus_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sweeper.backends.local"):
        slots = gpu_slots(["0", "1", "2"], per_trial=2, parallelism=3)
    assert slots == ["0,1", "0,1", "0,1"]
    assert "workers share GPUs" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sweeper.backends.local"):
        assert gpu_slots(["0", "1"], per_trial=1, parallelism=5) == ["0", "1", "0", "1", "0"]
    assert "parallelism 5 > 2 GPU slots" in caplog.text


def test_too_few_gpus_for_one_trial_is_an_error() -> None:
    with pytest.raises(BackendError, match="asks for 4 GPUs but only 3 are visible"):
        gpu_slots(["0", "1", "2"], per_trial=4, parallelism=1)


# --------------------------------------------------------------------------- _describe_exit
