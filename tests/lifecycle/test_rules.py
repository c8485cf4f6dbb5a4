"""Bucket lifecycle rules: generated, merged into a bucket's existing rules, and the same
values as the Terraform module."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from objstore_payload.lifecycle import rules
from objstore_payload.lifecycle.rules import (
    LifecycleSettings,
    apply_rules,
    build_rules,
    mc_ilm_commands,
)

TERRAFORM = Path(__file__).resolve().parents[2] / "terraform"


def test_rules_expire_the_prefix_and_abort_uploads_bucket_wide() -> None:
    expire, abort = build_rules(
        "/run/payloads/", LifecycleSettings(expire_days=3, abort_incomplete_days=1)
    )
    assert expire["Filter"] == {"Prefix": "run/payloads/"}
    assert expire["Expiration"] == {"Days": 3}
    assert abort["Filter"] == {}
    assert abort["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    with pytest.raises(ValueError, match="whole bucket"):
        build_rules("/")
    with pytest.raises(ValueError, match="at least 1"):
        LifecycleSettings(expire_days=0, abort_incomplete_days=1)


def test_apply_merges_with_rules_the_bucket_already_has() -> None:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bucket-a")
        theirs = {
            "ID": "logs-expire",
            "Filter": {"Prefix": "logs/"},
            "Status": "Enabled",
            "Expiration": {"Days": 30},
        }
        client.put_bucket_lifecycle_configuration(
            Bucket="bucket-a", LifecycleConfiguration={"Rules": [theirs]}
        )
        apply_rules(client, "bucket-a", build_rules("run/payloads"))
        apply_rules(
            client, "bucket-a", build_rules("run/payloads", LifecycleSettings(5, 2))
        )  # idempotent by ID
        got = client.get_bucket_lifecycle_configuration(Bucket="bucket-a")["Rules"]
        assert [r["ID"] for r in got] == [
            "logs-expire",
            "objstore-payload-expire-run-payloads-ea27e40b",
            "objstore-payload-abort-incomplete-multipart",
        ]
        assert got[1]["Expiration"] == {"Days": 5}
        client.create_bucket(Bucket="bucket-empty")
        assert len(apply_rules(client, "bucket-empty", build_rules("p"))) == 2


def test_mc_ilm_command() -> None:
    (command,) = mc_ilm_commands("local", "payloads", "run/payloads", LifecycleSettings(2, 1))
    assert command == "mc ilm rule add --expire-days 2 --prefix run/payloads/ local/payloads"


def unquote(value: object) -> object:
    """python-hcl2 keeps the quotes of block labels; drop them."""
    if isinstance(value, dict):
        return {k.strip('"'): unquote(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unquote(v) for v in value]
    return value


def test_terraform_and_python_share_the_lifecycle_values() -> None:
    hcl2 = pytest.importorskip("hcl2")
    shared = json.loads((TERRAFORM / "lifecycle.json").read_text())
    assert rules.default_settings() == LifecycleSettings(
        shared["expire_days"], shared["abort_incomplete_days"]
    )
    # the built-in fallback (for installs without the terraform folder) matches too
    assert shared == {
        "expire_days": rules.BUILTIN_DEFAULTS.expire_days,
        "abort_incomplete_days": rules.BUILTIN_DEFAULTS.abort_incomplete_days,
    }
    with (TERRAFORM / "main.tf").open() as file:
        main = unquote(hcl2.load(file))
    (config,) = [
        r["aws_s3_bucket_lifecycle_configuration"]
        for r in main["resource"]
        if "aws_s3_bucket_lifecycle_configuration" in r
    ]
    expire_rule, abort_rule = config["payloads"]["rule"]
    assert "local.expire_days" in json.dumps(expire_rule["expiration"])
    assert "local.abort_incomplete_days" in json.dumps(
        abort_rule["abort_incomplete_multipart_upload"]
    )
    (locals_block,) = main["locals"]
    assert "lifecycle.json" in json.dumps(locals_block["defaults"])
    assert "local.defaults.expire_days" in json.dumps(locals_block["expire_days"])


def test_cli_prints_and_applies_the_rules(capsys: pytest.CaptureFixture[str]) -> None:
    from objstore_payload.cli.main import main

    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bucket-cli")
        assert (
            main(
                [
                    "lifecycle",
                    "--bucket",
                    "bucket-cli",
                    "--prefix",
                    "run/payloads",
                    "--expire-days",
                    "3",
                    "--apply",
                ]
            )
            == 0
        )
        got = boto3.client("s3", region_name="us-east-1").get_bucket_lifecycle_configuration(
            Bucket="bucket-cli"
        )["Rules"]
    out = capsys.readouterr().out
    assert '"Days": 3' in out
    assert "mc ilm rule add --expire-days 3 --prefix run/payloads/ local/bucket-cli" in out
    assert "applied to s3://bucket-cli: 2 rules" in out
    assert [r["ID"] for r in got] == [
        "objstore-payload-expire-run-payloads-ea27e40b",
        "objstore-payload-abort-incomplete-multipart",
    ]
    assert main(["lifecycle", "--bucket", "x", "--prefix", "/"]) == 2


def test_rule_ids_of_look_alike_prefixes_differ() -> None:
    assert build_rules("run/a-b")[0]["ID"] != build_rules("run/a/b")[0]["ID"]
