"""The local cluster's images (tools/cluster/images.sh), read from the docker archives it wrote
(``.cluster/images``, or ``$CLUSTER_IMAGES``) without unpacking or running them: what the
kubelet will run is what this repository says. The trial runner holds the working tree's code
and runs as the restricted Pod Security Standard wants; the PostgreSQL image keeps the contract
manifests/postgres.yaml relies on; the pause image is the static pause binary on scratch.

Cheap (a few seconds: tar headers, a few small files). The archives are built by
``make cluster-images``; without them these tests skip, and fail under CI=true."""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import struct
import subprocess
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import IO, Any

import pytest
import yaml

from sweeper.spec.k8s_model import KubernetesSpec

REPO = Path(__file__).resolve().parents[2]
IMAGES = Path(os.environ.get("CLUSTER_IMAGES", REPO / ".cluster" / "images"))


def _version() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg["metadata"]["version"]


def _read(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    f = tar.extractfile(name)
    assert f is not None, f"{name} is not a file"
    return f


class Archive:
    """A docker archive as ``buildah push IMAGE docker-archive:FILE:NAME`` writes it:
    manifest.json, the image's config, one tar per layer (bottom first)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with tarfile.open(path) as tar:
            self.manifest: dict[str, Any] = json.load(_read(tar, "manifest.json"))[0]
            self.image: dict[str, Any] = json.load(_read(tar, self.manifest["Config"]))

    @property
    def config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = self.image["config"]
        return cfg

    @property
    def env(self) -> dict[str, str]:
        return dict(e.split("=", 1) for e in self.config.get("Env") or [])

    def names(self, layer: int) -> list[str]:
        """The paths in one layer (0: the bottom one), without a leading ``./`` or ``/``."""
        with tarfile.open(self.path) as outer, \
                tarfile.open(fileobj=_read(outer, self.manifest["Layers"][layer])) as inner:
            return [_norm(m.name) for m in inner]

    def files(self, paths: Iterable[str]) -> dict[str, bytes | None]:
        """The contents of these paths as the stacked layers have them (an upper layer wins;
        None: deleted by a whiteout or a directory, not a file); absent paths are left out.
        Opaque directory whiteouts are not looked at (these images' layers have none)."""
        todo, found = set(paths), {}
        with tarfile.open(self.path) as outer:
            for layer in reversed(self.manifest["Layers"]):
                with tarfile.open(fileobj=_read(outer, layer)) as inner:
                    for m in inner:
                        p = PurePosixPath(_norm(m.name))
                        whiteout = p.name.startswith(".wh.")
                        name = str(p.parent / p.name[len(".wh."):]) if whiteout else str(p)
                        if name not in todo:
                            continue
                        todo.discard(name)
                        f = None if whiteout or not m.isfile() else inner.extractfile(m)
                        found[name] = f.read() if f is not None else None
                if not todo:
                    break
        return found


def _norm(name: str) -> str:
    return str(PurePosixPath("/", name))[1:]


def _archive(name: str) -> Archive:
    path = IMAGES / f"{name}.tar"
    if not path.is_file():
        msg = f"{path} is not built (make cluster-images, or tools/cluster/images.sh {name})"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return Archive(path)


def _passwd(archive: Archive) -> dict[str, list[str]]:
    text = archive.files(["etc/passwd"]).get("etc/passwd")
    assert text, "the image has no /etc/passwd"
    return {line.split(":")[0]: line.split(":") for line in text.decode().splitlines() if line}


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def test_the_trial_runner_is_the_specs_default_image_run_as_restricted_pss_wants() -> None:
    img = _archive("trial-runner")
    # The name a pod spec's bare `sweeper-trial-runner:0.1.0` (the spec's default) resolves to.
    assert img.manifest["RepoTags"] == [f"docker.io/library/{KubernetesSpec().image}"]
    assert KubernetesSpec().image == f"sweeper-trial-runner:{_version()}"
    assert img.config["User"] == "10001:10001"
    assert img.config["Entrypoint"] == ["python", "-m", "trial_runner"]
    assert img.config.get("Cmd") is None
    assert img.config["WorkingDir"] == "/app"
    assert img.env["HOME"] == "/home/sweeper"
    sweeper = _passwd(img)["sweeper"]
    assert sweeper[2:4] == ["10001", "10001"] and sweeper[5] == "/home/sweeper"


def test_the_trial_runner_holds_the_working_trees_code_and_no_torch() -> None:
    img = _archive("trial-runner")
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard",
         "sweeper", "trial_runner"], capture_output=True, text=True, check=True).stdout.split()
    tree = {f: (REPO / f).read_bytes() for f in listed if (REPO / f).is_file()}
    assert "sweeper/protocol.py" in tree
    # /app/ has the build context's copy; pip installed it into Debian's python (dist-packages).
    site = "usr/local/lib/python3.11/dist-packages"
    installed = {f"{site}/{f}": tree[f] for f in ("sweeper/protocol.py", "trial_runner/main.py")}
    torch, optuna = f"{site}/torch/__init__.py", f"{site}/optuna/__init__.py"
    found = img.files([f"app/{f}" for f in tree] + list(installed) + [torch, optuna])
    stale = sorted(f for f, data in tree.items() if _sha(found.get(f"app/{f}")) != _sha(data))
    stale += sorted(f for f, data in installed.items() if _sha(found.get(f)) != _sha(data))
    assert not stale, (f"the trial-runner image is older than the working tree ({len(stale)} "
                       f"files differ, e.g. {stale[:3]}); rebuild: tools/cluster/images.sh")
    # WITH_TORCH=0: the tests run torch on the host, never in these pods.
    assert optuna in found and torch not in found


