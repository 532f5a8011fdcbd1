"""An inline nfs volume is a valid spec that sweeper's own namespace refuses (Pod Security
"restricted"): one warning line naming the file, line and field; a PVC draws none."""

from __future__ import annotations

from pathlib import Path

from sweeper.spec import load_spec
from sweeper.spec.pod_security import INLINE_NFS, pod_security_warnings

SPEC = """\
name: nfs-demo
method: random
objective: {metric: loss, direction: minimize}
trials: 2
trial: {entrypoint: "train:main"}
parameters:
  lr: {type: float, low: 0.001, high: 0.1}
kubernetes:
  volumes:
    - {name: data, mount_path: /data, pvc: datasets, read_only: true}
    - name: shared
      mount_path: /shared
      nfs: {server: nfs.internal, path: /export/ml}
  checkpoint_volume: shared
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_an_inline_nfs_volume_is_one_warning_with_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, SPEC)
    [warning] = pod_security_warnings(load_spec(path))
    assert warning == f"{path}:13: kubernetes.volumes[1].nfs: {INLINE_NFS}"
    assert "restricted" in warning and "PersistentVolumeClaim" in warning
    assert "\n" not in warning


def test_a_pvc_volume_draws_no_warning(tmp_path: Path) -> None:
    text = SPEC.replace("      nfs: {server: nfs.internal, path: /export/ml}\n",
                        "      pvc: ml-shared\n")
    assert pod_security_warnings(load_spec(_write(tmp_path, text))) == []


def test_an_nfs_volume_in_the_pod_template_is_named_too(tmp_path: Path) -> None:
    text = SPEC.split("kubernetes:\n")[0] + """\
kubernetes:
  pod_template:
    spec:
      volumes:
        - {name: extra, nfs: {server: nfs.internal, path: /export/x}}
"""
    [warning] = pod_security_warnings(load_spec(_write(tmp_path, text)))
    assert "kubernetes.pod_template.spec.volumes[0].nfs:" in warning


def test_a_volume_from_set_is_named_by_its_set(tmp_path: Path) -> None:
    text = SPEC.split("kubernetes:\n")[0]
    sets = ("kubernetes.volumes=[{name: s, mount_path: /s, nfs: {server: h, path: /e}}]",)
    path = _write(tmp_path, text)
    [warning] = pod_security_warnings(load_spec(path, sets), sets)
    assert warning.startswith(f"{path}: --set kubernetes.volumes[0].nfs: ")
