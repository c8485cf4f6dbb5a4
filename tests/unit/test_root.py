"""Storage roots and the strict URI check."""

from __future__ import annotations

import pytest

from objstore_payload import StoreConfigError, UriNotAllowedError
from objstore_payload.store import StoreRoot


@pytest.mark.parametrize(
    ("url", "normalized", "fs_root"),
    [
        ("s3://bucket/run/payloads/", "s3://bucket/run/payloads", "bucket/run/payloads"),
        ("s3://my.bucket-1", "s3://my.bucket-1", "my.bucket-1"),
        ("file:///data/payloads", "file:///data/payloads", "/data/payloads"),
        ("/data/payloads", "file:///data/payloads", "/data/payloads"),
        ("memory://demo/x", "memory://demo/x", "/demo/x"),
        ("gs://bucket/p", "gs://bucket/p", "bucket/p"),
    ],
)
def test_roots_are_normalized(url: str, normalized: str, fs_root: str) -> None:
    root = StoreRoot.parse(url)
    assert root.url == normalized
    assert root.fs_root == fs_root


@pytest.mark.parametrize(
    "url",
    [
        "",
        "bucket/prefix",
        "relative/path",
        "s3://",
        "s3://Bucket/x",
        "s3://bu/x",
        "s3://arn:aws:s3:us-east-1:1:accesspoint/ap",
        "s3://bucket//x",
        "s3://bucket/a/../b",
        "s3://bucket/a/./b",
        "s3://bucket/a?versionId=1",
        "s3://bucket/a#b",
        "s3://bucket/a%2F",
        "simplecache::s3://bucket/a",
        "file://relative",
        "file:///",
        "s3://bucket/a\nb",
    ],
)
def test_bad_roots_are_refused(url: str) -> None:
    with pytest.raises(StoreConfigError):
        StoreRoot.parse(url)


def test_relative_key_and_uri_round_trip() -> None:
    root = StoreRoot.parse("s3://bucket/run")
    assert root.relative_key("s3://bucket/run/v7/abc.bin") == "v7/abc.bin"
    assert root.uri("v7/abc.bin") == "s3://bucket/run/v7/abc.bin"
    assert root.fs_path("v7/abc.bin") == "bucket/run/v7/abc.bin"
    assert root.relative_prefix("s3://bucket/run") == ""
    assert root.relative_prefix("s3://bucket/run/v7/") == "v7"


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/runx/v7/a.bin",
        "s3://bucket2/run/v7/a.bin",
        "s3a://bucket/run/v7/a.bin",
        "S3://bucket/run/v7/a.bin",
        "s3://bucket/run/v7/../../etc/a.bin",
        "s3://bucket/run/v7/%2e%2e/a.bin",
        "s3://bucket/run/v7/a.bin?versionId=x",
        "s3://bucket/run/v7/a.bin\x00",
        "s3://bucket/run/v7/ a.bin",
        "s3://bucket/run/-/../a.bin",
        "bucket/run/v7/a.bin",
        "run/v7/a.bin",
    ],
)
def test_hostile_uris_are_refused(uri: str) -> None:
    with pytest.raises(UriNotAllowedError):
        StoreRoot.parse("s3://bucket/run").relative_key(uri)


def test_non_string_uri_is_refused() -> None:
    with pytest.raises(UriNotAllowedError):
        StoreRoot.parse("s3://bucket/run").relative_key(b"s3://bucket/run/a.bin")  # type: ignore[arg-type]


def test_error_messages_escape_control_characters() -> None:
    with pytest.raises(UriNotAllowedError) as info:
        StoreRoot.parse("s3://bucket/run").relative_key("s3://evil/\x1b[31mred\n")
    assert "\x1b" not in str(info.value)
    assert "\n" not in str(info.value)
