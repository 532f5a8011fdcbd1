"""The rendered pod under the restricted Pod Security Standard, as a real node runs it: the
namespace of manifests/ enforces "restricted", its admission lets the Job's pods in, and inside
the container the trial sees what the pod asks for: the image's uid 10001, a read-only root
filesystem with HOME and temporary files on the scratch emptyDir, no capabilities, no privilege
escalation (no_new_privs), the runtime's default seccomp filter, and ``/dev/shm`` of the size
the spec's ``kubernetes.shm_size`` says."""

from __future__ import annotations

import pytest

from tests.support.k8s_cluster import NS, Cluster

pytestmark = pytest.mark.postgres

NAME = "k8s-restricted"
SPEC = f"""
name: {NAME}
method: grid
objective: {{metric: loss, direction: minimize}}
trial:
  entrypoint: tests.support.k8s_objectives:inspect_pod
parameters:
  x: {{type: int, values: [0]}}
kubernetes:
  shm_size: 96Mi
"""


def test_the_restricted_profile_admits_the_pod_and_the_container_is_locked_down(
        cluster: Cluster) -> None:
    labels = cluster.core().read_namespace(NS).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    result = cluster.sweeper("run", cluster.spec(SPEC), "--backend", "kubernetes")
    assert result.exit_code == 0, result.output
    assert "violates PodSecurity" not in result.output
    ((trial,),) = cluster.trials(NAME).values()
    pod = trial.user_attrs["pod"]
    assert (pod["uid"], pod["gid"]) == (10001, 10001)
    assert pod["root_writable"] is False
    assert pod["home"] == pod["tmp"] == "/scratch"  # the emptyDir, not the root filesystem
    assert int(pod["cap_eff"], 16) == 0, pod  # every capability dropped
    assert pod["no_new_privs"] == "1"  # allowPrivilegeEscalation: false
    assert pod["seccomp"] == "2"  # a filter: RuntimeDefault
    assert pod["shm_bytes"] == 96 * 2**20
