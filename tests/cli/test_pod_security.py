"""`sweeper validate` and `render` warn (stderr, exit 0) about an inline nfs volume, which the
restricted Pod Security level of sweeper's namespace refuses."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from sweeper.cli import cli

REPO = Path(__file__).resolve().parents[2]
NFS = ("kubernetes.volumes=[{name: shared, mount_path: /shared, "
       "nfs: {server: nfs.internal, path: /export/ml}}]")
PVC = "kubernetes.volumes=[{name: shared, mount_path: /shared, pvc: ml-shared}]"


def _spec(tmp_path: Path) -> str:
    spec = tmp_path / "spec.yaml"
    spec.write_text((REPO / "search_spaces" / "digits_tpe.yaml").read_text())
    return str(spec)


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "nfs" in line]


def test_validate_warns_once_and_succeeds(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", _spec(tmp_path), "--set", NFS])
    assert result.exit_code == 0, result.output
    [line] = _warnings(result.stderr)
    assert line.startswith("warning: ") and "--set kubernetes.volumes[0].nfs:" in line
    assert 'Pod Security "restricted"' in line and "PersistentVolumeClaim" in line
    assert result.stdout.startswith("ok: digits-tpe")


def test_validate_json_lists_the_warning(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", _spec(tmp_path), "--set", NFS,
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    [warning] = json.loads(result.stdout)["warnings"]
    assert "restricted" in warning


def test_render_warns_and_still_prints_the_objects(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["render", _spec(tmp_path), "--set", NFS])
    assert result.exit_code == 0, result.output
    assert len(_warnings(result.stderr)) == 1
    job = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Job")
    assert {"name": "shared", "nfs": {"server": "nfs.internal", "path": "/export/ml"}} in \
        job["spec"]["template"]["spec"]["volumes"]


def test_a_pvc_draws_no_warning(tmp_path: Path) -> None:
    for command in ("validate", "render"):
        result = CliRunner().invoke(cli, [command, _spec(tmp_path), "--set", PVC])
        assert result.exit_code == 0, result.output
        assert _warnings(result.stderr) == [], command
