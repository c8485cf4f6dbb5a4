"""S3 clients built from `S3Options`, and the boto3 thread-pool engine.

Both engines get the same settings: one retry layer in botocore (standard mode, a fixed
number of attempts) and none in s3fs, so a persistent 503 costs ``max_attempts``
requests instead of retries stacked on retries; the store's own retry covers only what
botocore cannot see (bodies cut short).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from objstore_payload.store.coalesce import Block
from objstore_payload.store.config import S3Options
from objstore_payload.store.engine import (
    DeleteOutcome,
    Engine,
    InterruptedBody,
    ReadOutcome,
    request_failed,
)
from objstore_payload.store.fsspec_engine import (
    _is_invalid_range,
    _key_prefix,
    delete_batches,
    per_key_delete_errors,
)

__all__ = ["Boto3Engine", "botocore_config_kwargs", "make_boto3_client", "make_s3fs"]


def botocore_config_kwargs(options: S3Options) -> dict[str, Any]:
    """Keyword arguments for ``botocore.config.Config`` from ``options``."""
    kwargs: dict[str, Any] = {
        "max_pool_connections": options.max_pool_connections,
        "connect_timeout": options.connect_timeout_s,
        "read_timeout": options.read_timeout_s,
        "retries": {"mode": "standard", "total_max_attempts": options.max_attempts},
    }
    if options.addressing_style != "auto":
        kwargs["s3"] = {"addressing_style": options.addressing_style}
    if options.checksum_mode is not None:
        kwargs["request_checksum_calculation"] = options.checksum_mode
        kwargs["response_checksum_validation"] = options.checksum_mode
    return kwargs


def make_s3fs(options: S3Options) -> Any:
    """A private (uncached) ``s3fs.S3FileSystem`` configured from ``options``."""
    import s3fs

    client_kwargs: dict[str, Any] = {}
    if options.region:
        client_kwargs["region_name"] = options.region
    fs = s3fs.S3FileSystem(
        anon=options.anonymous,
        key=options.access_key_id,
        secret=options.secret_access_key,
        token=options.session_token,
        profile=options.profile,
        endpoint_url=options.endpoint_url,
        client_kwargs=client_kwargs,
        config_kwargs=botocore_config_kwargs(options),
        skip_instance_cache=True,
    )
    # s3fs retries some errors itself (5 times by default) on top of botocore's retries;
    # one layer is enough and keeps the worst case bounded.
    fs.retries = 1
    return fs


def make_boto3_client(options: S3Options) -> Any:
    """A boto3 S3 client configured from ``options`` (thread-safe)."""
    import boto3
    import botocore
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=options.access_key_id,
        aws_secret_access_key=options.secret_access_key,
        aws_session_token=options.session_token,
        profile_name=options.profile,
        region_name=options.region,
    )
    kwargs = botocore_config_kwargs(options)
    if options.anonymous:
        kwargs["signature_version"] = botocore.UNSIGNED
    return session.client("s3", endpoint_url=options.endpoint_url, config=Config(**kwargs))


def _translate(exc: Exception, path: str) -> Exception:
    """botocore errors as builtins (missing: FileNotFoundError, denied: PermissionError,
    anything else from botocore: OSError), cause kept."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, BotoCoreError):
        wrapped = OSError(f"{path}: {exc}")
        wrapped.__cause__ = exc
        return wrapped
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound", "NoSuchBucket"):
            error: Exception = FileNotFoundError(f"{path}: {code}")
        elif code in ("AccessDenied", "403", "Forbidden"):
            error = PermissionError(f"{path}: {code}")
        else:
            error = OSError(f"{path}: {code}: {exc}")
        error.__cause__ = exc
        return error
    return exc


class Boto3Engine(Engine):
    """S3 through boto3 on a thread pool: slower per GET than s3fs, but it works with
    moto's in-process mock and needs no event loop."""

    name: ClassVar[str] = "boto3"
    default_coalesce_gap: ClassVar[int] = 256 << 10

    def __init__(self, client: Any, *, max_concurrency: int = 64) -> None:
        self.client = client
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="payload-s3")

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def _get(self, block: Block) -> ReadOutcome:
        bucket, key = self._split(block.path)
        try:
            response = self.client.get_object(
                Bucket=bucket, Key=key, Range=f"bytes={block.start}-{block.end - 1}"
            )
        except Exception as exc:
            return b"" if _is_invalid_range(exc) else _translate(exc, block.path)
        try:
            with response["Body"] as body:
                data: bytes = body.read()
        except Exception as exc:
            # botocore retried the request, not a body that broke off after it began.
            error = InterruptedBody(f"{block.path}: the response body broke off: {exc!r}")
            error.__cause__ = exc
            return error
        return data

    def read_blocks(self, blocks: Sequence[Block]) -> list[ReadOutcome]:
        # docstring inherited
        if len(blocks) == 1:
            return [self._get(blocks[0])]
        return list(self._pool.map(self._get, blocks))

    def put(self, path: str, parts: Sequence[memoryview], size: int) -> None:
        # docstring inherited
        bucket, key = self._split(path)
        try:
            self.client.put_object(Bucket=bucket, Key=key, Body=b"".join(parts))
        except Exception as exc:
            raise _translate(exc, path) from exc

    def delete(self, paths: Sequence[str]) -> DeleteOutcome:
        # docstring inherited
        outcome = DeleteOutcome()
        for bucket, batch in delete_batches(paths):
            outcome.requests += 1
            try:
                response = self.client.delete_objects(
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except Exception as exc:
                error = request_failed(f"DeleteObjects on {bucket}", _translate(exc, bucket))
                outcome.failed.extend((f"{bucket}/{k}", error) for k in batch)
                continue
            outcome.failed.extend(per_key_delete_errors(bucket, response))
        return outcome

    def list(self, prefix: str) -> list[str]:
        # docstring inherited
        bucket, key_prefix = self._split(prefix)
        paginator = self.client.get_paginator("list_objects_v2")
        found: list[str] = []
        try:
            for page in paginator.paginate(Bucket=bucket, Prefix=_key_prefix(key_prefix)):
                found.extend(f"{bucket}/{obj['Key']}" for obj in page.get("Contents", []))
        except Exception as exc:
            raise _translate(exc, prefix) from exc
        return sorted(found)

    def size(self, path: str) -> int:
        # docstring inherited
        bucket, key = self._split(path)
        try:
            return int(self.client.head_object(Bucket=bucket, Key=key)["ContentLength"])
        except Exception as exc:
            raise _translate(exc, path) from exc

    def close(self) -> None:
        # docstring inherited
        self._pool.shutdown(wait=True)
        self.client.close()
