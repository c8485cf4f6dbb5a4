"""Storage roots and the strict check that every URI lies under one.

A URI that came over the wire (a segment, a request's destination) is untrusted: fsspec
would happily resolve a scheme-less string as a local file, ``http://`` as a fetch, a
``::`` chain as a stack of filesystems, and s3fs/botocore accept ARNs as buckets. So a
URI is never handed to fsspec. It must be the configured root's exact URL, a ``/``, and
a relative key of plain path parts; only that key, joined to the root's own path,
reaches a storage engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from objstore_payload.errors import StoreConfigError, UriNotAllowedError

__all__ = ["StoreRoot", "check_key"]

MAX_KEY_LENGTH: Final = 1024
_URL: Final = re.compile(r"\A([a-z][a-z0-9+.-]{0,31})://(.*)\Z", re.DOTALL)
_ROOT_PART: Final = re.compile(r"\A[A-Za-z0-9_~=+@,-][A-Za-z0-9._~=+@,-]{0,254}\Z")
_S3_BUCKET: Final = re.compile(r"\A[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
# A relative key: 1-32 parts of safe characters, none starting with "." (so no "." or
# "..", and no hidden temp files), no empty part, no "%" (no percent-encoded tricks).
_KEY: Final = re.compile(
    r"\A[A-Za-z0-9_-][A-Za-z0-9._=-]{0,254}(?:/[A-Za-z0-9_-][A-Za-z0-9._=-]{0,254}){0,31}\Z"
)
_S3_PROTOCOLS: Final = frozenset({"s3", "s3a"})


def _show(value: object) -> str:
    """A log-safe rendering of an untrusted value: escaped and bounded."""
    text = ascii(value)
    return text if len(text) <= 160 else text[:157] + "..."


def check_key(key: str) -> str:
    """``key`` if it is a plain relative key (see module doc), else `UriNotAllowedError`."""
    if type(key) is not str or len(key) > MAX_KEY_LENGTH or not _KEY.match(key):
        raise UriNotAllowedError(f"{_show(key)} is not a plain relative key")
    return key


@dataclass(frozen=True, slots=True)
class StoreRoot:
    """A parsed, normalized storage root such as ``s3://bucket/run/payloads``."""

    url: str
    """Normalized URL, no trailing slash: every accepted URI starts with ``url + "/"``."""
    protocol: str
    """fsspec protocol name (``s3``, ``file``, ``memory``, ``gs``...)."""
    bucket: str
    """Bucket (or netloc) part; empty for ``file``."""
    prefix: str
    """Path under the bucket, no leading or trailing slash (may be empty)."""

    @classmethod
    def parse(cls, url: str) -> StoreRoot:
        """Parse a root URL from configuration.

        Accepts ``scheme://bucket/prefix``, ``file:///absolute/path`` and, for
        convenience, a bare absolute path (taken as ``file://``). Roots come from
        trusted configuration, but are held to the same rules as keys so that a typo
        such as ``s3://bucket//x`` fails here instead of at the first write.
        """
        if type(url) is not str or not url:
            raise StoreConfigError(f"storage root must be a non-empty string, got {_show(url)}")
        if url.startswith("/"):
            url = "file://" + url
        match = _URL.match(url)
        if match is None:
            raise StoreConfigError(
                f"storage root {_show(url)} is not a URL like s3://bucket/prefix or file:///path"
            )
        protocol, rest = match.group(1), match.group(2).rstrip("/")
        if protocol == "file":
            if not rest.startswith("/"):
                raise StoreConfigError(
                    f"file root {_show(url)} must be absolute: file:///absolute/path"
                )
            bucket, parts = "", rest[1:].split("/")
        else:
            bucket, _, path = rest.partition("/")
            parts = path.split("/") if path else []
            if protocol in _S3_PROTOCOLS and not _S3_BUCKET.match(bucket):
                raise StoreConfigError(f"{_show(bucket)} is not a valid S3 bucket name")
            if not bucket or not _ROOT_PART.match(bucket):
                raise StoreConfigError(f"storage root {_show(url)} has no valid bucket or netloc")
        for part in parts:
            if not _ROOT_PART.match(part) or part in (".", ".."):
                raise StoreConfigError(
                    f"storage root {_show(url)} has an invalid path part {_show(part)}"
                )
        if protocol == "file" and not parts:
            raise StoreConfigError("a file root must name a directory below /")
        prefix = "/".join(parts)
        if protocol == "file":
            normalized = f"file:///{prefix}"
        else:
            normalized = f"{protocol}://{bucket}" + (f"/{prefix}" if prefix else "")
        return cls(url=normalized, protocol=protocol, bucket=bucket, prefix=prefix)

    @property
    def is_s3(self) -> bool:
        """True for ``s3://`` and ``s3a://`` roots."""
        return self.protocol in _S3_PROTOCOLS

    @property
    def fs_root(self) -> str:
        """The root as a path in the storage engine's own namespace (no protocol)."""
        if self.protocol == "file":
            return "/" + self.prefix
        if self.protocol == "memory":
            return "/" + "/".join(p for p in (self.bucket, self.prefix) if p)
        return "/".join(p for p in (self.bucket, self.prefix) if p)

    def relative_key(self, uri: str) -> str:
        """The key of ``uri`` under this root, or `UriNotAllowedError` (before any I/O).

        ``uri`` must be exactly ``self.url + "/" + key`` with ``key`` a plain relative
        key: another scheme or bucket, an ARN, a ``::`` chain, ``..``, ``//``, ``%``,
        a query string, control characters or a scheme-less string are all refused.
        """
        if type(uri) is not str:
            raise UriNotAllowedError(f"a URI must be a string, got {type(uri).__name__}")
        head = self.url + "/"
        if not uri.startswith(head):
            raise UriNotAllowedError(f"{_show(uri)} is not under the storage root {self.url}")
        key = uri[len(head) :]
        if len(self.prefix) + 1 + len(key) > MAX_KEY_LENGTH or not _KEY.match(key):
            raise UriNotAllowedError(f"{_show(uri)} is not a plain key under {self.url}")
        return key

    def relative_prefix(self, uri: str) -> str:
        """Like `relative_key`, but the root itself is also accepted (as ``""``)."""
        if type(uri) is str and uri.rstrip("/") == self.url:
            return ""
        return self.relative_key(uri.rstrip("/") if type(uri) is str else uri)

    def uri(self, key: str) -> str:
        """The URI of ``key`` (checked) under this root."""
        return f"{self.url}/{check_key(key)}"

    def fs_path(self, key: str) -> str:
        """The engine-level path of an already checked ``key``."""
        return f"{self.fs_root}/{key}"
