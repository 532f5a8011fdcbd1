"""After SIGTERM the runner has the pod's termination grace period (SWEEPER_TERMINATION_GRACE_
PERIOD, rendered from kubernetes.termination_grace_period) before the kubelet's SIGKILL: even
user code that swallows the interruption cannot keep it past that deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sweeper import protocol
from sweeper.study import create_or_resume, open_storage
from tests.support.helpers import make_spec


def test_runner_exits_by_its_grace_deadline_after_sigterm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    spec = make_spec(name="grace", trial={"entrypoint": "tests.support.cluster_objectives:"
                                                        "stubborn", "fixed": {}})
    create_or_resume(open_storage(url), spec)
    env = {**os.environ, protocol.ENV_STORAGE: url, protocol.ENV_STUDY: "grace",
           protocol.ENV_JOB_ID: "0", protocol.ENV_TERMINATION_GRACE_PERIOD: "1.5",
           "MARKER_DIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "trial_runner"], env=env, cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)
    try:
        while not (tmp_path / "started").exists():
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == protocol.EXIT_SIGNAL_BASE + signal.SIGTERM, err
    assert "exiting before the grace period ends" in err
