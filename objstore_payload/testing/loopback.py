"""What the test servers on 127.0.0.1 (moto, Ceph RGW) share: how a client reaches them."""

from __future__ import annotations

from typing import Any

from objstore_payload.store.config import S3Options

__all__ = ["create_bucket", "loopback_s3_options"]


def loopback_s3_options(
    endpoint_url: str, access_key_id: str, secret_access_key: str, **overrides: Any
) -> S3Options:
    """Path-style options with static credentials for a server on 127.0.0.1."""
    values: dict[str, Any] = {
        "endpoint_url": endpoint_url,
        "addressing_style": "path",
        "region": "us-east-1",
        "access_key_id": access_key_id,
        "secret_access_key": secret_access_key,
    }
    values.update(overrides)
    return S3Options(**values)


def create_bucket(options: S3Options, bucket: str, *, if_missing: bool = False) -> None:
    """Create ``bucket`` (only when it does not exist, with ``if_missing``)."""
    from objstore_payload.store.s3 import make_boto3_client

    client = make_boto3_client(options)
    try:
        if if_missing:
            names = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            if bucket in names:
                return
        client.create_bucket(Bucket=bucket)
    finally:
        client.close()
