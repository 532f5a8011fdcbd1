"""The rendered pod through a storage proxy (issue 28): its bound ServiceAccount token for the
proxy's audience only, projected by the kubelet and named to the runner; the proxy's CA from
the ConfigMap the spec names; nothing of either without a proxy. Schema-valid, strictly."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sweeper.backends import manifests as m
from sweeper.errors import SpecError
from tests.backends.test_manifests import _container, _env, _spec
from tests.support.k8s_schema import validate_k8s_objects


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_the_pod_carries_its_projected_token_for_the_proxy_only() -> None:
    job = m.render_job(_spec("kubernetes: {storage_proxy: 'sweeper-storage-proxy:13000'}"))
    volumes = {v["name"]: v for v in _pod(job)["volumes"]}
    assert volumes["sweeper-proxy-token"] == {"name": "sweeper-proxy-token", "projected": {
        "sources": [{"serviceAccountToken": {"audience": "sweeper-proxy",
                                             "expirationSeconds": 600, "path": "token"}}]}}
    mounts = {v["name"]: v for v in _container(job)["volumeMounts"]}
    assert mounts["sweeper-proxy-token"] == {"name": "sweeper-proxy-token", "readOnly": True,
                                             "mountPath": "/var/run/secrets/sweeper-proxy"}
    env = _env(job)
    assert env["SWEEPER_PROXY_TOKEN_FILE"]["value"] == "/var/run/secrets/sweeper-proxy/token"
    assert "SWEEPER_PROXY_CA" not in env and "sweeper-proxy-ca" not in volumes
    assert _pod(job)["automountServiceAccountToken"] is False  # no token for the API
    assert validate_k8s_objects([job]) == []


def test_the_proxys_ca_comes_from_the_configmap_the_spec_names() -> None:
    job = m.render_job(_spec("kubernetes: {storage_proxy: 'sweeper-storage-proxy:13000', "
                             "storage_proxy_ca: sweeper-proxy-ca}"))
    volumes = {v["name"]: v for v in _pod(job)["volumes"]}
    assert volumes["sweeper-proxy-ca"]["configMap"] == {
        "name": "sweeper-proxy-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert _env(job)["SWEEPER_PROXY_CA"]["value"] == "/etc/sweeper-proxy-ca/ca.crt"
    assert validate_k8s_objects([job]) == []


def test_no_token_and_no_ca_without_a_proxy() -> None:
    job = m.render_job(_spec())
    assert "sweeper-proxy" not in yaml.safe_dump(job)
    with pytest.raises(SpecError, match="storage_proxy_ca: names the CA of a storage proxy"):
        _spec("kubernetes: {storage_proxy_ca: ca}")
