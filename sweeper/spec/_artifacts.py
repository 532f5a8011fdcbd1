"""The ``artifacts:`` section (where trials' files go: a directory, or an S3 / MinIO bucket),
and the S3 location checks ``data:`` shares with it. Credentials never go in the spec."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sweeper.spec.checks import BUCKET_RE, NAME_RE, Checks
from sweeper.spec.model import ARTIFACT_STORES, ArtifactsSpec
from sweeper.spec.yamldoc import Path_

ARTIFACT_KEYS = ("store", "path", "bucket", "prefix", "endpoint_url", "region",
                  "credentials_secret")
_CREDENTIAL_KEYS = ("access_key", "secret_key", "access_key_id", "secret_access_key",
                    "aws_access_key_id", "aws_secret_access_key", "session_token",
                    "aws_session_token", "password", "token", "credentials")


def artifacts_section(v: Checks, value: Any, path: Path_) -> ArtifactsSpec:
    if value is None:
        return ArtifactsSpec()
    no_credentials(v, value, path, "artifacts.credentials_secret")
    m = v.mapping(value, path, ARTIFACT_KEYS)
    store = v.choice(m.get("store", "filesystem"), (*path, "store"), ARTIFACT_STORES)
    only = {"filesystem": ("store", "path"),
            "s3": ("store", "bucket", "prefix", "endpoint_url", "region",
                   "credentials_secret")}[store]
    for key in m:
        if key not in only:
            other = "s3" if store == "filesystem" else "filesystem"
            raise v.err((*path, key), f"{key!r} applies to store: {other}, not {store}")
    if store == "filesystem":
        fs_path = v.string(m["path"], (*path, "path")) if m.get("path") is not None \
            else None
        return ArtifactsSpec(store="filesystem", path=fs_path)
    return s3_location(v, m, path)


def no_credentials(v: Checks, value: Any, path: Path_, secret_key: str) -> None:
    if isinstance(value, dict):
        for key in value:
            if str(key).lower() in _CREDENTIAL_KEYS:
                raise v.err((*path, key), "credentials never go in the spec: set "
                            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
                            "environment (in Kubernetes, a Secret named by "
                            f"{secret_key})")


def s3_location(v: Checks, m: Mapping[str, Any], path: Path_) -> ArtifactsSpec:
    """Bucket, prefix, endpoint, region and credentials Secret of an S3 store."""
    bucket = v.string(v.require(m, "bucket", path), (*path, "bucket"))
    if not BUCKET_RE.match(bucket) or ".." in bucket:
        raise v.err((*path, "bucket"), f"{bucket!r} is not a valid bucket name (3-63 "
                                       "lowercase letters, digits, '.' and '-')")
    prefix = m.get("prefix")
    prefix = v.string(prefix, (*path, "prefix")).strip("/") if prefix is not None else ""
    endpoint = m.get("endpoint_url")
    if endpoint is not None:
        endpoint = endpoint_url(v, endpoint, (*path, "endpoint_url"))
    region = m.get("region")
    if region is not None:
        region = v.string(region, (*path, "region"))
    secret = m.get("credentials_secret")
    if secret is not None:
        secret = v.string(secret, (*path, "credentials_secret"))
        if not NAME_RE.match(secret):
            raise v.err((*path, "credentials_secret"),
                        f"{secret!r} is not a valid Kubernetes name")
    return ArtifactsSpec(store="s3", bucket=bucket, prefix=prefix, endpoint_url=endpoint,
                         region=region, credentials_secret=secret)


def endpoint_url(v: Checks, value: Any, path: Path_) -> str:
    endpoint = v.string(value, path)
    if not re.match(r"^https?://[^/\s]+", endpoint):
        raise v.err(path, f"expected http(s)://host[:port], got {endpoint!r}")
    if "@" in endpoint.split("://", 1)[1].split("/", 1)[0]:
        raise v.err(path, "credentials never go in the spec: remove user:password@ and "
                          "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the "
                          "environment")
    return endpoint
