"""`sweeper render` says when the Job would run the default image (nothing silent)."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from sweeper.cli import cli
from sweeper.spec import KubernetesSpec

REPO = Path(__file__).resolve().parents[2]
SPEC = str(REPO / "search_spaces" / "digits_tpe.yaml")


def test_render_notes_the_default_image_on_stderr_only() -> None:
    result = CliRunner().invoke(cli, ["render", SPEC])
    assert result.exit_code == 0, result.output
    assert "note: no kubernetes.image" in result.stderr
    assert KubernetesSpec().image in result.stderr
    # stdout stays pure YAML for kubectl
    job = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == KubernetesSpec().image


def test_render_with_an_image_says_nothing_extra() -> None:
    result = CliRunner().invoke(cli, ["render", SPEC, "--image", "registry.example/team:1"])
    assert result.exit_code == 0, result.output
    assert "note:" not in result.stderr
    job = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/team:1"
