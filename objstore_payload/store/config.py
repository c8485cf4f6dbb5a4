"""Typed store configuration: every option with its default and its environment variable.

`StoreConfig.from_env` reads ``OBJSTORE_PAYLOAD_*`` variables; credentials are never
read here: when ``access_key_id`` is unset, botocore's usual chain applies
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, shared files,
container and instance roles). botocore also honours ``AWS_ENDPOINT_URL_S3``,
``AWS_ENDPOINT_URL`` and ``AWS_REGION`` by itself.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from objstore_payload.errors import StoreConfigError

__all__ = ["ENV_PREFIX", "ReadOptions", "RetryPolicy", "S3Options", "StoreConfig"]

ENV_PREFIX: Final = "OBJSTORE_PAYLOAD_"

Engine = Literal["auto", "fsspec", "boto3", "obstore", "local"]
AddressingStyle = Literal["auto", "path", "virtual"]
ChecksumMode = Literal["when_supported", "when_required"]


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The one retry layer over reads that come back short or fail transiently.

    botocore retries a failed request before a response arrives (standard mode, see
    `S3Options.max_attempts`); this layer covers what it cannot: a body cut short, a
    short read of a file another node just wrote on a shared filesystem. Delays grow
    ``initial_backoff_s * 2**n`` up to ``max_backoff_s``; no retry starts after
    ``total_timeout_s`` from the first attempt.
    """

    max_attempts: int = 5
    """Attempts per range, the first included. Env: ``OBJSTORE_PAYLOAD_RETRY_MAX_ATTEMPTS``."""
    initial_backoff_s: float = 0.1
    """First delay. Env: ``OBJSTORE_PAYLOAD_RETRY_INITIAL_BACKOFF_S``."""
    max_backoff_s: float = 2.0
    """Largest delay. Env: ``OBJSTORE_PAYLOAD_RETRY_MAX_BACKOFF_S``."""
    total_timeout_s: float = 60.0
    """Wall-clock budget over all attempts. Env: ``OBJSTORE_PAYLOAD_RETRY_TOTAL_TIMEOUT_S``."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise StoreConfigError("retry max_attempts must be at least 1")
        if min(self.initial_backoff_s, self.max_backoff_s, self.total_timeout_s) < 0:
            raise StoreConfigError("retry delays and timeout must be non-negative")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        return float(min(self.initial_backoff_s * 2 ** (attempt - 1), self.max_backoff_s))


class S3Options(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Options for ``s3://`` roots (AWS S3, MinIO, Ceph RGW, R2...)."""

    endpoint_url: str | None = None
    """S3 endpoint for non-AWS stores, e.g. ``http://127.0.0.1:9000``.
    Env: ``OBJSTORE_PAYLOAD_S3_ENDPOINT_URL`` (botocore also reads ``AWS_ENDPOINT_URL_S3``)."""
    region: str | None = None
    """Region name. Env: ``OBJSTORE_PAYLOAD_S3_REGION`` (else ``AWS_REGION``)."""
    addressing_style: AddressingStyle = "auto"
    """``path`` for MinIO and Ceph RGW behind a plain endpoint; ``virtual`` for
    bucket-in-hostname. Env: ``OBJSTORE_PAYLOAD_S3_ADDRESSING_STYLE``."""
    max_pool_connections: int = 64
    """HTTP connections per client. botocore's default of 10 caps concurrent ranged GETs.
    Env: ``OBJSTORE_PAYLOAD_S3_MAX_POOL_CONNECTIONS``."""
    checksum_mode: ChecksumMode | None = None
    """Request checksum calculation and response validation. boto3 >= 1.36 defaults to
    ``when_supported``, which some S3 look-alikes reject (``MissingContentMD5``,
    ``XAmzContentSHA256Mismatch``); set ``when_required`` for those. Unset keeps the SDK
    default. Env: ``OBJSTORE_PAYLOAD_S3_CHECKSUM_MODE``."""
    access_key_id: str | None = None
    """Static credentials; unset uses the AWS credential chain.
    Env: ``OBJSTORE_PAYLOAD_S3_ACCESS_KEY_ID``."""
    secret_access_key: str | None = None
    """Env: ``OBJSTORE_PAYLOAD_S3_SECRET_ACCESS_KEY``."""
    session_token: str | None = None
    """Env: ``OBJSTORE_PAYLOAD_S3_SESSION_TOKEN``."""
    profile: str | None = None
    """Named profile from the shared AWS files. Env: ``OBJSTORE_PAYLOAD_S3_PROFILE``."""
    anonymous: bool = False
    """Send unsigned requests. Env: ``OBJSTORE_PAYLOAD_S3_ANONYMOUS``."""
    connect_timeout_s: float = 5.0
    """Env: ``OBJSTORE_PAYLOAD_S3_CONNECT_TIMEOUT_S``."""
    read_timeout_s: float = 30.0
    """Env: ``OBJSTORE_PAYLOAD_S3_READ_TIMEOUT_S``."""
    max_attempts: int = 3
    """botocore standard-mode attempts per request (retries 5xx, SlowDown, resets before
    the response). Env: ``OBJSTORE_PAYLOAD_S3_MAX_ATTEMPTS``."""

    def __post_init__(self) -> None:
        if self.max_pool_connections < 1:
            raise StoreConfigError("s3 max_pool_connections must be at least 1")
        if self.max_attempts < 1:
            raise StoreConfigError("s3 max_attempts must be at least 1")


class ReadOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How one read pass is issued."""

    max_concurrency: int = 64
    """Requests in flight at once for network stores.
    Env: ``OBJSTORE_PAYLOAD_READ_MAX_CONCURRENCY``."""
    coalesce_gap: int | None = None
    """Merge ranges of one object whose gap is at most this many bytes; unset uses the
    engine's default (256 KiB for object stores, 4 KiB for local files).
    Env: ``OBJSTORE_PAYLOAD_READ_COALESCE_GAP``."""
    max_block: int = 16 << 20
    """Never merge past this many bytes per request. Env: ``OBJSTORE_PAYLOAD_READ_MAX_BLOCK``."""
    local_threads: int = 0
    """Local files: 0 reads in the calling thread with a tight pread loop (fastest from
    page cache); N > 0 spreads files over N threads, for network filesystems where each
    read waits. Env: ``OBJSTORE_PAYLOAD_READ_LOCAL_THREADS``."""
    local_open_files: int = 64
    """Local files: descriptors kept open (least recently used closed first), so the two
    passes of a window read open each blob once; 0 closes each after its read. Env:
    ``OBJSTORE_PAYLOAD_READ_LOCAL_OPEN_FILES``."""

    def __post_init__(self) -> None:
        if (
            self.max_concurrency < 1
            or self.max_block < 1
            or self.local_threads < 0
            or self.local_open_files < 0
        ):
            raise StoreConfigError("read options must be positive")
        if self.coalesce_gap is not None and self.coalesce_gap < 0:
            raise StoreConfigError("read coalesce_gap must be non-negative")


class StoreConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything needed to open a `Store`."""

    root: str
    """Root URL: ``s3://bucket/prefix``, ``file:///path``, ``memory://name`` or any fsspec
    protocol. Env: ``OBJSTORE_PAYLOAD_ROOT``."""
    engine: Engine = "auto"
    """Storage engine: ``auto`` picks ``local`` for ``file://`` and ``fsspec`` (s3fs for S3)
    otherwise; ``boto3`` is a thread-pool S3 engine; ``obstore`` is the Rust object_store
    S3 engine (the ``obstore`` extra; not fork-safe once used, so DataLoader workers need
    ``spawn`` or ``forkserver``). Env: ``OBJSTORE_PAYLOAD_ENGINE``."""
    s3: S3Options = S3Options()
    read: ReadOptions = ReadOptions()
    retry: RetryPolicy = RetryPolicy()
    verify_writes: bool = True
    """Object stores: after each upload, check the stored size (one HEAD) and upload again
    when it differs, so a body cut short on its way (by a proxy, a load balancer) is never
    left behind as a blob. Local files are written atomically and need no check. Env:
    ``OBJSTORE_PAYLOAD_VERIFY_WRITES``."""
    storage_options: dict[str, Any] = {}
    """Extra keyword arguments for the fsspec filesystem of non-S3 protocols."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StoreConfig:
        """A config from parsed JSON/TOML; strings are accepted for numbers and booleans."""
        try:
            return msgspec.convert(dict(data), cls, strict=False)
        except (msgspec.ValidationError, StoreConfigError) as exc:
            raise StoreConfigError(f"invalid store config: {exc}") from exc

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> StoreConfig:
        """A config from a ``.toml`` or ``.json`` file."""
        file = Path(path)
        try:
            raw = file.read_bytes()
            data = tomllib.loads(raw.decode()) if file.suffix == ".toml" else json.loads(raw)
        except (OSError, ValueError) as exc:
            raise StoreConfigError(f"cannot read store config {file}: {exc}") from exc
        return cls.from_mapping(data)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        base: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> StoreConfig:
        """A config from ``OBJSTORE_PAYLOAD_*`` variables (see each option) over ``base``
        (e.g. a file's table), with ``overrides`` (e.g. ``root=...``) taking precedence."""
        env = os.environ if environ is None else environ
        data: dict[str, Any] = {
            key: dict(value) if isinstance(value, Mapping) else value
            for key, value in (base or {}).items()
        }
        sections = {"s3": S3Options, "read": ReadOptions, "retry": RetryPolicy}
        for name, value in env.items():
            if not name.startswith(ENV_PREFIX):
                continue
            key = name[len(ENV_PREFIX) :].lower()
            for section, kind in sections.items():
                sub = key.removeprefix(section + "_")
                if sub != key and sub in kind.__struct_fields__:
                    data.setdefault(section, {})[sub] = value
                    break
            else:
                if key in ("root", "engine"):
                    data[key] = value
                elif key == "verify_writes":
                    data[key] = value.strip().lower() not in ("0", "false", "no", "off")
        data.update(overrides)
        if "root" not in data:
            raise StoreConfigError(f"no storage root: set {ENV_PREFIX}ROOT")
        return cls.from_mapping(data)
