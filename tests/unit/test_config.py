"""Typed store configuration from mappings, files and the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from objstore_payload import StoreConfig, StoreConfigError
from objstore_payload.store import RetryPolicy, S3Options
from objstore_payload.store.s3 import botocore_config_kwargs


def test_from_env_reads_every_section() -> None:
    config = StoreConfig.from_env(
        {
            "OBJSTORE_PAYLOAD_ROOT": "s3://bucket/run",
            "OBJSTORE_PAYLOAD_ENGINE": "boto3",
            "OBJSTORE_PAYLOAD_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
            "OBJSTORE_PAYLOAD_S3_ADDRESSING_STYLE": "path",
            "OBJSTORE_PAYLOAD_S3_MAX_POOL_CONNECTIONS": "128",
            "OBJSTORE_PAYLOAD_S3_CHECKSUM_MODE": "when_required",
            "OBJSTORE_PAYLOAD_READ_COALESCE_GAP": "0",
            "OBJSTORE_PAYLOAD_RETRY_TOTAL_TIMEOUT_S": "2.5",
            "OBJSTORE_PAYLOAD_UNRELATED": "ignored",
            "HOME": "/root",
        }
    )
    assert config.root == "s3://bucket/run"
    assert config.engine == "boto3"
    assert config.s3.endpoint_url == "http://127.0.0.1:9000"
    assert config.s3.addressing_style == "path"
    assert config.s3.max_pool_connections == 128
    assert config.s3.checksum_mode == "when_required"
    assert config.read.coalesce_gap == 0
    assert config.retry.total_timeout_s == 2.5


def test_overrides_win_and_root_is_required() -> None:
    env = {"OBJSTORE_PAYLOAD_ROOT": "s3://bucket/a"}
    assert StoreConfig.from_env(env, root="file:///x").root == "file:///x"
    with pytest.raises(StoreConfigError, match="OBJSTORE_PAYLOAD_ROOT"):
        StoreConfig.from_env({})


@pytest.mark.parametrize(
    "env",
    [
        {"OBJSTORE_PAYLOAD_S3_ADDRESSING_STYLE": "sideways"},
        {"OBJSTORE_PAYLOAD_S3_MAX_POOL_CONNECTIONS": "many"},
        {"OBJSTORE_PAYLOAD_S3_MAX_POOL_CONNECTIONS": "0"},
        {"OBJSTORE_PAYLOAD_ENGINE": "rocket"},
        {"OBJSTORE_PAYLOAD_RETRY_MAX_ATTEMPTS": "0"},
    ],
)
def test_bad_values_are_typed_errors(env: dict[str, str]) -> None:
    with pytest.raises(StoreConfigError):
        StoreConfig.from_env({"OBJSTORE_PAYLOAD_ROOT": "s3://bucket/a", **env})


def test_from_toml_and_json_files(tmp_path: Path) -> None:
    toml = tmp_path / "store.toml"
    toml.write_text('root = "s3://bucket/a"\n[s3]\naddressing_style = "path"\n')
    assert StoreConfig.from_file(toml).s3.addressing_style == "path"
    json = tmp_path / "store.json"
    json.write_text('{"root": "memory://x", "read": {"max_concurrency": 8}}')
    assert StoreConfig.from_file(json).read.max_concurrency == 8
    (tmp_path / "bad.json").write_text('{"root": "memory://x", "colour": 1}')
    with pytest.raises(StoreConfigError, match="colour"):
        StoreConfig.from_file(tmp_path / "bad.json")
    with pytest.raises(StoreConfigError, match="cannot read"):
        StoreConfig.from_file(tmp_path / "missing.toml")


def test_botocore_settings_follow_options() -> None:
    kwargs = botocore_config_kwargs(
        S3Options(addressing_style="path", checksum_mode="when_required", max_pool_connections=7)
    )
    assert kwargs["s3"] == {"addressing_style": "path"}
    assert kwargs["max_pool_connections"] == 7
    assert kwargs["request_checksum_calculation"] == "when_required"
    assert kwargs["response_checksum_validation"] == "when_required"
    assert kwargs["retries"] == {"mode": "standard", "total_max_attempts": 3}
    assert "s3" not in botocore_config_kwargs(S3Options())


def test_retry_delays_grow_and_cap() -> None:
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=0.3)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]