def _postgres_manifest() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = list(yaml.safe_load_all((REPO / "manifests" / "postgres.yaml").read_text()))
    sts = next(d for d in docs if d and d["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def test_the_postgres_image_keeps_the_contract_of_manifests_postgres_yaml() -> None:
    img = _archive("postgres")
    pod, container = _postgres_manifest()
    assert img.manifest["RepoTags"] == ["docker.io/library/sweeper-postgres:15-bookworm"]
    # The uid and gid the manifest runs it as own the data, as in the official image.
    uid = str(container["securityContext"]["runAsUser"])
    assert uid == str(pod["securityContext"]["runAsUser"]) == str(pod["securityContext"]["fsGroup"])
    assert img.config["User"] == f"{uid}:{uid}"
    assert _passwd(img)["postgres"][2:4] == [uid, uid]
    # Its env: PGDATA in the data volume, the user, database and password the entrypoint reads.
    env = {e["name"]: e for e in container["env"]}
    assert set(env) == {"POSTGRES_USER", "POSTGRES_DB", "POSTGRES_PASSWORD", "PGDATA"}
    data = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "data")
    assert env["PGDATA"]["value"].startswith(data + "/")
    assert img.env["PGDATA"] == data
    ports = [p["containerPort"] for p in container["ports"]]
    assert ports == [5432] and set(img.config["ExposedPorts"]) == {"5432/tcp"}
    # The args are postgres options: the entrypoint hands what starts with "-" to postgres.
    assert container["args"][0].startswith("-")
    assert img.config["Entrypoint"] == ["docker-entrypoint.sh"]
    assert img.config["Cmd"] == ["postgres"]
    assert img.config["StopSignal"] == "SIGINT"
    # The probes' command and the entrypoint are on the image's PATH.
    probe = container["readinessProbe"]["exec"]["command"][0]
    path = img.env["PATH"].split(":")
    assert path[0] == "/usr/lib/postgresql/15/bin"
    wanted = [f"{d}/{b}".lstrip("/") for d in path for b in (probe, "postgres", "initdb")]
    entry = "usr/local/bin/docker-entrypoint.sh"
    found = img.files([*wanted, entry])
    for binary in (probe, "postgres", "initdb"):
        assert f"usr/lib/postgresql/15/bin/{binary}" in found, binary
    ours = (REPO / "tools" / "cluster" / "images" / "postgres-entrypoint.sh").read_bytes()
    assert _sha(found[entry]) == _sha(ours), "the image's entrypoint is not the repository's"


def test_the_pause_image_is_a_static_pause_binary_on_scratch() -> None:
    img = _archive("pause")
    assert img.manifest["RepoTags"] == ["registry.k8s.io/pause:3.10"]
    assert img.config["Entrypoint"] == ["/pause"]
    assert img.config["User"] == "65535:65535"
    assert len(img.manifest["Layers"]) == 1
    assert [n for n in img.names(0) if n] == ["pause"]
    elf = img.files(["pause"])["pause"]
    assert elf is not None and elf[:4] == b"\x7fELF" and elf[4] == 2  # ELF64
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    types = [struct.unpack_from("<I", elf, phoff + i * phentsize)[0] for i in range(phnum)]
    assert 3 not in types, "pause has a PT_INTERP: it is dynamically linked"


def test_the_base_image_is_one_layer_without_apt_lists() -> None:
    img = _archive("base")
    assert img.manifest["RepoTags"] == ["docker.io/library/sweeper-debian-base:bookworm"]
    assert len(img.manifest["Layers"]) == 1
    names = set(img.names(0))
    assert {"usr/bin/python3", "usr/bin/python", "usr/lib/python3/dist-packages/pip/__init__.py",
            "usr/sbin/policy-rc.d", "etc/ssl/certs/ca-certificates.crt"} <= names
    lists = names & {n for n in names if n.startswith("var/lib/apt/lists/")}
    assert lists <= {"var/lib/apt/lists/partial", "var/lib/apt/lists/lock"}, lists


def test_the_katib_stand_in_image_has_python_and_the_script_but_no_sweeper() -> None:
    """What the test of command trials in any image runs the command in: the Debian base's
    python3 and, at the Katib example's path, the stand-in (tools/cluster/images/katib-mnist);
    neither sweeper nor its dependencies."""
    img = _archive("katib-mnist")
    assert img.manifest["RepoTags"] == ["docker.io/library/sweeper-katib-mnist:local"]
    script = REPO / "tools" / "cluster" / "images" / "katib-mnist" / "mnist.py"
    site = "usr/local/lib/python3.11/dist-packages"
    found = img.files(["opt/pytorch-mnist/mnist.py", "usr/bin/python3", "bin/sh", "usr/bin/sleep",
                       f"{site}/sweeper/__init__.py", f"{site}/optuna/__init__.py",
                       "app/trial_runner/__init__.py"])
    assert found.get("opt/pytorch-mnist/mnist.py") == script.read_bytes()
    assert "usr/bin/python3" in found and "usr/bin/sleep" in found
    assert not {f"{site}/sweeper/__init__.py", f"{site}/optuna/__init__.py",
                "app/trial_runner/__init__.py"} & set(found)
    assert img.config["WorkingDir"] == "/opt/pytorch-mnist"
