"""The ``data:`` section: the dataset every trial reads (``ctx.data_dir``), a directory or an
``s3://bucket/prefix`` (endpoint, region and credentials as for artifacts, defaulting to
theirs)."""

from __future__ import annotations

import re
from typing import Any

from sweeper.spec._artifacts import no_credentials, s3_location
from sweeper.spec.checks import BUCKET_RE, Checks
from sweeper.spec.model import ArtifactsSpec, DataSpec
from sweeper.spec.yamldoc import Path_

DATA_KEYS = ("path", "s3", "endpoint_url", "region", "credentials_secret")
_S3_URL_RE = re.compile(r"^s3://([^/]+)(?:/(.*))?$")


def _s3_url(v: Checks, value: Any, path: Path_) -> tuple[str, str | None]:
    """(bucket, prefix) of an ``s3://bucket/prefix`` URL."""
    url = v.string(value, path)
    match = _S3_URL_RE.match(url)
    if not match:
        raise v.err(path, f"expected s3://bucket/prefix, got {url!r}")
    if not BUCKET_RE.match(match.group(1)) or ".." in match.group(1):
        raise v.err(path, f"{match.group(1)!r} is not a valid bucket name (3-63 lowercase "
                          "letters, digits, '.' and '-')")
    return match.group(1), match.group(2) or None


def data_section(v: Checks, value: Any, path: Path_, artifacts: ArtifactsSpec) -> DataSpec:
    """The bucket, endpoint and secret are checked as for artifacts (``s3_location``)."""
    if value is None or value == {}:  # {}: the normalised form of "no data"
        return DataSpec()
    no_credentials(v, value, path, "data.credentials_secret")
    m = v.mapping(value, path, DATA_KEYS)
    sources = [k for k in ("path", "s3") if m.get(k) is not None]
    if len(sources) != 1:
        raise v.err(path, "data needs exactly one of path (a directory) or s3 (s3://bucket/"
                          "prefix)" + (f", got {' and '.join(sources)}" if sources else ""))
    if sources == ["path"]:
        for key in m:
            if key != "path":
                raise v.err((*path, key), f"{key!r} applies to data.s3 only")
        return DataSpec(path=v.string(m["path"], (*path, "path")).rstrip("/") or "/")
    bucket, prefix = _s3_url(v, m["s3"], (*path, "s3"))
    inherit = artifacts if artifacts.store == "s3" else ArtifactsSpec()
    s3 = s3_location(v, {"bucket": bucket, "prefix": prefix,
                         "endpoint_url": m.get("endpoint_url", inherit.endpoint_url),
                         "region": m.get("region", inherit.region),
                         "credentials_secret": m.get("credentials_secret",
                                                     inherit.credentials_secret)}, path)
    if artifacts.credentials_secret and s3.credentials_secret != artifacts.credentials_secret:
        raise v.err((*path, "credentials_secret"), "data and artifacts must use the same "
                    f"credentials Secret ({artifacts.credentials_secret!r}): the S3 client "
                    "reads one AWS_ACCESS_KEY_ID")
    return DataSpec(bucket=s3.bucket, prefix=s3.prefix, endpoint_url=s3.endpoint_url,
                    region=s3.region, credentials_secret=s3.credentials_secret)
